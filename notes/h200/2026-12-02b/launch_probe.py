"""Eighteenth session: what a launch costs the host, by layer, on this machine.

Host time per launch, back to back (median of 5 batches of 2000, GPU drained between):
  torch.cuda._sleep(1)             torch's cheapest op launch (the floor host_overhead quotes)
  driver cuLaunchKernel            an empty PTX kernel (loaded by the driver's JIT), ctypes,
                                   every argument a prebuilt ctypes object
  driver cuLaunchKernelEx          the same with a launch config struct, no attributes
  driver cuLaunchKernelEx + PDL    with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
                                   as our GEMM launches
  GEMM capi(own)                   our Hopper GEMM's DSL host function, called as
                                   direct_launcher calls it (G = 2, small problem)
  GEMM table.launch()              the same through bind_launch (stream lookup, dict, check)
  custom_kernel                    the whole warm call
The empty kernel runs 384 threads on 132 CTAs with 8 bytes of parameters; the GEMM has
about 100 bytes of parameters and 200 KB of dynamic shared memory.
"""
import ctypes
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import reference  # noqa: E402
import submission  # noqa: E402

PTX = b""".version 8.0
.target sm_90
.address_size 64
.visible .entry empty_kernel(.param .u64 p)
{
    ret;
}
"""


class LaunchAttribute(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_char * 64)]


class LaunchConfig(ctypes.Structure):
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6


def per_launch_us(fn, n=2000):
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    batches = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        batches.append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    return statistics.median(batches)


def closure(fn) -> dict:
    return dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__ or ())))


def main() -> int:
    torch.empty(1, device="cuda")  # the primary context, current on this thread
    cu = ctypes.CDLL("libcuda.so.1")
    module, func = ctypes.c_void_p(), ctypes.c_void_p()
    assert cu.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(PTX)) == 0
    assert cu.cuModuleGetFunction(ctypes.byref(func), module, b"empty_kernel") == 0
    arg = ctypes.c_uint64(0)
    params = (ctypes.c_void_p * 1)(ctypes.addressof(arg))
    grid, block, zero, stream, null = (ctypes.c_uint(132), ctypes.c_uint(384), ctypes.c_uint(0),
                                       ctypes.c_void_p(0), ctypes.c_void_p(0))
    one = ctypes.c_uint(1)
    launch = cu.cuLaunchKernel
    launch_ex = cu.cuLaunchKernelEx
    plain = LaunchConfig(132, 1, 1, 384, 1, 1, 0, None, None, 0)
    pdl_attr = (LaunchAttribute * 1)()
    pdl_attr[0].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    ctypes.memmove(pdl_attr[0].value, ctypes.byref(ctypes.c_int(1)), 4)
    pdl = LaunchConfig(132, 1, 1, 384, 1, 1, 0, None, pdl_attr, 1)
    plain_ref, pdl_ref = ctypes.byref(plain), ctypes.byref(pdl)
    assert launch(func, grid, one, one, block, one, one, zero, stream, params, null) == 0
    assert launch_ex(plain_ref, func, params, null) == 0
    assert launch_ex(pdl_ref, func, params, null) == 0
    torch.cuda.synchronize()

    data = reference.generate_input(m=[64, 64], n=[128, 128], k=[256, 256], g=2, seed=1)
    for _ in range(3):
        submission.custom_kernel(data)
    runner = submission._last_runner
    table = runner.calls.get(runner.call_key(data)).table
    raw = torch._C._cuda_getCurrentRawStream(torch.cuda.current_device())
    fast = closure(table.launch)["bound"][raw]
    if hasattr(fast, "func"):  # functools.partial(capi, own): an executor without a result slot
        capi, own = fast.func, fast.args[0]
    else:
        cells = closure(fast)
        capi, own = cells["capi"], cells["own"]

    rows = [
        ("torch.cuda._sleep(1)", lambda: torch.cuda._sleep(1)),
        ("driver cuLaunchKernel", lambda: launch(func, grid, one, one, block, one, one, zero, stream, params, null)),
        ("driver cuLaunchKernelEx", lambda: launch_ex(plain_ref, func, params, null)),
        ("driver cuLaunchKernelEx + PDL", lambda: launch_ex(pdl_ref, func, params, null)),
        ("GEMM capi(own)", lambda: capi(own)),
        ("GEMM table.launch()", table.launch),
        ("custom_kernel", lambda: submission.custom_kernel(data)),
    ]
    for round_ in range(3):
        print(f"round {round_ + 1}: " + "; ".join(f"{name} {per_launch_us(fn):.2f}" for name, fn in rows), flush=True)
    print("(us per launch, back to back, median of 5 batches of 2000)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
