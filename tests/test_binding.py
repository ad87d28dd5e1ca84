"""Launch binding on the CPU: the arguments' C packing (learned from the DSL's first launch
of a compiled function, then done without it), the pointer table's one upload."""

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nvfp4_gemm import binding, kernel_runner

ROOT_DIR = Path(__file__).resolve().parents[1]
cutlass = pytest.importorskip("cutlass")
from cutlass import Int32, Int64  # noqa: E402

from nvfp4_gemm.common import cute, make_ptr  # noqa: E402


def _ptr(dtype, address: int, align: int = 16):
    return make_ptr(dtype, address, cute.AddressSpace.gmem, assumed_align=align)


def _args(base: int, count: int = 5, timeout_ns: int = 60_000_000_000):
    """Arguments of the kinds the kernels take: global pointers, Int32, an Int64 over 2^32."""
    return (_ptr(cutlass.Int32, base), _ptr(cutlass.Int64, base + 0x1000, 128), Int32(count),
            Int32(-7), Int64(timeout_ns))


def _expected(base: int, count: int = 5, timeout_ns: int = 60_000_000_000) -> list:
    """The values _args(base, count, timeout_ns) hold."""
    return [base, base + 0x1000, count, -7, timeout_ns]


KINDS = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_int64)


def _values(packed, kinds) -> list:
    """The values a packed array's first entries point to, read as `kinds` (C types)."""
    return [kind.from_address(packed[i]).value for i, kind in enumerate(kinds)]


class FakeExecutor:
    """The DSL executor's surface (capi_func, cuda_result, _get_invoke_packed_args) with two
    extra arguments after the packed ones, as the DSL's executor appends its CUDA result's
    address and its kernels' handles; its packed array is reused between calls, as the
    DSL's is. Each call records the argument values the entry point would read."""

    def __init__(self, kinds):
        self.cuda_result = ctypes.c_int32(0)
        self.extras = (ctypes.addressof(self.cuda_result), 0xC0FFEE)
        self._shared = (ctypes.c_void_p * (len(kinds) + 2))()
        self.calls = []
        self.kinds = kinds

    def _get_invoke_packed_args(self, exe_args):
        for i, a in enumerate(exe_args):
            self._shared[i] = binding.c_address(a)
        for j, e in enumerate(self.extras):
            self._shared[len(exe_args) + j] = e
        return self._shared

    def capi_func(self, packed):
        n = len(self.kinds)
        assert tuple(packed[n + j] for j in range(len(self.extras))) == self.extras
        self.calls.append(_values(packed, self.kinds))


class FakeCompiled:
    """A compiled function as the DSL makes it, packing as `pack` says (the DSL's own: each
    argument's C pointers)."""

    def __init__(self, kinds=KINDS, pack=binding.c_pointers):
        self.__name__ = "fake_kernel"
        self._default_executor = None
        self.kinds = kinds
        self.pack = pack
        self.dsl_packings = 0

    def generate_execution_args(self, *args):
        self.dsl_packings += 1
        exe_args = self.pack(args)
        return exe_args, [exe_args]

    def run_compiled_program(self, exe_args):
        if self._default_executor is None:
            self._default_executor = FakeExecutor(self.kinds)
        ex = self._default_executor
        ex.capi_func(ex._get_invoke_packed_args(exe_args))


def test_a_later_launcher_of_a_function_packs_its_arguments_without_the_dsl():
    fn = FakeCompiled()
    first = binding.bind_launch(fn, _args(0x7F0000000000))
    second = binding.bind_launch(fn, _args(0x7F0000100000, count=3))
    first()
    second()
    second()
    first()
    assert fn.dsl_packings == 1  # the second launcher never went through the DSL
    one, two = _expected(0x7F0000000000), _expected(0x7F0000100000, count=3)
    assert fn._default_executor.calls == [one, two, two, one]
    assert first.how() == second.how() == "direct"


def test_a_function_the_dsl_packs_otherwise_keeps_the_dsl_path():
    """Where the DSL's packing is not the arguments' own C pointers (here: in another
    order), nothing is learned: every launcher's first launch goes through the DSL."""
    fn = FakeCompiled(KINDS[::-1], pack=lambda args: binding.c_pointers(args[::-1]))
    for base in (0x7F0000000000, 0x7F0000100000):
        binding.bind_launch(fn, _args(base))()
    assert fn.dsl_packings == 2
    assert binding.learned_entry(fn) is None


