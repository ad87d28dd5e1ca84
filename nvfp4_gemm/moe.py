"""grouped_mm_masked: the NVFP4 grouped GEMM of a mixture-of-experts layer, whose per-group
token counts live on the GPU. A torch custom op in two forms:

    nvfp4_gemm::grouped_mm_masked(a, sfa, b, sfb, masked_m, *, expected_m=None) -> Tensor
    nvfp4_gemm::grouped_mm_masked_out(a, sfa, b, sfb, masked_m, out, *, expected_m=None) -> ()

and the Python entry point grouped_mm_masked(a, sfa, b, sfb, masked_m, out=None, *,
expected_m=None), which calls the first without `out` and the second with it.

Contract, per group g and row m < masked_m[g] (clamped to 0 .. max_m):
    out[g, m, n] = fp16( sum_k  a[g, m, k] * sfa[g, m, k // 16]  *  b[g, n, k] * sfb[g, n, k // 16] )
with fp32 sums and one rounding to fp16. Rows m >= masked_m[g] of `out` are not written:
they keep what the caller's `out` held, and are zero in the tensor the functional form
allocates.

    a         float4_e2m1fn_x2 (or uint8) [G, max_m, K/2], contiguous: two E2M1 values a byte,
              the first in the low nibble, K-major
    b         float4_e2m1fn_x2 (or uint8) [G, N, K/2], contiguous
    sfa       float8_e4m3fn (32, 4, ceil(max_m/128), 4, ceil(K/64), G): the kit's blocked
              scale layout with L = G, a permuted view of a contiguous
              (G, ceil(max_m/128), ceil(K/64), 32, 4, 4) allocation (reference.py's
              create_reordered_scale_factor_tensor(G, max_m, K, ...)); sfa[..., g:g+1] is
              group g's scales in the leaderboard's per-group form
    sfb       float8_e4m3fn (32, 4, ceil(N/128), 4, ceil(K/64), G), the same for b
    masked_m  int32 [G] on a's device: the rows of each group to compute; never read on the
              host
    out       float16 [G, max_m, N], contiguous, on a's device
    expected_m  a host hint (a typical token count) that may pick a config; it never
              changes a result
K is a positive multiple of 16. Shape, dtype, device and layout errors raise one ValueError
naming the argument, decided from the tensors' metadata alone (masked_m's values are not
read). Scale padding (rows past max_m or N, columns past K/16) and the rows of `a` at or
above masked_m[g] may hold anything, NaN scales included: they never reach a written row.

Implementations: the CPU's is the exact path (each group decoded to fp32 by the exact path's
decoder, fp32 sums with TF32 off, one rounding to fp16). The CUDA one decodes every group's
max_m rows and N rows to fp16 (exact: an E2M1 value times an E4M3 scale has at most 6
significant bits), runs cuBLAS fp16 batched GEMMs with fp32 sums (fp16 split-K reductions
off) and writes the rows below masked_m through a mask built on the GPU. It queues its work
on the caller's current CUDA queue, copies nothing between host and device after the
first call on a device (which builds a 1 KB decode table), reads no value back, and its
shapes depend on the tensors' shapes alone: a CUDA graph can capture it once the op has
run on that device. The fake implementation gives torch.compile the output's metadata.

This module is not part of submission.py (tools/build_submission.py leaves it out): the
leaderboard's contract is custom_kernel's, and this op deals with the caller's CUDA queues.
"""

from __future__ import annotations

import dataclasses

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from .common import _DSL_IMPORT_ERROR, SF_VEC_SIZE, ceil_div, warn_once
from .formats import (
    _blocked_scale_shape,
    _blocked_scale_strides,
    _blocked_scales,
    _e2m1_pair_table,
    _e2m1_pair_tables,
)
from .graph_pools import outside_graph_pools
from .inputs import _FP4_DTYPES
from .masked_runner import FirstRunInCapture, MaskedCheckFailed
from .torch_paths import _dequantize_rows, decode_batches

