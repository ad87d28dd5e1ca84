"""Run 9 of the eleventh session: balanced_units as first kept (greedy: each long CTA's
head to the least loaded CTA; build/v1/submission.py = commit 388cee8's) against the
target-makespan version (bisection on T, heads just big enough, the fullest taker that
fits), and whole tiles, at tile_n 128 on one-wave shapes. Same timing as sched_ab2.py.
    python notes/h200/2026-12-01k/sched_ab4.py [ROUNDS]"""
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
import torch  # noqa: E402

import reference  # noqa: E402
import submission as S  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sched_ab import time_variant  # noqa: E402

spec = importlib.util.spec_from_file_location("v1", ROOT / "build/v1/submission.py")
V1 = importlib.util.module_from_spec(spec)
sys.modules["v1"] = V1
spec.loader.exec_module(V1)
ORIG_WS = S.sm90_work_schedule
SHAPES = {
    "bench 2": ([192, 320], 3072, 4096),
    "A G=2 N=2048 K=4096": ([64, 128], 2048, 4096),
    "B G=1 N=4096 K=4096": ([300], 4096, 4096),
    "E G=2 N=4096 K=2048": ([64, 200], 4096, 2048),
}


def with_generator(gen):
    def ws(sizes, cfg, num_sms):
        rows = S.build_tile_schedule(sizes, cfg.tile_m, cfg.tile_n)
        rows, phase_sizes = S.split_tiles_by_width(rows, sizes, cfg.widths)
        k_tiles = [k // S.SM90_PACKED_K_TILE for _, _, k, _ in sizes]
        return gen(rows, phase_sizes, k_tiles, num_sms, [S.SM90_BALANCE_KTILE_US[w] for w in cfg.widths],
                   S.SM90_BALANCE_UNIT_US, S.SM90_BALANCE_FIXUP_US)
    return ws


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    runner = S.get_runner(torch.device("cuda", 0), "sm90")
    whole, split = S.make_sm90_config(128), S.make_sm90_config(128, stream_k=True)
    table = {"whole": (whole, ORIG_WS), "balanced v1 (greedy)": (split, with_generator(V1.balanced_units)),
             "balanced v2 (target)": (split, with_generator(S.balanced_units))}
    results = {}
    for r in range(rounds):
        for name, (ms, n, k) in SHAPES.items():
            data_list = [reference.generate_input(m=ms, n=[n] * len(ms), k=[k] * len(ms), g=len(ms), seed=1111 + 42 * i)
                         for i in range(1, 16)]
            ref = reference.ref_kernel(([tuple(t.clone() for t in g) for g in data_list[0][0]], *data_list[0][1:]))
            for vname, (cfg, ws) in table.items():
                us, slots, ok = time_variant(runner, cfg, ws, data_list, ref)
                results.setdefault((name, vname), []).append(us)
                print(f"round {r} {name:20s} {vname:22s} {us:7.2f} us  slots {slots:3d} {'ok' if ok else 'MISMATCH'}",
                      flush=True)
    print("\nsummary (mean us per round):")
    for (name, vname), t in results.items():
        print(f"  {name:20s} {vname:22s} " + " / ".join(f"{x:.2f}" for x in t))


if __name__ == "__main__":
    main()
