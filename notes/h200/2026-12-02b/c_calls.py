"""Eighteenth session: what the torch C calls on the warm path cost on this host (us per
call, best of 5 x 20000): the current device, the current raw stream, the capture query."""
import time

import torch


def per_call_us(fn, n=20000):
    for _ in range(1000):
        fn()
    best = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best.append((time.perf_counter() - t0) / n * 1e6)
    return min(best)


torch.empty(1, device="cuda")
for name, fn in (("empty Python call", lambda: None),
                 ("torch._C._cuda_getDevice()", torch._C._cuda_getDevice),
                 ("torch._C._cuda_getCurrentRawStream(0)", lambda: torch._C._cuda_getCurrentRawStream(0)),
                 ("torch.cuda.is_current_stream_capturing()", torch.cuda.is_current_stream_capturing)):
    print(f"{name:<45} {per_call_us(fn):.3f} us")
