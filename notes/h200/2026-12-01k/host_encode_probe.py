"""What TMA atoms built in a launch's host function cost per launch (eleventh session).

The Blackwell GEMM's compiled host function makes its 5 TMA atoms (4 loads, 1 store) from
placeholder tensors on every launch (make_non_exec_tiled_tma_load / _store in its IR, which
the DSL's runtime turns into cuTensorMapEncodeTiled calls). The Hopper GEMM's host function
makes none. Here, on any GPU: two launches of an empty kernel through the runner's own
launch path (bind_launch), one whose host function first makes the Hopper kernel's 3 atoms,
one that makes none. The difference per atom is what each of the Blackwell GEMM's 5 costs.
Measured (run 7, H200 host): 6.40 against 6.27 us per launch, 0.04 us per atom; a raw
cuTensorMapEncodeTiled costs 0.85-1.3 us there (encode_probe.py), so the DSL does not
re-encode per launch.
    python notes/h200/2026-12-01k/host_encode_probe.py         # on a GPU
    CUTE_DSL_ARCH=sm_90a python ... --compile-only             # on the CPU
"""
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import cuda.bindings.driver as cuda  # noqa: E402
import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
import torch  # noqa: E402
from cutlass import Int32  # noqa: E402
from cutlass.cute.runtime import make_fake_stream  # noqa: E402

import submission as S  # noqa: E402


class Probe:
    def __init__(self):
        self.op = S.Sm90Fp4GroupedGemm(S.make_sm90_config(128), 1)

    @cute.kernel
    def k_atoms(self, a, b, c, p: cute.Pointer):
        pass

    @cute.kernel
    def k_plain(self, p: cute.Pointer):
        pass

    @cute.jit
    def with_atoms(self, p: cute.Pointer, stream: cuda.CUstream):
        a, b, c = self.op._make_tma_atoms(p.toint(), Int32(128), Int32(128))
        self.k_atoms(a, b, c, p).launch(grid=[1, 1, 1], block=[32, 1, 1], stream=stream)

    @cute.jit
    def plain(self, p: cute.Pointer, stream: cuda.CUstream):
        self.k_plain(p).launch(grid=[1, 1, 1], block=[32, 1, 1], stream=stream)


def main():
    probe = Probe()
    fns = {name: cute.compile(getattr(probe, name), S.fake_ptr(cutlass.Int64, 128), make_fake_stream())
           for name in ("with_atoms", "plain")}
    if "--compile-only" in sys.argv:
        print("compiled", list(fns))
        return
    buf = torch.zeros(1 << 16, dtype=torch.int64, device="cuda")
    launch = {name: S.bind_launch(fn, (S.device_ptr(buf, cutlass.Int64, 128),), 0) for name, fn in fns.items()}
    launch["torch _sleep(0)"] = lambda: torch.cuda._sleep(0)
    for f in launch.values():
        for _ in range(200):
            f()
    torch.cuda.synchronize()
    per = {name: [] for name in launch}
    n = 2000
    for _ in range(7):
        for name, f in launch.items():
            t0 = time.perf_counter_ns()
            for _ in range(n):
                f()
            per[name].append((time.perf_counter_ns() - t0) / n / 1e3)
            torch.cuda.synchronize()
    med = {name: statistics.median(v) for name, v in per.items()}
    for name, v in med.items():
        print(f"{name:16s} {v:6.2f} us per launch (back to back; rounds {' '.join(f'{x:.2f}' for x in per[name])})")
    print(f"3 atoms in the host function: +{med['with_atoms'] - med['plain']:.2f} us per launch, "
          f"{(med['with_atoms'] - med['plain']) / 3:.2f} us per atom")


if __name__ == "__main__":
    main()
