"""What one cuTensorMapEncodeTiled costs on this host (the Blackwell GEMM's compiled host
function encodes 5 descriptors per launch: make_non_exec_tiled_tma_load/store in its IR).
ctypes straight into libcuda; a cuDriverGetVersion call through the same ctypes path is
the call overhead to subtract. Needs a CUDA driver (any GPU)."""
import ctypes
import time

import torch

cuda = ctypes.CDLL("libcuda.so.1")
cuda.cuInit(0)
buf = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
tmap = (ctypes.c_uint64 * 16)()
U64, U32 = ctypes.c_uint64, ctypes.c_uint32


def args(rank, dims, strides, box):
    return (ctypes.byref(tmap), 0, rank, ctypes.c_void_p(buf.data_ptr()), (U64 * rank)(*dims),
            (U64 * max(1, rank - 1))(*strides), (U32 * rank)(*box), (U32 * rank)(*([1] * rank)), 0, 3, 2, 0)


cases = {
    "rank 2 (A rows x K bytes, 128B swizzle)": args(2, (3584, 4096), (3584,), (128, 128)),
    "rank 3": args(3, (3584, 4096, 1), (3584, 3584 * 4096), (128, 128, 1)),
}
f = cuda.cuTensorMapEncodeTiled
ver = ctypes.c_int()
for name, a in cases.items():
    rc = f(*a)
    assert rc == 0, (name, rc)
for _rep in range(3):
    n = 20000
    t0 = time.perf_counter_ns()
    for _ in range(n):
        cuda.cuDriverGetVersion(ctypes.byref(ver))
    base = (time.perf_counter_ns() - t0) / n / 1e3
    line = [f"ctypes call {base:.3f} us"]
    for name, a in cases.items():
        t0 = time.perf_counter_ns()
        for _ in range(n):
            f(*a)
        per = (time.perf_counter_ns() - t0) / n / 1e3
        line.append(f"{name}: {per:.3f} us ({per - base:.3f} above the call)")
    print("; ".join(line))
