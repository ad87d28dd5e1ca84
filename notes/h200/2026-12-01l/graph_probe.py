"""Host time per launch: direct against a CUDA graph replay (torch.cuda.CUDAGraph), for
torch's cheapest kernel and for custom_kernel's warm path on a small G = 2 and G = 8
problem. The graph's result is checked against the reference."""
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
import torch  # noqa: E402

import eval as ev  # noqa: E402
import reference  # noqa: E402
import submission  # noqa: E402


def per_call_us(fn, calls=300):
    out = []
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t0) / calls * 1e6)
    torch.cuda.synchronize()
    return statistics.median(out)


def graph_of(fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s):
        fn()
        torch.cuda.synchronize()
        with torch.cuda.graph(g, stream=s):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    return g


sleep = lambda: torch.cuda._sleep(1)  # noqa: E731
print(f"_sleep direct {per_call_us(sleep):.2f} us, graph replay {per_call_us(graph_of(sleep).replay):.2f} us")
for g_count in (2, 8):
    gen = reference.generate_input((64,) * g_count, (128,) * g_count, (256,) * g_count, g_count, 1111)
    data = (gen[0], gen[1], gen[2], gen[3])
    run = lambda: submission.custom_kernel(data)  # noqa: E731
    run()
    direct = per_call_us(run)
    g = graph_of(run)
    for abc in data[0]:
        abc[2].zero_()
    g.replay()
    torch.cuda.synchronize()
    ref = reference.ref_kernel(ev._clone_data(data))
    ok = all(torch.allclose(abc[2], r, rtol=1e-3, atol=1e-3) for abc, r in zip(data[0], ref))
    print(f"G={g_count} custom_kernel direct {direct:.2f} us, graph replay {per_call_us(g.replay):.2f} us, graph result {'ok' if ok else 'MISMATCH'}")