OP_NAMESPACE = "nvfp4_gemm"
OUT_DTYPE = torch.float16
SCALE_DTYPE = torch.float8_e4m3fn
MASK_DTYPE = torch.int32


@dataclasses.dataclass(frozen=True)
class MaskedProblem:
    """A validated call's sizes: G groups of at most max_m rows, N columns, depth K."""

    groups: int
    max_m: int
    n: int
    k: int
    device: torch.device


def _fail(arg: str, message: str) -> None:
    raise ValueError(f"grouped_mm_masked: argument '{arg}': {message}")


def _check_tensor(arg: str, t, dtypes: tuple, shape: tuple, device: torch.device | None,
                  shape_from=None) -> None:
    """shape_from: a callable giving the text after the expected shape in the error (made
    only for an error: a warm call's checks format nothing)."""
    if not isinstance(t, torch.Tensor):
        _fail(arg, f"expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        _fail(arg, f"dtype {t.dtype}, expected {' or '.join(str(d) for d in dtypes)}")
    if t.shape != shape:
        _fail(arg, f"shape {tuple(t.shape)}, expected {tuple(shape)}{shape_from() if shape_from else ''}")
    if device is not None and t.device != device:
        _fail(arg, f"on {t.device}, but 'a' is on {device}")


def _check_dense(arg: str, t: torch.Tensor, strides: tuple[int, ...]) -> None:
    """t's strides are `strides` in every dimension of more than one element (the others
    address nothing); an empty tensor addresses nothing at all."""
    if t.numel() == 0:
        return
    for size, stride, dense in zip(t.shape, t.stride(), strides):
        if size > 1 and stride != dense:
            _fail(arg, f"strides {t.stride()}, expected the dense {strides}")


def stacked_scale_shape(rows: int, k: int, groups: int) -> tuple[int, ...]:
    """Shape of a stacked blocked scale tensor: the per-group (32, 4, ceil(rows/128), 4,
    ceil(K/64), 1) with L = groups."""
    return (*_blocked_scale_shape(rows, k)[:5], groups)


def stacked_scale_strides(rows: int, k: int) -> tuple[int, ...]:
    """Element strides of stacked_scale_shape's dense form: the permuted view of a contiguous
    (G, ceil(rows/128), ceil(K/64), 32, 4, 4) allocation, one group after another."""
    return (*_blocked_scale_strides(rows, k), ceil_div(rows, 128) * ceil_div(k // SF_VEC_SIZE, 4) * 512)


# validated calls' problems by their arguments' metadata (_signature): a warm call with the
# tensors of an earlier one, or others laid out alike, skips the checks' Python (measured:
# python tools/probes/masked_host_overhead.py)
_CHECKED: dict = {}
_CHECKED_MAX = 256


def _signature(a, sfa, b, sfb, masked_m, out) -> tuple:
    """All that check_masked_args reads of its tensors: each one's type, dtype, shape,
    strides and device (contiguity and numel follow from shape and strides). Raises
    (AttributeError, TypeError, RuntimeError) for an argument that is not a strided tensor;
    its hash raises TypeError for symbolic sizes."""
    return (type(a), a.dtype, a.shape, a.stride(), a.device,
            type(sfa), sfa.dtype, sfa.shape, sfa.stride(), sfa.device,
            type(b), b.dtype, b.shape, b.stride(), b.device,
            type(sfb), sfb.dtype, sfb.shape, sfb.stride(), sfb.device,
            type(masked_m), masked_m.dtype, masked_m.shape, masked_m.stride(), masked_m.device,
            None if out is None else (type(out), out.dtype, out.shape, out.stride(), out.device))


def check_masked_args(a, sfa, b, sfb, masked_m, out=None, expected_m=None) -> MaskedProblem:
    """The call's sizes, or a ValueError naming the first argument that does not fit the
    contract (module docstring). Reads metadata only: works on fake tensors and never reads
    masked_m's values. A call whose tensors' metadata (_signature) passed before gets that
    call's result without the checks; only a passing call is remembered."""
    try:
        key = _signature(a, sfa, b, sfb, masked_m, out)
        p = _CHECKED.get(key)
    except (AttributeError, TypeError, RuntimeError):  # not strided tensors, or symbolic sizes
        key = p = None
    if p is None:
        p = _check_masked_args(a, sfa, b, sfb, masked_m, out)
        if key is not None:
            if len(_CHECKED) >= _CHECKED_MAX:
                _CHECKED.pop(next(iter(_CHECKED)))
            _CHECKED[key] = p
    _check_expected_m(expected_m)
    return p


def _check_masked_args(a, sfa, b, sfb, masked_m, out) -> MaskedProblem:
    """check_masked_args' checks of the tensors, every one."""
    if not isinstance(a, torch.Tensor):
        _fail("a", f"expected a torch.Tensor, got {type(a).__name__}")
    if a.dim() != 3:
        _fail("a", f"shape {tuple(a.shape)}: expected 3 dimensions [G, max_m, K/2]")
    groups, max_m, k_half = a.shape
    k = 2 * k_half
    device = a.device
    if k == 0 or k % SF_VEC_SIZE:
        _fail("a", f"shape {tuple(a.shape)}: K = 2 * {k_half} = {k} must be a positive multiple of {SF_VEC_SIZE}")
    _check_tensor("a", a, _FP4_DTYPES, (groups, max_m, k_half), None)
    if not a.is_contiguous():
        _fail("a", f"strides {a.stride()}: expected a contiguous [G, max_m, K/2] tensor")
    if not isinstance(b, torch.Tensor):
        _fail("b", f"expected a torch.Tensor, got {type(b).__name__}")
    if b.dim() != 3:
        _fail("b", f"shape {tuple(b.shape)}: expected 3 dimensions [G, N, K/2]")
    n = b.shape[1]
    _check_tensor("b", b, _FP4_DTYPES, (groups, n, k_half), device, lambda: f" = [G, N, K/2] with a's G = {groups}, K = {k}")
    if not b.is_contiguous():
        _fail("b", f"strides {b.stride()}: expected a contiguous [G, N, K/2] tensor")
    for arg, sf, rows, name in (("sfa", sfa, max_m, "max_m"), ("sfb", sfb, n, "N")):
        _check_tensor(arg, sf, (SCALE_DTYPE,), stacked_scale_shape(rows, k, groups), device,
                      lambda name=name, rows=rows: f" = (32, 4, ceil({name}/128), 4, ceil(K/64), G) for {name} = {rows}, K = {k}, G = {groups}")
        _check_dense(arg, sf, stacked_scale_strides(rows, k))
    _check_tensor("masked_m", masked_m, (MASK_DTYPE,), (groups,), device, lambda: f" = [G] with G = {groups}")
    if out is not None:
        _check_tensor("out", out, (OUT_DTYPE,), (groups, max_m, n), device, lambda: " = [G, max_m, N]")
        if not out.is_contiguous():
            _fail("out", f"strides {out.stride()}: expected a contiguous [G, max_m, N] tensor")
    return MaskedProblem(groups, max_m, n, k, device)


def _check_expected_m(expected_m) -> None:
    if expected_m is not None and (isinstance(expected_m, bool) or not isinstance(expected_m, (int, torch.SymInt))
                                   or expected_m < 0):
        _fail("expected_m", f"{expected_m!r}: expected None or an int >= 0")


def _rows_kept(masked_m: torch.Tensor, max_m: int) -> torch.Tensor:
    """(G, max_m, 1) bool, True for row m of group g when m < masked_m[g]: made on
    masked_m's device, by ops whose shapes depend on max_m alone."""
    rows = torch.arange(max_m, dtype=MASK_DTYPE, device=masked_m.device)
    return (rows.unsqueeze(0) < masked_m.unsqueeze(1)).unsqueeze(2)


def _exact_into(a, sfa, b, sfb, masked_m, out, p: MaskedProblem) -> None:
    """The exact path (any device; the CPU's implementation): each group's max_m and N rows
    decoded to fp32 by run_torch_exact's decoder, fp32 products and sums with TF32 off, one
    rounding to fp16; rows below masked_m[g] written into out."""
    if p.groups == 0 or p.max_m == 0 or p.n == 0:
        return
    products = torch.empty((p.groups, p.max_m, p.n), dtype=OUT_DTYPE, device=p.device)
    saved_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for g in range(p.groups):
            a32 = _dequantize_rows(a[g], sfa[..., g:g + 1], p.k)
            b32 = _dequantize_rows(b[g], sfb[..., g:g + 1], p.k)
            products[g] = torch.mm(a32, b32.T).to(OUT_DTYPE)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved_tf32
    torch.where(_rows_kept(masked_m, p.max_m), products, out, out=out)


def _pair_table(device: torch.device) -> torch.Tensor:
    """The kit's packed byte -> f16x2 table on `device` (formats._e2m1_pair_table). Its first
    build copies 64 bytes from the host, which a CUDA graph capture cannot hold: the op must
    have run once on the device before it is captured (a capture's warm-up does that)."""
    table = _e2m1_pair_tables.get(device)
    if table is None:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise RuntimeError(
                f"grouped_mm_masked: first call on {device} inside a CUDA graph capture; run the "
                "op once on this device before capturing it (it builds its decode table then)")
        if device.type == "cuda":
            # allocated outside any graph's pool (a cached table in torch.compile's graph-tree
            # warm-up would be a live tensor of its pool), filled on the caller's stream
            host = _e2m1_pair_table(torch.device("cpu"))
            table = outside_graph_pools(lambda: torch.empty_like(host, device=device), device)
            table.copy_(host)
            _e2m1_pair_tables[device] = table
        else:
            table = _e2m1_pair_table(device)
    return table


def _stacked_scales_f16(sf: torch.Tensor, rows: int, k: int) -> torch.Tensor:
    """(G, rows, K/16) fp16 scales out of a stacked blocked tensor (32, 4, rest, 4, rest_k,
    G). The groups lie one after another in memory, so the G x rest row atoms are one
    blocked tensor of G * rest * 128 rows, which formats._blocked_scales unblocks."""
    groups, rest = sf.shape[5], sf.shape[2]
    merged = sf.permute(0, 1, 5, 2, 3, 4).reshape(32, 4, groups * rest, 4, sf.shape[4], 1)
    scales = _blocked_scales(merged, groups * rest * 128, k, OUT_DTYPE)
    return scales.view(groups, rest * 128, k // SF_VEC_SIZE)[:, :rows]


def _decode_f16(packed: torch.Tensor, sf: torch.Tensor, k: int, table: torch.Tensor) -> torch.Tensor:
    """(G, rows, K/2) packed E2M1 and stacked blocked scales -> (G, rows, K) fp16, exact, as
    torch_paths._dequantize_rows_f16 decodes one group: one table gather per packed byte,
    one multiply per value."""
    groups, rows = packed.shape[0], packed.shape[1]
    pairs = table[packed.view(torch.uint8).to(torch.int32)]
    values = pairs.view(torch.float16).view(groups, rows, k // SF_VEC_SIZE, SF_VEC_SIZE)
    return (values * _stacked_scales_f16(sf, rows, k).unsqueeze(-1)).view(groups, rows, k)


def _cuda_into(a, sfa, b, sfb, masked_m, out, p: MaskedProblem, batch_bytes: int | None = None) -> None:
    """The CUDA implementation: per batch of groups (at most `batch_bytes` of fp16 operands,
    torch_paths.DECODE_BATCH_BYTES by default, as the fp16 fallback batches), both operands
    decoded to fp16, one cuBLAS fp16 bmm with fp32 sums and one rounding, rows below
    masked_m[g] written into out. The batches are fixed by the shapes, so the launches are
    too. Runs on any device (the CPU tests run it there)."""
    if p.groups == 0 or p.max_m == 0 or p.n == 0:
        return
    table = _pair_table(p.device)
    kept = _rows_kept(masked_m, p.max_m)
    sizes = [(p.max_m, p.n, p.k, 1)] * p.groups
    matmul = torch.backends.cuda.matmul
    saved = matmul.allow_fp16_reduced_precision_reduction
    matmul.allow_fp16_reduced_precision_reduction = False
    try:
        for batch in decode_batches(sizes, range(p.groups), batch_bytes):
            lo, hi = batch[0], batch[-1] + 1
            a16 = _decode_f16(a[lo:hi], sfa[..., lo:hi], p.k, table)
            b16 = _decode_f16(b[lo:hi], sfb[..., lo:hi], p.k, table)
            products = torch.bmm(a16, b16.transpose(1, 2))
            del a16, b16
            torch.where(kept[lo:hi], products, out[lo:hi], out=out[lo:hi])
            del products
    finally:
        matmul.allow_fp16_reduced_precision_reduction = saved


# per CUDA device: its masked kernel runner (masked_runner.MaskedRunner), or None where no
# kernel serves the op there
_RUNNERS: dict = {}


def _kernel_runner(device: torch.device):
    """The device's masked kernel runner, made on its first call: on a Hopper GPU (sm_90)
    sm90_masked.MaskedSm90Runner, on a Blackwell one (sm_100) with NVFP4_GEMM_MASKED_SM100=1
    sm100_masked.MaskedSm100Runner, where the CuTe DSL is installed and NVFP4_GEMM_PATH is
    auto or names that kernel; None elsewhere (the torch path then runs). The first run of
    each config is checked against the exact path on Blackwell, and on Hopper with
    NVFP4_GEMM_SELF_CHECK=1 (NVFP4_GEMM_SELF_CHECK=0 turns it off on both)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index in _RUNNERS:
        return _RUNNERS[index]
    from .dispatch import (  # parsed as custom_kernel parses them
        requested_path,
        requested_self_check,
    )

    runner = None
    path, check = requested_path(), requested_self_check()
    capability = torch.cuda.get_device_capability(index)
    if _DSL_IMPORT_ERROR is None and capability in ((9, 0), (10, 0)):
        device = torch.device("cuda", index)
        sms = torch.cuda.get_device_properties(index).multi_processor_count
        if capability == (9, 0) and path in ("auto", "sm90"):
            from .sm90_masked import MaskedSm90Runner
            runner = MaskedSm90Runner(device, sms, check_first_run=check is True)
        elif capability == (10, 0) and path in ("auto", "sm100"):
            from .sm100_masked import MaskedSm100Runner, masked_sm100_enabled
            if masked_sm100_enabled():
                runner = MaskedSm100Runner(device, sms, check_first_run=check is not False)
    _RUNNERS[index] = runner
    return runner


def _kernel_into(a, sfa, b, sfb, masked_m, out, p: MaskedProblem, expected_m) -> bool:
    """The kernel's run of the call, or False where it cannot take it (the reason warned
    once). A kernel that fails to compile or launch, or fails its first run's check (which
    leaves the exact result in `out`), is warned about and not tried again on that device;
    the call then takes the torch path."""
    runner = _kernel_runner(p.device)
    if runner is None:
        return False
    try:
        reason = runner.run(a, sfa, b, sfb, masked_m, out, p, expected_m,
                            exact=lambda dst: _cuda_into(a, sfa, b, sfb, masked_m, dst, p))
    except FirstRunInCapture:  # the caller's to fix (docs/moe.md): the kernel stays on
        raise
    except MaskedCheckFailed as e:
        _RUNNERS[runner.device.index] = None
        warn_once(f"grouped_mm_masked: {e}; running the torch path on this device from now on")
        return True  # out holds the exact result
    except Exception as e:  # compile or launch: the torch path still gives the result
        _RUNNERS[runner.device.index] = None
        warn_once(f"grouped_mm_masked: {runner.KERNEL} failed ({type(e).__name__}: {str(e)[:300]}); "
                  "running the torch path on this device from now on")
        return False
    if reason is not None:
        warn_once(f"grouped_mm_masked: {runner.KERNEL} cannot take this call ({reason}); running the torch path")
        return False
    return True


def _device_into(a, sfa, b, sfb, masked_m, out, p: MaskedProblem, expected_m=None) -> None:
    """The CUDA implementation: the device's kernel where it takes the call, else the torch
    path (_cuda_into)."""
    if p.groups == 0 or p.max_m == 0 or p.n == 0:
        return
    if not _kernel_into(a, sfa, b, sfb, masked_m, out, p, expected_m):
        _cuda_into(a, sfa, b, sfb, masked_m, out, p)


def _cpu_into(a, sfa, b, sfb, masked_m, out, p: MaskedProblem, expected_m=None) -> None:
    _exact_into(a, sfa, b, sfb, masked_m, out, p)


_IMPLS = {"cpu": _cpu_into, "cuda": _device_into}


def _run(a, sfa, b, sfb, masked_m, out, expected_m, device_type: str) -> None:
    p = check_masked_args(a, sfa, b, sfb, masked_m, out, expected_m)
    _IMPLS[device_type](a, sfa, b, sfb, masked_m, out, p, expected_m)


def _functional(a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor,
                masked_m: torch.Tensor, *, expected_m: int | None = None) -> torch.Tensor:
    p = check_masked_args(a, sfa, b, sfb, masked_m, None, expected_m)
    out = torch.zeros((p.groups, p.max_m, p.n), dtype=OUT_DTYPE, device=p.device)
    _IMPLS[p.device.type](a, sfa, b, sfb, masked_m, out, p, expected_m)
    return out


def _functional_fake(a, sfa, b, sfb, masked_m, *, expected_m=None):
    p = check_masked_args(a, sfa, b, sfb, masked_m, None, expected_m)
    return a.new_empty((p.groups, p.max_m, p.n), dtype=OUT_DTYPE)


def _out_cpu(a, sfa, b, sfb, masked_m, out, *, expected_m=None) -> None:
    _run(a, sfa, b, sfb, masked_m, out, expected_m, "cpu")
    torch.autograd.graph.increment_version(out)  # the op's declared mutation of out


def _out_cuda(a, sfa, b, sfb, masked_m, out, *, expected_m=None) -> None:
    _run(a, sfa, b, sfb, masked_m, out, expected_m, "cuda")
    torch.autograd.graph.increment_version(out)


def _out_fake(a, sfa, b, sfb, masked_m, out, *, expected_m=None) -> None:
    check_masked_args(a, sfa, b, sfb, masked_m, out, expected_m)


def _registered(name: str) -> bool:
    """Whether nvfp4_gemm::<name> exists in this process: a second import of the package
    (a test that reloads it) must not define the op twice."""
    try:
        getattr(getattr(torch.ops, OP_NAMESPACE), name)
    except AttributeError:
        return False
    return True


_SCHEMAS = {
    "grouped_mm_masked": ("(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor masked_m, *, SymInt? expected_m=None) "
                          "-> Tensor", _functional, _functional, _functional_fake),
    "grouped_mm_masked_out": ("(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor masked_m, Tensor(a5!) out, *, "
                              "SymInt? expected_m=None) -> ()", _out_cpu, _out_cuda, _out_fake),
}


def _below_autograd(op):
    """The ops' Autograd kernel: they have no derivative (FP4 and E4M3 operands, an fp16
    result of one rounding), so it runs the backend's kernel below autograd and its result
    never requires grad, as torch's guidance for a non-differentiable op has it."""
    def kernel(*args, **kwargs):
        with torch._C._AutoDispatchBelowAutograd():
            return op(*args, **kwargs)
    return kernel


def _define_ops() -> None:
    """nvfp4_gemm::grouped_mm_masked and grouped_mm_masked_out, each with a CPU and a CUDA
    kernel, a fake one and the Autograd one (_below_autograd); an op a previous import of
    the package defined is left as it is. Registered through torch.library's define / impl
    rather than torch.library.custom_op, whose Python autograd and in-place wrappers made
    a call through torch.ops (torch.compile's way in) cost 4.9x a direct call, against
    1.75x now (measured: python tools/probes/masked_host_overhead.py); the `out` form moves out's
    version counter itself, as custom_op's in-place wrapper did. torch.library keeps the
    registrations for the process (torch.library._keep_alive), past a reimport."""
    for name, (schema, cpu, cuda, fake) in _SCHEMAS.items():
        if _registered(name):
            continue
        qualname = f"{OP_NAMESPACE}::{name}"
        torch.library.define(qualname, schema)
        torch.library.impl(qualname, "CPU", cpu)
        torch.library.impl(qualname, "CUDA", cuda)
        torch.library.register_fake(qualname, fake)
        torch.library.impl(qualname, "Autograd", _below_autograd(getattr(getattr(torch.ops, OP_NAMESPACE), name).default))


_define_ops()


def _direct_call_ok(tensors) -> bool:
    """Whether the Python entry point may run the implementation itself instead of through
    torch.ops: outside torch.compile's tracing, with no dispatch or torch-function mode
    active (fake tensors, profilers and the like see the op), on plain CPU or CUDA
    tensors that need no grad (every one of `tensors` such a tensor). The result is the
    op's: the same implementation runs."""
    if torch.compiler.is_compiling() or _get_current_dispatch_mode() is not None:
        return False
    if torch._C._is_torch_function_mode_enabled():
        return False
    for t in tensors:
        # (is_cuda / is_cpu: _IMPLS' device types, without building a torch.device)
        if type(t) is not torch.Tensor or t.requires_grad or not (t.is_cuda or t.is_cpu):
            return False
    return True


def grouped_mm_masked(a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor,
                      masked_m: torch.Tensor, out: torch.Tensor | None = None, *,
                      expected_m: int | None = None) -> torch.Tensor:
    """out[g, :masked_m[g]] = fp16(dequant(a[g]) @ dequant(b[g]).T) for every group g (the
    module docstring gives the layouts). Without `out`, returns a new [G, max_m, N] fp16
    tensor whose rows at or above masked_m[g] are zero; with it, writes into `out`, leaves
    those rows as they were and returns `out`. `expected_m` is a hint only. Works under
    torch.compile(fullgraph=True) and in CUDA graphs; never waits for the GPU."""
    if _direct_call_ok((a, sfa, b, sfb, masked_m) if out is None else (a, sfa, b, sfb, masked_m, out)):
        # eager and plain: the op's kernel without the dispatcher, whose way in costs
        # about 1.75x the direct call (measured: python tools/probes/masked_host_overhead.py);
        # its checks name any argument that is not a tensor
        if out is None:
            return _functional(a, sfa, b, sfb, masked_m, expected_m=expected_m)
        (_out_cuda if a.is_cuda else _out_cpu)(a, sfa, b, sfb, masked_m, out, expected_m=expected_m)
        return out
    for arg, t in (("a", a), ("sfa", sfa), ("b", b), ("sfb", sfb), ("masked_m", masked_m)):
        if not isinstance(t, torch.Tensor):  # else the dispatcher's TypeError, which names no argument
            _fail(arg, f"expected a torch.Tensor, got {type(t).__name__}")
    if out is not None and not isinstance(out, torch.Tensor):
        _fail("out", f"expected a torch.Tensor or None, got {type(out).__name__}")
    _check_expected_m(expected_m)
    ops = getattr(torch.ops, OP_NAMESPACE)
    if out is None:
        return ops.grouped_mm_masked(a, sfa, b, sfb, masked_m, expected_m=expected_m)
    ops.grouped_mm_masked_out(a, sfa, b, sfb, masked_m, out, expected_m=expected_m)
    return out
