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


def _args(base: int, count: int = 5, timeout_ns: int = 60_000_000_000):
    """Arguments of the kinds the kernels take: global pointers, Int32, an Int64 over 2^32."""
    return (binding.KernelArg(cutlass.Int32, base, True), binding.KernelArg(cutlass.Int64, base + 0x1000, True, 128),
            binding.int_arg(Int32, count), binding.int_arg(Int32, -7), binding.int_arg(Int64, timeout_ns))


def dsl_c_pointers(dsl_objects: tuple) -> list:
    """The DSL's own packing protocol: each DSL object's __c_pointers__, in order."""
    return [p for a in dsl_objects for p in a.__c_pointers__()]


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

    def __init__(self, kinds=KINDS, pack=dsl_c_pointers):
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
    fn = FakeCompiled(KINDS[::-1], pack=lambda args: dsl_c_pointers(args[::-1]))
    for base in (0x7F0000000000, 0x7F0000100000):
        binding.bind_launch(fn, _args(base))()
    assert fn.dsl_packings == 2
    assert binding.learned_entry(fn) is None


def test_packs_like_the_dsl_compares_count_and_values():
    args = _args(0x7F0000000000)
    kept = []  # the DSL objects' C pointers point into them

    def dsl(a):
        kept.append(binding.dsl_args(a))
        return dsl_c_pointers(kept[-1])
    assert binding.packs_like_the_dsl(args, dsl(args))
    assert not binding.packs_like_the_dsl(args, dsl(args)[:-1])
    assert not binding.packs_like_the_dsl(args, dsl(_args(0x7F0000000000, timeout_ns=1)))
    assert not binding.packs_like_the_dsl(args, dsl(_args(0x7F0000000080)))
    assert not binding.packs_like_the_dsl(args, dsl(_args(0x7F0000000000, count=-5)))
    plain = (cutlass.Float32(1.0),)  # not a KernelArg: its packing is not compared, never learned
    assert not binding.packs_like_the_dsl(plain, dsl_c_pointers(plain))


def test_pack_values_lays_each_value_in_its_own_slot():
    args = _args(0x7F0000000000, count=3, timeout_ns=-(1 << 40))
    storage, addresses = binding.pack_values(args)
    assert _values(addresses, KINDS) == [0x7F0000000000, 0x7F0000001000, 3, -7, -(1 << 40)]
    assert [a - addresses[0] for a in addresses] == [0, 8, 16, 24, 32]


def test_int_arg_refuses_a_value_its_type_cannot_hold():
    assert binding.int_arg(Int32, (1 << 31) - 1).value == (1 << 31) - 1
    with pytest.raises(ValueError, match="does not fit Int32"):
        binding.int_arg(Int32, 1 << 31)
    with pytest.raises(ValueError, match="does not fit Int64"):
        binding.int_arg(Int64, -(1 << 63) - 1)


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
from nvfp4_gemm.binding import KernelArg, dsl_args, fake_ptr, int_arg, packs_like_the_dsl


@cute.jit
def host_fn(a: cute.Pointer, b: cute.Pointer, n: Int32, m: Int32, t: Int64):
    pass


fn = cute.compile(host_fn, fake_ptr(cutlass.Int32), fake_ptr(cutlass.Int64, 128), Int32(1), Int32(1), Int64(0))
args = (KernelArg(cutlass.Int32, 0x7F0000001000, True), KernelArg(cutlass.Int64, 0x7F0000002000, True, 128),
        int_arg(Int32, 3), int_arg(Int32, -7), int_arg(Int64, 60_000_000_000))
objects = dsl_args(args)  # exe_args point into them
exe_args, _keep = fn.generate_execution_args(*objects)
other = args[:4] + (int_arg(Int64, 1),)
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


_KERNEL_PACKING = """
import sys, types
sys.path.insert(0, {root!r})
from nvfp4_gemm import binding, {module}
from nvfp4_gemm.sm90_config import make_sm90_config
from nvfp4_gemm.watchdog import LaunchWatch

bound = []  # (fn, args) of each launcher the backend binds: the init's, then the GEMM's
{module}.bind_launch = lambda fn, args: bound.append((fn, args))
kernels = {compile}
base = iter(range(0x7F0000001000, 0x7F0000100000, 0x1000))  # 4 KiB apart: every alignment holds


def table(shape=(2,)):
    address = next(base)
    return types.SimpleNamespace(data_ptr=lambda: address, shape=shape)


sizes, ptrs, tensormaps = table((2, 4)), table(), table()
sched = types.SimpleNamespace(schedule=table(), tables=dict(ranges=table(), units=table()),
                              host=types.SimpleNamespace(num_tiles=10, grid=74, unit_stride=3))
scratch = types.SimpleNamespace(partials=table(), flags=table())
record = types.SimpleNamespace(words=table(), claim=table())
kernels.init(ptrs, sizes, tensormaps)
kernels.prepare(sizes, ptrs, tensormaps, sched, scratch, LaunchWatch(record, 3, 10**10))
for name, (fn, args) in sorted(zip(("init", "gemm"), bound)):
    objects = binding.dsl_args(args)
    exe_args, _keep = fn.generate_execution_args(*objects)
    print(name, binding.packs_like_the_dsl(args, exe_args))
"""

