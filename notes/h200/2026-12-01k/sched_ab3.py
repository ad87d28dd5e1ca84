"""Run 8 of the eleventh session: balanced_units on a round-robin base (the schedule's
order kept) against stream_k_units at tile_n 256, on the many-wave shapes (benchmarks 0
and 1, and G = 3 M = (40, 200, 129) N = 7168 K = 2048). Same timing as sched_ab2.py. Needs
notes/experiments/sm90_balanced_round_robin_base.patch applied (balanced_units' `base`).
    python notes/h200/2026-12-01k/sched_ab3.py [ROUNDS]"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
import torch  # noqa: E402

import eval as ev  # noqa: E402
import reference  # noqa: E402
import submission as S  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sched_ab import time_variant  # noqa: E402

ORIG_WS = S.sm90_work_schedule
SHAPES = {
    "bench 0": ([80, 176, 128, 72, 64, 248, 96, 160], 4096, 7168),
    "bench 1": ([40, 76, 168, 72, 164, 148, 196, 160], 7168, 2048),
    "C G=3 N=7168 K=2048": ([40, 200, 129], 7168, 2048),
}


def balanced_rr(sizes, cfg, num_sms):
    rows = S.build_tile_schedule(sizes, cfg.tile_m, cfg.tile_n)
    rows, phase_sizes = S.split_tiles_by_width(rows, sizes, cfg.widths)
    k_tiles = [k // S.SM90_PACKED_K_TILE for _, _, k, _ in sizes]
    return S.balanced_units(rows, phase_sizes, k_tiles, num_sms, *S.sm90_cost_model(cfg), base="round_robin")


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    runner = S.get_runner(torch.device("cuda", 0), "sm90")
    cfg = S.make_sm90_config(256, narrow=(96, 64), stream_k=True)
    table = {"256 stream-K": ORIG_WS, "256 balanced, round-robin base": balanced_rr}
    results = {}
    for r in range(rounds):
        for name, (ms, n, k) in SHAPES.items():
            data_list = [reference.generate_input(m=ms, n=[n] * len(ms), k=[k] * len(ms), g=len(ms), seed=1111 + 42 * i)
                         for i in range(1, 16)]
            ref = reference.ref_kernel(ev._clone_data(data_list[0]))
            for vname, ws in table.items():
                us, slots, ok = time_variant(runner, cfg, ws, data_list, ref)
                results.setdefault((name, vname), []).append(us)
                print(f"round {r} {name:20s} {vname:32s} {us:7.2f} us  slots {slots:3d} "
                      f"{'ok' if ok else 'MISMATCH'}", flush=True)
    print("\nsummary (mean us per round):")
    for (name, vname), t in results.items():
        print(f"  {name:20s} {vname:32s} " + " / ".join(f"{x:.2f}" for x in t))


if __name__ == "__main__":
    main()
