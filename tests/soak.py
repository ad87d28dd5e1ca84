"""Soak for tests/test_reliability.py: many calls with random group lists; host and device
memory must stay bounded.

Each call draws a random input from a pool of random group lists and, half of the time,
wraps its tensors in fresh view objects (new identities at the same addresses), so the
call cache keeps missing and evicting while the pointer cache sees repeats. Every
`check_every` calls the result is compared with the reference. The test runs it on the
stubbed kernel (tools/probes/host_overhead.install_stub), where nothing is computed to check.
"""

import gc
import random
import resource
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import reference  # noqa: E402
import submission  # noqa: E402
from utils import verbose_allclose  # noqa: E402


def _random_case(rng: random.Random) -> dict:
    g = rng.randint(1, 8)
    return {
        "m": tuple(rng.choice([1, 7, 40, 64, 129, 200, 256]) for _ in range(g)),
        "n": tuple(rng.choice([128, 256, 384]) for _ in range(g)),
        "k": tuple(rng.choice([256, 512]) for _ in range(g)),
        "g": g,
        "seed": rng.randint(0, 1 << 30),
    }


def _fresh_views(data):
    abc, sf, sfr, sizes = data
    return ([tuple(t[:] for t in grp) for grp in abc], sf, [tuple(t[:] for t in grp) for grp in sfr], list(sizes))


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def soak(calls: int, pool_size: int = 48, seed: int = 0, check_every: int = 500) -> dict:
    rng = random.Random(seed)
    pool = [reference.generate_input(**_random_case(rng)) for _ in range(pool_size)]
    cuda = torch.cuda.is_available()
    # Warm up every pool entry once, and the reference once, so that compiles and one-time
    # allocations (cuBLAS's workspace) are not counted as growth.
    for data in pool:
        submission.custom_kernel(data)
    if check_every:
        reference.ref_kernel(pool[0])
    if cuda:
        torch.cuda.synchronize()
    gc.collect()
    tracemalloc.start()
    host_start = tracemalloc.get_traced_memory()[0]
    device_start = torch.cuda.memory_allocated() if cuda else 0
    rss_start = _rss_mib()
    checks = failures = 0
    t0 = time.perf_counter()
    for i in range(calls):
        data = pool[rng.randrange(pool_size)]
        if rng.random() < 0.5:
            data = _fresh_views(data)
        out = submission.custom_kernel(data)
        if check_every and i % check_every == 0:
            expected = reference.ref_kernel(
                ([tuple(t.clone() for t in grp) for grp in data[0]], data[1], data[2], data[3])
            )
            checks += 1
            failures += any(verbose_allclose(o, e, rtol=1e-3, atol=1e-3) for o, e in zip(out, expected))
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    del data, out
    gc.collect()
    host_end, host_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    runners = list(submission._runners.values())
    return {
        "calls": calls,
        "seconds": seconds,
        "checks": checks,
        "check_failures": failures,
        "host_python_bytes_growth": host_end - host_start,
        "host_python_bytes_peak_over_start": host_peak - host_start,
        "max_rss_mib_start": rss_start,
        "max_rss_mib_end": _rss_mib(),
        "device_bytes_growth": (torch.cuda.memory_allocated() - device_start) if cuda else 0,
        "cache_sizes": [
            {"calls": len(r.calls), "pointers": len(r.pointers), "schedules": len(r.schedules), "compiled": len(r.compiled)}
            for r in runners
        ],
    }