def test_packs_like_the_dsl_compares_count_and_values():
    args = _args(0x7F0000000000)
    exe_args = binding.c_pointers(args)
    assert binding.packs_like_the_dsl(args, exe_args)
    assert not binding.packs_like_the_dsl(args, exe_args[:-1])
    assert not binding.packs_like_the_dsl(args, binding.c_pointers(_args(0x7F0000000000, timeout_ns=1)))
    assert not binding.packs_like_the_dsl(args, binding.c_pointers(_args(0x7F0000000080)))
    floats = (cutlass.Float32(1.0),)  # a kind whose packing is not compared: never learned
    assert not binding.packs_like_the_dsl(floats, binding.c_pointers(floats))


def test_the_entry_point_reports_a_cuda_error_with_its_code():
    fn = FakeCompiled()
    binding.bind_launch(fn, _args(0x7F0000000000))()
    fn._default_executor.cuda_result.value = 700
    launch = binding.bind_launch(fn, _args(0x7F0000100000))
    with pytest.raises(binding.KernelLaunchError, match="CUDA error 700") as error:
        launch()
    assert error.value.code == 700 and error.value.sticky
    fn._default_executor.cuda_result.value = 0
    launch()  # not bound by the failed launch: this one binds and runs
    assert fn.dsl_packings == 1


_REAL_DSL_PACKING = """
import sys
sys.path.insert(0, {root!r})
import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64
from nvfp4_gemm.binding import c_pointers, fake_ptr, packs_like_the_dsl
from nvfp4_gemm.common import make_ptr


@cute.jit
def host_fn(a: cute.Pointer, b: cute.Pointer, n: Int32, m: Int32, t: Int64):
    pass


fn = cute.compile(host_fn, fake_ptr(cutlass.Int32), fake_ptr(cutlass.Int64, 128), Int32(1), Int32(1), Int64(0))
gmem = cute.AddressSpace.gmem
args = (make_ptr(cutlass.Int32, 0x7F0000001000, gmem, assumed_align=16),
        make_ptr(cutlass.Int64, 0x7F0000002000, gmem, assumed_align=128), Int32(3), Int32(-7), Int64(60_000_000_000))
exe_args, _keep = fn.generate_execution_args(*args)
other = args[:4] + (Int64(1),)
print(cutlass.__version__, packs_like_the_dsl(args, exe_args), packs_like_the_dsl(other, exe_args))
"""


def _real_dsl_packing(python: str, folder: Path) -> list[str]:
    """Runs _REAL_DSL_PACKING under `python` (the DSL compiles from a source file)."""
    script = folder / "real_dsl_packing.py"
    script.write_text(_REAL_DSL_PACKING.format(root=str(ROOT_DIR)))
    env = dict(os.environ, CUTE_DSL_ARCH="sm_90a")
    done = subprocess.run([python, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


def test_the_dsl_packs_our_argument_kinds_as_their_own_c_pointers(tmp_path):
    """The learning's premise, on a real compiled function of this DSL: its packing of
    pointers, Int32 and Int64 arguments is theirs (packs_like_the_dsl), and the comparison
    tells a different value apart."""
    version, same, other = _real_dsl_packing(sys.executable, tmp_path)
    assert (same, other) == ("True", "False"), version


def test_the_dsl_452_packs_our_argument_kinds_as_their_own_c_pointers(tmp_path):
    """The same under the leaderboard runners' DSL 4.5.2 (its own python)."""
    py = os.environ.get("NVFP4_DSL452_PYTHON", "")
    if not py:
        pytest.skip("NVFP4_DSL452_PYTHON is not set: no nvidia-cutlass-dsl 4.5.2 python to test")
    version, same, other = _real_dsl_packing(py, tmp_path)
    assert version.startswith("4.5") and (same, other) == ("True", "False")


@pytest.mark.parametrize("groups", [1, 2, 3, 8])
def test_the_pointer_table_rows_hold_pointers_then_aligned_sizes(groups):
    ptrs = tuple(tuple(0x7F0000000000 + 0x1000 * (5 * g + i) for i in range(5)) for g in range(groups))
    sizes = tuple((16 * (g + 1), 4096, 7168, 1) for g in range(groups))
    rows, sizes_at = kernel_runner.pointer_table_rows(ptrs, sizes)
    assert rows.dtype == torch.int64 and (8 * sizes_at) % 16 == 0 and sizes_at >= 5 * groups
    assert rows[: 5 * groups].view(groups, 5).tolist() == [list(p) for p in ptrs]
    assert rows[sizes_at:].view(torch.int32).view(groups, 4).tolist() == [list(s) for s in sizes]
