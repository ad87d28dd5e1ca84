"""The fastest the Hopper kernel's K-loop could run the benchmark shapes: every tile's
K-tiles at the measured one-tile-per-CTA cost of its width, spread perfectly evenly over the
132 SMs, with no fixed cost per call or per tile and no split overhead. A lower bound for
this kernel design (any schedule), to set against the fp16 roofline and the goals.

    python tools/probes/sm90_bound.py [--ceiling 762.5]

Costs per 128-K K-tile (us, H200, kernel time at pdl 0): one tile per CTA, the slope over
K = 1024 and 4096 (`python tools/probes/sm90_ktile_cost.py`). The same run's intercepts, a tile's fixed
cost with the launch, were 4.7-4.9 us at tile_n 128 and 6.1-7.0 at 256; the bound leaves
them out.
"""

import argparse
import math
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
NUM_SMS = 132
KTILE_US = {  # (tile_n, token width) -> us per K-tile
    (256, 128): 1.449, (256, 96): 1.285, (256, 64): 1.052, (256, 32): 0.892,
    (128, 128): 0.863, (128, 96): 0.773, (128, 64): 0.592, (128, 32): 0.520,
}
TILE_NS = (128, 256)
WIDTH_SETS = ((128, 96, 64), (128, 64), (128, 96, 64, 32))
K_TILE = 128  # K elements per packed K-tile
TOKEN_TILE = 128


def ktile_us(tile_n: int, tokens: int) -> float:
    return KTILE_US[(tile_n, tokens)]


def bound_us(ms, ns, ks, tile_n: int, widths) -> float:
    """Perfectly balanced K-loop time of one problem at one tile width and set of token
    widths: each group's full token tiles at width 128, its last one at the narrowest
    width that holds it."""
    total = 0.0
    for m, n, k in zip(ms, ns, ks):
        full, rest = divmod(m, TOKEN_TILE)
        per_weight_tile = full * ktile_us(tile_n, TOKEN_TILE)
        if rest:
            per_weight_tile += ktile_us(tile_n, min(w for w in widths if w >= rest))
        total += math.ceil(n / tile_n) * (k // K_TILE) * per_weight_tile
    return total / NUM_SMS


def best_bound(ms, ns, ks) -> tuple[float, int, tuple[int, ...]]:
    return min((bound_us(ms, ns, ks, tn, w), tn, w) for tn in TILE_NS for w in WIDTH_SETS)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog="Runs on the CPU (no GPU).")
    ap.add_argument("--ceiling", type=float, default=762.5, help="fp16 TFLOP/s for the roofline")
    args = ap.parse_args()
    from harness.ceilings import flops_of

    cases = yaml.safe_load((ROOT / "task.yml").read_text())["benchmarks"]
    logs = []
    print(f"{'shape':<52} {'bound us':>9} {'roofline us':>12} {'x roofline':>11}  best tile")
    for c in cases:
        t, tn, w = best_bound(c["m"], c["n"], c["k"])
        roof = flops_of(c) / (args.ceiling * 1e6)
        logs.append((math.log(t), math.log(roof)))
        name = f"G={c['g']} M=[{','.join(map(str, c['m']))}] N={c['n'][0]} K={c['k'][0]}"
        print(f"{name:<52} {t:9.1f} {roof:12.2f} {t / roof:11.2f}  {tn} x 128, widths {w}")
    gb = math.exp(sum(a for a, _ in logs) / len(logs))
    gr = math.exp(sum(b for _, b in logs) / len(logs))
    print(f"geomean: bound {gb:.2f} us, roofline {gr:.2f} us ({gb / gr:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