_KERNELS = {
    "sm90": ("sm_90a", "sm90.compile_sm90(make_sm90_config(256, split_k=2))"),
    "sm100": ("sm_100a", "sm100.compile_sm100(sm100.SM100_NAMED_CONFIGS['swap_2cta_m128n256'])"),
}


def _kernel_packing(python: str, module: str, folder: Path) -> list[str]:
    arch, compile_ = _KERNELS[module]
    script = folder / f"{module}_packing.py"
    script.write_text(_KERNEL_PACKING.format(root=str(ROOT_DIR), module=module, compile=compile_))
    env = dict(os.environ, CUTE_DSL_ARCH=arch)
    done = subprocess.run([python, str(script)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


@pytest.mark.parametrize("module", sorted(_KERNELS))
@pytest.mark.parametrize("dsl", ["4.8.1", "4.5.2"])
def test_each_kernels_launch_arguments_pack_as_the_dsl_packs_them(module, dsl, tmp_path):
    """What the runner launches, as its backend's prepare and init build it (KernelArgs,
    the split-K scratch and the watchdog's included), compiled for its GPU on the CPU: the
    DSL packs the DSL objects of those arguments as pack_values packs their values, so a
    later table of either kernel launches without the DSL. The Blackwell kernel has no GPU
    here; this is what its later tables rely on."""
    python = sys.executable
    if dsl == "4.5.2":
        python = os.environ.get("NVFP4_DSL452_PYTHON", "")
        if not python:
            pytest.skip("NVFP4_DSL452_PYTHON is not set: no nvidia-cutlass-dsl 4.5.2 python to test")
    assert _kernel_packing(python, module, tmp_path) == ["gemm", "True", "init", "True"]


@pytest.mark.parametrize("groups", [1, 2, 3, 8])
def test_the_pointer_table_rows_hold_pointers_then_aligned_sizes(groups):
    ptrs = tuple(tuple(0x7F0000000000 + 0x1000 * (5 * g + i) for i in range(5)) for g in range(groups))
    sizes = tuple((16 * (g + 1), 4096, 7168, 1) for g in range(groups))
    rows, sizes_at = kernel_runner.pointer_table_rows(ptrs, sizes)
    assert rows.dtype == torch.int64 and (8 * sizes_at) % 16 == 0 and sizes_at >= 5 * groups
    assert rows[: 5 * groups].view(groups, 5).tolist() == [list(p) for p in ptrs]
    assert rows[sizes_at:].view(torch.int32).view(groups, 4).tolist() == [list(s) for s in sizes]


@pytest.mark.parametrize("groups,num_desc,num_flags,partials", [
    (1, 5, 0, 0), (2, 5, 0, 0), (3, 6, 7, 1001), (8, 6, 64, 1 << 20), (64, 5, 1, 3)])
def test_a_table_layout_keeps_its_parts_apart_and_aligned(groups, num_desc, num_flags, partials):
    """The one buffer of a pointer table: rows, then the flags (zeros in the upload), then
    the descriptors on a 128-byte boundary, then the partials; none overlaps another."""
    lay = kernel_runner.table_layout(groups, num_desc, num_flags, partials)
    ptrs = tuple(tuple(range(5 * g, 5 * g + 5)) for g in range(groups))
    sizes = tuple((g + 1, 256, 512, 1) for g in range(groups))
    rows, sizes_at = kernel_runner.pointer_table_rows(ptrs, sizes, lay.flag_words)
    assert rows.numel() == lay.flags_at + lay.flag_words <= lay.desc_at  # the upload ends before the descriptors
    assert sizes_at + 2 * groups == lay.flags_at and lay.flags_at % 2 == 0  # flags 16-byte aligned
    assert 2 * lay.flag_words >= num_flags and not rows[lay.flags_at:].any()
    assert lay.desc_at % 16 == 0 and lay.partials_at - lay.desc_at == 16 * num_desc * groups
    assert lay.partials_at % 2 == 0 and 2 * (lay.words - lay.partials_at) >= partials


def test_a_table_buffer_holds_the_upload_at_its_front():
    host = torch.arange(7, dtype=torch.int64)
    out = binding.to_device_async(host, torch.device("cpu"), 40)
    assert out.shape == (40,) and out[:7].tolist() == list(range(7))
