"""The masked op's plan for moe_bench's cases, by the Hopper configs' cost model (no GPU):
the config the op chooses at the bench's hint with the split plan on (NVFP4_GEMM_MASKED_SPLIT=1), the slowest CTA of the plan it makes for the
case's counts (split by K or whole tiles, as the device plan decides), the same config's
whole-tile round robin, and the leaderboard path's own choice on the real sizes.

    python tools/probes/masked_split_model.py
    python tools/probes/masked_split_model.py --cases prefill8 --seed 3 --sms 132

Modeled microseconds (sm90_cost_model: us per K-tile per phase, per unit, per split
piece), not measured ones: how close the GPU's quantile cuts come to the host's bisection.
"""

import argparse
import dataclasses
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nvfp4_gemm.masked_plan import masked_schedule, phase_counts, split_cuts  # noqa: E402
from nvfp4_gemm.schedule import modeled_cta_us  # noqa: E402
from nvfp4_gemm.sm90_config import choose_sm90_config, sm90_cost_model, sm90_makespan_us  # noqa: E402
from nvfp4_gemm.sm90_masked import choose_masked_config, masked_config_grid  # noqa: E402
from tools.moe_bench import CASES  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES), help="moe_bench's case names (default: all)")
    ap.add_argument("--seed", type=int, default=7, help="moe_bench's seed of the token counts (default 7)")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--k", type=int, default=7168)
    ap.add_argument("--sms", type=int, default=132)
    args = ap.parse_args()
    print("case      config                                      plan  op's plan  whole tiles  leaderboard")
    for name in args.cases.split(","):
        case = CASES[name]
        rng = random.Random(args.seed)  # as moe_bench.build_case draws them
        counts = [rng.randint(case.lo, case.hi) for _ in range(case.groups)]
        cfg = choose_masked_config(case.groups, case.hi, args.n, args.k, case.hi, args.sms, split=True)
        grid = masked_config_grid(cfg, case.groups, case.hi, args.n, args.k, args.sms)
        costs = sm90_cost_model(cfg)
        ours = max(modeled_cta_us(masked_schedule(counts, grid), *costs))
        totals = [sum(c) for c in zip(*(phase_counts(m, grid) for m in counts))]
        plan = "split" if split_cuts(totals, grid) is not None else "whole"
        whole_grid = masked_config_grid(dataclasses.replace(cfg, split_k=False), case.groups, case.hi, args.n,
                                        args.k, args.sms)
        whole = max(modeled_cta_us(masked_schedule(counts, whole_grid), *costs))
        sizes = [(m, args.n, args.k, 1) for m in counts]
        host = choose_sm90_config(sizes, args.sms)
        print(f"{name:9s} {cfg.name:43s} {plan:5s} {ours:9.1f}  {whole:11.1f}  {sm90_makespan_us(sizes, host, args.sms):11.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
