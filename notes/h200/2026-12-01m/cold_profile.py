"""Where a call with unseen sizes, and one with seen sizes but new tensors, spends its host
time on the GPU machine: cProfile over such calls (inputs made first; one warm-up call
compiles). Thirteenth session, run 4."""
import cProfile
import pstats
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import torch  # noqa: E402

import reference  # noqa: E402
import submission  # noqa: E402

rng = random.Random(0)
unseen = [reference.generate_input(m=[rng.randint(16, 256) for _ in range(8)], n=[4096] * 8, k=[512] * 8, g=8, seed=i)
          for i in range(30)]
same = [reference.generate_input(m=[64] * 8, n=[4096] * 8, k=[512] * 8, g=8, seed=100 + i) for i in range(16)]
for d in (unseen[0], same[0]):
    submission.custom_kernel(d)
torch.cuda.synchronize()
for name, sets in (("unseen sizes", unseen[1:]), ("seen sizes, new tensors", same[1:])):
    t = []
    for d in sets:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        submission.custom_kernel(d)
        t.append((time.perf_counter() - t0) * 1e6)
    t.sort()
    print(f"== {name}: median {t[len(t) // 2]:.0f} us over {len(t)} calls (min {t[0]:.0f})")
pr = cProfile.Profile()
rng = random.Random(1)
unseen2 = [reference.generate_input(m=[rng.randint(16, 256) for _ in range(8)], n=[4096] * 8, k=[512] * 8, g=8,
                                    seed=300 + i) for i in range(15)]
for d in unseen2:
    torch.cuda.synchronize()
    pr.enable()
    submission.custom_kernel(d)
    pr.disable()
print("== cProfile, 15 unseen-size calls")
pstats.Stats(pr).sort_stats("cumulative").print_stats(22)
pr = cProfile.Profile()
fresh = [reference.generate_input(m=[64] * 8, n=[4096] * 8, k=[512] * 8, g=8, seed=200 + i) for i in range(15)]
for d in fresh:
    torch.cuda.synchronize()
    pr.enable()
    submission.custom_kernel(d)
    pr.disable()
print("== cProfile, 15 seen-size calls on new tensors")
pstats.Stats(pr).sort_stats("tottime").print_stats(16)
