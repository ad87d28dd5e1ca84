"""Seventeenth session: where a first call on new pointers (known sizes) spends its host
time, by cProfile over 12 such calls per case (the GPU drained before each)."""
import cProfile
import pstats
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import reference  # noqa: E402
import submission  # noqa: E402
from tests.cases import task_cases  # noqa: E402

for case in task_cases("benchmarks")[::3]:  # G = 8 N = 4096 K = 7168 and G = 2 N = 4096 K = 1536
    data = reference.generate_input(**case.args())
    submission.custom_kernel(data)
    fresh = [([tuple(t.clone() for t in g) for g in data[0]], data[1],
              [tuple(t.clone() for t in g) for g in data[2]], data[3]) for _ in range(12)]
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    for d in fresh:
        torch.cuda.synchronize()
        prof.enable()
        submission.custom_kernel(d)
        prof.disable()
    print(f"== G={case.g} N={case.n[0]} K={case.k[0]}: 12 first calls on new pointers")
    stats = pstats.Stats(prof)
    stats.sort_stats("cumulative").print_stats(28)
    stats.sort_stats("tottime").print_stats(15)
