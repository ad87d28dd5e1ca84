"""Measures the Hopper cost model's inputs on the GPU: microseconds per 128-K K-tile and the
fixed cost of a tile, by tile_n and token width (SM90_KTILE_US, SM90_TILE_US).

One group of M = width tokens and N = grid x tile_n weight rows, so that each CTA of a full
grid runs exactly one tile of that width, at two depths K: the kernel time's slope in K is
the K-tile cost, its intercept the tile's fixed cost plus the launch. Kernel time is the
GEMM kernel's own CUDA time (torch.profiler), with PDL off.

    python tools/probes/sm90_ktile_cost.py                 # tile_n 128 and 256, widths 128 96 64 32
    python tools/probes/sm90_ktile_cost.py --tile-n 256 --widths 128,96
    python tools/probes/sm90_ktile_cost.py --tile-n 192 --tile-m 96 --widths 96,64,32
    python tools/probes/sm90_ktile_cost.py --tiles-per-cta 1,3    # + what each later tile of a CTA adds

With --tiles-per-cta U1,U2 each CTA runs U tiles in turn (N = U x grid x tile_n): the
intercepts' difference over U2 - U1 is what a tile after a CTA's first costs beyond its
K-tiles (epilogue, the next tile's first tokens: SM90_TILE_US less the launch).
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="Needs a Hopper (sm_90) GPU with the CuTe DSL.")
    ap.add_argument("--tile-n", default="128,256")
    ap.add_argument("--widths", default="128,96,64,32")
    ap.add_argument("--tile-m", type=int, default=128, help="token tile height (96: tile_n 192 only)")
    ap.add_argument("--k", default="1024,4096", help="two depths")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--tiles-per-cta", default="1", help="tiles each CTA runs in turn; two values: per-tile cost")
    args = ap.parse_args()

    import torch
    from torch.profiler import ProfilerActivity, profile

    import reference
    import submission as S

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    k_lo, k_hi = (int(x) for x in args.k.split(","))
    print(f"{torch.cuda.get_device_name(0)}, {sms} SMs; K = {k_lo}, {k_hi}; one tile per CTA")
    tiles = [int(x) for x in args.tiles_per_cta.split(",")]
    for tile_n in (int(x) for x in args.tile_n.split(",")):
        for width in (int(x) for x in args.widths.split(",")):
            narrow = () if width == args.tile_m else (width,)
            cfg = S.make_sm90_config(tile_n, tile_m=args.tile_m, narrow=narrow, pdl=False)
            fixed_by_u = []
            for u in tiles:
                times = []
                for k in (k_lo, k_hi):
                    data = reference.generate_input(m=(width,), n=(u * sms * tile_n,), k=(k,), g=1, seed=3)
                    problem = S.validate_inputs(data)
                    runner = S.GroupedGemmRunner(S.sm90_backend(), num_sms=sms)
                    runner.run(data, problem, cfg)  # compile, schedule, descriptors
                    torch.cuda.synchronize()
                    with profile(activities=[ProfilerActivity.CUDA]) as prof:
                        for _ in range(args.calls):
                            runner.run(data, problem, cfg)
                        torch.cuda.synchronize()
                    us = [e.device_time for e in prof.events() if e.device_type.name == "CUDA" and "Sm90" in e.name]
                    times.append(sorted(us)[len(us) // 2])  # median
                per_kt = (times[1] - times[0]) / (u * ((k_hi - k_lo) // S.SM90_PACKED_K_TILE))
                fixed = times[0] - per_kt * u * (k_lo // S.SM90_PACKED_K_TILE)
                fixed_by_u.append(fixed)
                print(f"tile_n {tile_n} width {width:3d}, {u} tile(s) per CTA: kernel {times[0]:7.2f} / {times[1]:7.2f} us"
                      f" -> {per_kt:.3f} us per K-tile, {fixed:.2f} us fixed (tiles + launch)", flush=True)
            if len(tiles) == 2:
                per_tile = (fixed_by_u[1] - fixed_by_u[0]) / (tiles[1] - tiles[0])
                print(f"tile_n {tile_n} width {width:3d}: a later tile of a CTA adds {per_tile:.2f} us beyond its K-tiles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
