"""Run 4 of the eleventh session: balanced_units (one-wave problems at tile_n 128) with a
few cost constants on shape 2, and the chooser's old pick against 128 balanced on three
other one-wave shapes. Leaderboard timing (15 inputs, L2 flushed, one event pair),
variants alternating, checked against the reference once.
    python notes/h200/2026-12-01k/sched_ab2.py [ROUNDS]"""
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
MEAS = {128: 0.847, 96: 0.765, 64: 0.587, 32: 0.513}  # tools/sm90_ktile_cost.py, tile_n 128
SHAPES = {
    "bench 2": ([192, 320], 3072, 4096),
    "A G=2 N=2048 K=4096": ([64, 128], 2048, 4096),
    "B G=1 N=4096 K=4096": ([300], 4096, 4096),
    "C G=3 N=7168 K=2048": ([40, 200, 129], 7168, 2048),
    "D G=1 M=128 N=4096 K=7168": ([128], 4096, 7168),
}
ONLY = sys.argv[2].split(",") if len(sys.argv) > 2 else None  # shape names' first letters


def balanced(unit, fixup):
    def ws(sizes, cfg, num_sms):
        rows = S.build_tile_schedule(sizes, cfg.tile_m, cfg.tile_n)
        rows, phase_sizes = S.split_tiles_by_width(rows, sizes, cfg.widths)
        k_tiles = [k // S.SM90_PACKED_K_TILE for _, _, k, _ in sizes]
        return S.balanced_units(rows, phase_sizes, k_tiles, num_sms, [MEAS[w] for w in cfg.widths], unit, fixup)
    return ws


def variants(name):
    if name.startswith("D"):  # after the chooser change: its old pick against its new one
        return {"256 sk (old pick)": (S.make_sm90_config(256, stream_k=True), ORIG_WS),
                "128 balanced (new pick)": (S.make_sm90_config(128, stream_k=True), ORIG_WS)}
    sizes = [(m, SHAPES[name][1], SHAPES[name][2], 1) for m in SHAPES[name][0]]
    old = S.choose_sm90_config(sizes)
    sk128 = S.make_sm90_config(128, narrow=(96, 64), stream_k=True)
    v = {f"old pick ({old.tile_n}{' sk' if old.stream_k else ''} {old.narrow})": (old, ORIG_WS)}
    if not (old.tile_n == 128 and not old.stream_k):
        v["128 whole"] = (S.make_sm90_config(128, narrow=(96, 64)), ORIG_WS)
    consts = [(1.0, 0.8), (0.5, 0.5), (1.5, 1.0), (0.7, 1.4)] if name == "bench 2" else [(1.0, 0.8)]
    for unit, fixup in consts:
        v[f"128 balanced {unit}/{fixup}"] = (sk128, balanced(unit, fixup))
    return v


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    results = {}
    runner = S.get_runner(torch.device("cuda", 0), "sm90")
    shapes = {name: v for name, v in SHAPES.items() if ONLY is None or name[0] in ONLY}
    table = {name: variants(name) for name in shapes}
    for r in range(rounds):
        for name, (ms, n, k) in shapes.items():
            data_list = [reference.generate_input(m=ms, n=[n] * len(ms), k=[k] * len(ms), g=len(ms), seed=1111 + 42 * i)
                         for i in range(1, 16)]
            ref = reference.ref_kernel(ev._clone_data(data_list[0]))
            for vname, (cfg, ws) in table[name].items():
                us, slots, ok = time_variant(runner, cfg, ws, data_list, ref)
                results.setdefault((name, vname), []).append(us)
                print(f"round {r} {name:20s} {vname:30s} {us:7.2f} us  slots {slots:3d} "
                      f"{'ok' if ok else 'MISMATCH'}", flush=True)
    print("\nsummary (mean us per round):")
    for (name, vname), t in results.items():
        print(f"  {name:20s} {vname:30s} " + " / ".join(f"{x:.2f}" for x in t))


if __name__ == "__main__":
    main()
