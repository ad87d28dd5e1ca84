"""nvfp4_gemm.grouped_mm_masked, the mixture-of-experts op (nvfp4_gemm/moe.py).

CPU: the registration (schemas, torch.library.opcheck with all its test utils, the fake
implementation under torch.compile(fullgraph=True)), results against reference.ref_kernel
for ragged token counts (every group empty, one group full, 0 / 1 / 31 / 32 / 33 / 127 /
128 / 129 tokens, counts outside 0 .. max_m), rows at or above masked_m left alone, the
CUDA implementation's arithmetic run on the CPU, poisoned padding, and every ValueError.

GPU (marked gpu; skip without CUDA): the CUDA implementation against the reference, in a
torch.cuda.CUDAGraph replayed with new token counts and new values written in place, under
torch.compile(fullgraph=True, mode="reduce-overhead"), a warm call under
torch.cuda.set_sync_debug_mode("error"), and a call on a side CUDA queue.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import os
import random
import subprocess
import sys

import pytest
import torch
from cases import ROOT
from conftest import requires_cuda, requires_sm90

import nvfp4_gemm
import reference
from nvfp4_gemm import moe
from nvfp4_gemm.torch_paths import decode_batches

FP4 = torch.float4_e2m1fn_x2
E4M3 = torch.float8_e4m3fn
RTOL = ATOL = 1e-3  # the leaderboard's tolerance
OPS = torch.ops.nvfp4_gemm


@dataclasses.dataclass(frozen=True)
class Pattern:
    """Token counts of one call: masked_m's values, one per group."""

    id: str
    counts: tuple[int, ...]


MAX_M = 160  # every pattern's groups have at most this many rows (two 128-row scale atoms)
PATTERNS = [
    Pattern("all_empty", (0,) * 8),
    Pattern("one_full", (0, 0, 0, MAX_M, 0, 0, 0, 0)),
    Pattern("edges", (0, 1, 31, 32, 33, 127, 128, 129)),
    Pattern("all_full", (MAX_M,) * 8),
    Pattern("ragged", (5, MAX_M, 0, 64, 1, 150, 96, 17)),
    Pattern("out_of_range", (-1, MAX_M + 1, 2**31 - 1, 3, -(2**31), 0, MAX_M, MAX_M - 1)),
]


@dataclasses.dataclass
class MoeInputs:
    """One call's operands on `device`: a, b packed FP4 [G, rows, K/2]; sfa, sfb the stacked
    blocked scales; sfa_rows (max_m, K/16, G) and sfb_rows (N, K/16, G) the same scales
    unblocked, for the reference."""

    a: torch.Tensor
    sfa: torch.Tensor
    b: torch.Tensor
    sfb: torch.Tensor
    sfa_rows: torch.Tensor
    sfb_rows: torch.Tensor

    @property
    def sizes(self) -> tuple[int, int, int, int]:
        g, max_m, kh = self.a.shape
        return g, max_m, self.b.shape[1], 2 * kh

    def args(self) -> tuple[torch.Tensor, ...]:
        return self.a, self.sfa, self.b, self.sfb


def _to(t: torch.Tensor, device) -> torch.Tensor:
    """t on `device` through its bytes (FP4 and E4M3 tensors keep their dtype)."""
    return t.view(torch.uint8).to(device).view(t.dtype)


def _blocked_to(sf: torch.Tensor, device) -> torch.Tensor:
    """A stacked blocked scale view moved to `device` as the same view of a contiguous
    (G, rest, rest_k, 32, 4, 4) allocation."""
    base = sf.permute(5, 2, 4, 0, 1, 3)
    assert base.is_contiguous()
    return _to(base, device).permute(3, 4, 1, 5, 2, 0)


def _blocked(rows_scales: torch.Tensor, rows: int, k: int) -> torch.Tensor:
    """reference.create_reordered_scale_factor_tensor with L = G (which takes no G of 0)."""
    groups = rows_scales.shape[2]
    if groups == 0:
        return torch.empty((0, -(-rows // 128), -(-k // 64), 32, 4, 4), dtype=E4M3).permute(3, 4, 1, 5, 2, 0)
    return reference.create_reordered_scale_factor_tensor(groups, rows, k, rows_scales, "cpu")


def make_inputs(groups: int, max_m: int, n: int, k: int, seed: int, device="cpu", fp4=FP4) -> MoeInputs:
    """Operands drawn as reference.generate_input draws them (E2M1 codes with the sign and
    two low bits of each nibble, scales of 1 or 2, scale padding of random 1s and 2s), made
    on the CPU and moved to `device`. Their products and fp32 sums are exact, so every
    implementation's result is the reference's bit for bit."""
    torch.manual_seed(seed)
    a = torch.randint(0, 256, (groups, max_m, k // 2), dtype=torch.uint8) & 0xBB
    b = torch.randint(0, 256, (groups, n, k // 2), dtype=torch.uint8) & 0xBB
    sfa_rows = torch.randint(1, 3, (max_m, k // 16, groups), dtype=torch.int8).to(E4M3)
    sfb_rows = torch.randint(1, 3, (n, k // 16, groups), dtype=torch.int8).to(E4M3)
    sfa, sfb = _blocked(sfa_rows, max_m, k), _blocked(sfb_rows, n, k)
    return MoeInputs(_to(a.view(fp4), device), _blocked_to(sfa, device), _to(b.view(fp4), device),
                     _blocked_to(sfb, device), _to(sfa_rows, device), _to(sfb_rows, device))


def clamped(counts, max_m: int) -> list[int]:
    return [min(max(c, 0), max_m) for c in counts]


def expected_out(x: MoeInputs, counts, before: torch.Tensor | None = None) -> torch.Tensor:
    """reference.ref_kernel's result per group for its first clamp(count, 0, max_m) rows, over
    `before` (zeros when None): what the op must return."""
    groups, max_m, n, k = x.sizes
    device = x.a.device
    out = torch.zeros((groups, max_m, n), dtype=torch.float16, device=device) if before is None else before.clone()
    for g, m in enumerate(clamped(counts, max_m)):
        if m == 0 or n == 0:
            continue
        data = ([(x.a[g, :m].unsqueeze(-1), x.b[g].unsqueeze(-1), torch.empty((m, n, 1), dtype=torch.float16, device=device))],
                [(x.sfa_rows[:m, :, g:g + 1], x.sfb_rows[:, :, g:g + 1])], None, [(m, n, k, 1)])
        out[g, :m] = reference.ref_kernel(data)[0][:, :, 0]
    return out


def kept_rows(counts, groups: int, max_m: int, device) -> torch.Tensor:
    """(G, max_m, 1) bool: the rows the op writes."""
    rows = torch.arange(max_m, device=device)
    limits = torch.tensor(clamped(counts, max_m), device=device)
    return (rows.unsqueeze(0) < limits.unsqueeze(1)).unsqueeze(2)


def assert_result(got: torch.Tensor, want: torch.Tensor, counts, before: torch.Tensor | None = None,
                  bitwise: bool = False) -> None:
    """got within the leaderboard's tolerance of want (the worst element named when not); rows
    at or above the counts bit for bit as `before` held them (zero without `before`);
    `bitwise`: every element bit for bit."""
    assert got.shape == want.shape and got.dtype == torch.float16 and got.device == want.device
    if got.numel() == 0:
        return
    g32, w32 = got.float(), want.float()
    bad = ~torch.isclose(g32, w32, rtol=RTOL, atol=ATOL, equal_nan=True)
    if bad.any():
        err = torch.where(bad, (g32 - w32).abs().nan_to_num(float("inf")), torch.zeros_like(g32))
        worst = tuple(int(i) for i in torch.unravel_index(err.argmax(), err.shape))
        pytest.fail(f"{int(bad.sum())} of {got.numel()} elements off by more than rtol = atol = {RTOL:g}; "
                    f"worst at {worst}: {float(g32[worst])} against {float(w32[worst])}")
    untouched = ~kept_rows(counts, got.shape[0], got.shape[1], got.device)
    old = torch.zeros_like(got) if before is None else before
    leaked = untouched & (got.view(torch.int16) != old.view(torch.int16))
    assert not leaked.any(), f"rows at or above masked_m changed at {leaked.nonzero()[:5].tolist()}"
    if bitwise:
        assert torch.equal(got.view(torch.int16), want.view(torch.int16))


def sentinel(groups: int, max_m: int, n: int, device, seed: int = 99) -> torch.Tensor:
    """An out buffer's earlier contents: random fp16 with a NaN here and there."""
    gen = torch.Generator().manual_seed(seed)
    t = torch.randn((groups, max_m, n), generator=gen).to(torch.float16)
    t.view(-1)[::97] = float("nan")
    return t.to(device)


def counts_tensor(counts, device) -> torch.Tensor:
    return torch.tensor(counts, dtype=torch.int32, device=device)


# ----------------------------------------------------------------------------------------
# Registration
# ----------------------------------------------------------------------------------------
def test_the_ops_are_registered_with_these_schemas():
    assert str(OPS.grouped_mm_masked.default._schema) == (
        "nvfp4_gemm::grouped_mm_masked(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor masked_m, *, "
        "SymInt? expected_m=None) -> Tensor")
    assert str(OPS.grouped_mm_masked_out.default._schema) == (
        "nvfp4_gemm::grouped_mm_masked_out(Tensor a, Tensor sfa, Tensor b, Tensor sfb, Tensor masked_m, "
        "Tensor(a5!) out, *, SymInt? expected_m=None) -> ()")
    assert nvfp4_gemm.grouped_mm_masked is moe.grouped_mm_masked
    assert "grouped_mm_masked" in nvfp4_gemm.__all__


@pytest.mark.parametrize("name", ["grouped_mm_masked", "grouped_mm_masked_out"])
def test_each_op_has_its_kernels_on_these_keys(name):
    """CPU and CUDA kernels, a fake (Meta) one and an Autograd one, and no Python layer
    of torch.library.custom_op between the dispatcher and them (what makes a call through
    torch.ops cost five times a direct call): the CUDA kernel is the one the GPU tests run,
    registered alike."""
    has = [key for key in ("CPU", "CUDA", "Meta", "Autograd", "ADInplaceOrView")
           if torch._C._dispatch_has_kernel_for_dispatch_key(f"nvfp4_gemm::{name}", key)]
    assert has == ["CPU", "CUDA", "Meta", "Autograd"]
    from torch._library.custom_ops import OPDEFS

    assert f"nvfp4_gemm::{name}" not in OPDEFS


def test_the_ops_are_not_differentiable_and_say_so_by_their_results():
    """An argument that requires grad (E4M3 scales can) gives a result that does not, with
    no warning (the Autograd kernel runs the op below autograd), through torch.ops as
    through the entry point; the `out` form moves out's version counter through torch.ops
    too, as an in-place op does."""
    import warnings

    x = make_inputs(2, 8, 32, 64, seed=81)
    counts = (3, 8)
    masked_m = counts_tensor(counts, "cpu")
    sfa = x.sfa.detach().clone().requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = OPS.grouped_mm_masked(x.a, sfa, x.b, x.sfb, masked_m)
        via_entry = nvfp4_gemm.grouped_mm_masked(x.a, sfa, x.b, x.sfb, masked_m)
    assert not got.requires_grad and got.grad_fn is None and not via_entry.requires_grad
    assert_result(got, expected_out(x, counts), counts, bitwise=True)
    out = torch.zeros((2, 8, 32), dtype=torch.float16)
    version = out._version
    OPS.grouped_mm_masked_out(*x.args(), masked_m, out)
    assert out._version > version
    assert_result(out, expected_out(x, counts), counts, bitwise=True)


@contextlib.contextmanager
def _allclose_on_bits(monkeypatch):
    """torch.allclose compares FP4 and E4M3 tensors by their bytes. opcheck's test_schema asks
    torch.allclose whether an argument changed (SchemaCheckMode.bitwise_equal), and
    torch.allclose has no CPU kernel for these dtypes (NotImplementedError, torch 2.13); a
    byte comparison is the bitwise test that check means."""
    real = torch.allclose

    def allclose(lhs, rhs, *args, **kwargs):
        if lhs.dtype in (FP4, E4M3) and rhs.dtype == lhs.dtype:
            return lhs.shape == rhs.shape and torch.equal(lhs.view(torch.uint8), rhs.view(torch.uint8))
        return real(lhs, rhs, *args, **kwargs)

    monkeypatch.setattr(torch, "allclose", allclose)
    yield


OPCHECK_CASES = [
    Pattern("ragged", (0, 1, 33)),
    Pattern("all_empty", (0, 0, 0)),
    Pattern("all_full", (33, 33, 33)),
]


@pytest.mark.parametrize("fp4", [FP4, torch.uint8], ids=["fp4", "uint8"])
@pytest.mark.parametrize("variant", ["functional", "out"])
@pytest.mark.parametrize("pattern", OPCHECK_CASES, ids=lambda p: p.id)
def test_opcheck(pattern, variant, fp4, monkeypatch):
    """torch.library.opcheck with all its test utils (schema, autograd registration, fake
    tensor, AOT dispatch with dynamic shapes) on both ops."""
    x = make_inputs(3, 33, 32, 256, seed=3, fp4=fp4)
    masked_m = counts_tensor(pattern.counts, "cpu")
    if variant == "functional":
        op, args = OPS.grouped_mm_masked.default, (*x.args(), masked_m)
    else:
        op, args = OPS.grouped_mm_masked_out.default, (*x.args(), masked_m, sentinel(3, 33, 32, "cpu"))
    with _allclose_on_bits(monkeypatch):
        result = torch.library.opcheck(op, args, {"expected_m": 8})
    assert set(result.values()) == {"SUCCESS"}, result


def test_the_fake_implementation_gives_the_output_metadata():
    from torch._subclasses.fake_tensor import FakeTensorMode

    x = make_inputs(4, 40, 48, 512, seed=1)
    with FakeTensorMode() as mode:
        args = [mode.from_tensor(t) for t in (*x.args(), counts_tensor((1, 2, 3, 4), "cpu"))]
        out = OPS.grouped_mm_masked(*args)
        assert out.shape == (4, 40, 48) and out.dtype == torch.float16 and out.is_contiguous()
        buffer = mode.from_tensor(torch.empty((4, 40, 48), dtype=torch.float16))
        assert OPS.grouped_mm_masked_out(*args, buffer) is None


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_torch_compile_fullgraph_on_the_cpu(backend):
    """Both forms compile into one graph with no break, and new token counts run the same
    graph (the counts are data, not guards): one frame compiled per function."""
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    x = make_inputs(8, MAX_M, 32, 256, seed=4)
    counter = CompileCounterWithBackend(backend)

    @torch.compile(fullgraph=True, backend=counter)
    def functional(a, sfa, b, sfb, masked_m):
        return nvfp4_gemm.grouped_mm_masked(a, sfa, b, sfb, masked_m, expected_m=16)

    @torch.compile(fullgraph=True, backend=counter)
    def into(a, sfa, b, sfb, masked_m, out):
        return nvfp4_gemm.grouped_mm_masked(a, sfa, b, sfb, masked_m, out)

    for pattern in PATTERNS[:3]:
        masked_m = counts_tensor(pattern.counts, "cpu")
        want = expected_out(x, pattern.counts)
        assert_result(functional(*x.args(), masked_m), want, pattern.counts, bitwise=True)
        before = sentinel(8, MAX_M, 32, "cpu")
        out = before.clone()
        assert into(*x.args(), masked_m, out) is out
        assert_result(out, expected_out(x, pattern.counts, before), pattern.counts, before, bitwise=True)
    assert counter.frame_count == 2, counter.frame_count
    torch._dynamo.reset()


# ----------------------------------------------------------------------------------------
# Results on the CPU (the exact path)
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: p.id)
def test_cpu_matches_the_reference(pattern):
    x = make_inputs(8, MAX_M, 64, 512, seed=11)
    masked_m = counts_tensor(pattern.counts, "cpu")
    got = nvfp4_gemm.grouped_mm_masked(*x.args(), masked_m)
    assert_result(got, expected_out(x, pattern.counts), pattern.counts, bitwise=True)
    before = sentinel(8, MAX_M, 64, "cpu")
    out = before.clone()
    assert nvfp4_gemm.grouped_mm_masked(*x.args(), masked_m, out) is out
    assert_result(out, expected_out(x, pattern.counts, before), pattern.counts, before, bitwise=True)
    assert torch.equal(masked_m, counts_tensor(pattern.counts, "cpu"))  # inputs are not written


@pytest.mark.parametrize("sizes", [(1, 1, 8, 16), (2, 129, 8, 16), (3, 7, 136, 96), (1, 0, 64, 256),
                                   (2, 32, 0, 256), (0, 32, 64, 256)],
                         ids=["g1_m1_k16", "m129_k16", "n136_k96", "max_m0", "n0", "g0"])
def test_odd_sizes(sizes):
    """K at the minimum and not a multiple of 64, N not a multiple of 8 or 128, and empty
    dimensions (G, max_m or N of 0)."""
    groups, max_m, n, k = sizes
    x = make_inputs(groups, max_m, n, k, seed=5)
    counts = tuple(range(max_m, max_m - groups, -1))
    got = nvfp4_gemm.grouped_mm_masked(*x.args(), counts_tensor(counts, "cpu"))
    assert got.shape == (groups, max_m, n)
    assert_result(got, expected_out(x, counts), counts, bitwise=True)


def test_the_exact_path_matches_the_kits_exact_path():
    """Group g's scales sfa[..., g:g+1] are the leaderboard's per-group form: the kit's
    run_torch_exact on group views gives the op's rows bit for bit."""
    from nvfp4_gemm import inputs, torch_paths

    x = make_inputs(3, 70, 40, 256, seed=6)
    counts = (70, 13, 0)
    got = nvfp4_gemm.grouped_mm_masked(*x.args(), counts_tensor(counts, "cpu"))
    data = ([(x.a[g].unsqueeze(-1), x.b[g].unsqueeze(-1), torch.empty((70, 40, 1), dtype=torch.float16))
             for g in range(3)], None, [(x.sfa[..., g:g + 1], x.sfb[..., g:g + 1]) for g in range(3)],
            [(70, 40, 256, 1)] * 3)
    kit = torch_paths.run_torch_exact(data, inputs.validate_inputs(data))
    for g, m in enumerate(counts):
        assert torch.equal(got[g, :m].view(torch.int16), kit[g][:m, :, 0].view(torch.int16))


@pytest.mark.parametrize("batch_bytes", [None, 1], ids=["one_batch", "a_batch_per_group"])
@pytest.mark.parametrize("pattern", [PATTERNS[2], PATTERNS[4], PATTERNS[5]], ids=lambda p: p.id)
def test_the_cuda_implementation_computes_the_reference_on_the_cpu(pattern, batch_bytes):
    """The CUDA implementation's arithmetic (fp16 decode, fp16 bmm with fp32 sums, the masked
    write, decode batches) run on CPU tensors, where torch's fp16 bmm also sums in fp32."""
    x = make_inputs(8, MAX_M, 48, 256, seed=12)
    masked_m = counts_tensor(pattern.counts, "cpu")
    before = sentinel(8, MAX_M, 48, "cpu")
    out = before.clone()
    problem = moe.check_masked_args(*x.args(), masked_m, out)
    moe._cuda_into(*x.args(), masked_m, out, problem, batch_bytes=batch_bytes)
    assert_result(out, expected_out(x, pattern.counts, before), pattern.counts, before, bitwise=True)


def test_decode_batches_cut_a_decode_step_by_bytes():
    """At N = 4096, K = 7168 each group's fp16 operands take about 59 MB: the CUDA
    implementation decodes 4 groups a batch (torch_paths.DECODE_BATCH_BYTES)."""
    batches = decode_batches([(8, 4096, 7168, 1)] * 64, range(64))
    assert [len(b) for b in batches] == [4] * 16
    assert [g for b in batches for g in b] == list(range(64))


def test_expected_m_never_changes_a_result():
    x = make_inputs(4, 40, 32, 256, seed=7)
    masked_m = counts_tensor((40, 3, 0, 17), "cpu")
    results = [nvfp4_gemm.grouped_mm_masked(*x.args(), masked_m, expected_m=e) for e in (None, 0, 1, 40, 10**6)]
    for r in results[1:]:
        assert torch.equal(r.view(torch.int16), results[0].view(torch.int16))


def test_poisoned_padding_and_rows_above_masked_m_change_nothing():
    """NaN scales (0xFF) in the blocked padding (rows past max_m or N, columns past K/16),
    and NaN scales and random codes in a's rows at or above masked_m, reach no written row:
    the result is the clean one bit for bit."""
    groups, max_m, n, k = 3, 40, 72, 96
    x = make_inputs(groups, max_m, n, k, seed=8)
    counts = (40, 9, 0)
    clean = nvfp4_gemm.grouped_mm_masked(*x.args(), counts_tensor(counts, "cpu"))
    a, sfa, sfb = x.a.clone(), x.sfa.clone(), x.sfb.clone()
    for sf, rows in ((sfa, max_m), (sfb, n)):
        raw = sf.view(torch.uint8)  # sf's strides: a view of a (G, rest, rest_k, 32, 4, 4) allocation
        rest, rest_k = sf.shape[2], sf.shape[4]
        used = torch.zeros((groups, rest * rest_k * 512), dtype=torch.bool)
        used[:, reference.blocked_scale_offsets(rows, k // 16).flatten()] = True
        raw[~used.view(groups, rest, rest_k, 32, 4, 4).permute(3, 4, 1, 5, 2, 0)] = 0xFF
    for g, m in enumerate(counts):
        a.view(torch.uint8)[g, m:] = torch.randint(0, 256, (max_m - m, k // 2), dtype=torch.uint8)
        row = torch.arange(m, max_m)
        sfa.view(torch.uint8)[row % 32, (row % 128) // 32, row // 128, :, :, g] = 0xFF
    poisoned = nvfp4_gemm.grouped_mm_masked(a, sfa, x.b, sfb, counts_tensor(counts, "cpu"))
    assert torch.equal(poisoned.view(torch.int16), clean.view(torch.int16))


# ----------------------------------------------------------------------------------------
# Errors: one ValueError naming the argument, from metadata alone
# ----------------------------------------------------------------------------------------
def _bad_cases():
    """(id, argument named, a function of good arguments that returns bad ones)."""
    G, M, N, K = 3, 40, 48, 256

    def swap(**kw):
        return lambda args: {**args, **kw}

    def sf_contiguous(name):
        return lambda args: {**args, name: args[name].contiguous()}  # right shape, row-major strides

    x = make_inputs(G, M + 128, N + 128, K, seed=2)
    x_k = make_inputs(G, M, N, 2 * K, seed=2)
    return [
        ("a_dtype", "a", swap(a=torch.zeros((G, M, K // 2), dtype=torch.float16))),
        ("a_2d", "a", swap(a=torch.zeros((M, K // 2), dtype=torch.uint8))),
        ("a_k_not_16", "a", lambda args: {**args, "a": args["a"][:, :, :4].contiguous()}),
        ("a_strided", "a", lambda args: {**args, "a": torch.zeros((G, M, K), dtype=torch.uint8)[:, :, ::2]}),
        ("a_not_tensor", "a", swap(a=[[1, 2]])),
        ("b_groups", "b", lambda args: {**args, "b": args["b"][:2]}),
        ("b_k", "b", swap(b=x_k.b)),
        ("b_dtype", "b", lambda args: {**args, "b": args["b"].view(torch.int8)}),
        ("b_3d_expected", "b", swap(b=torch.zeros((N, K // 2), dtype=torch.uint8))),
        ("sfa_rows", "sfa", swap(sfa=x.sfa)),
        ("sfa_dtype", "sfa", lambda args: {**args, "sfa": args["sfa"].view(torch.uint8)}),
        ("sfa_layout", "sfa", sf_contiguous("sfa")),
        ("sfa_groups", "sfa", lambda args: {**args, "sfa": args["sfa"][..., :2]}),
        ("sfb_rows", "sfb", swap(sfb=x.sfb)),
        ("sfb_k", "sfb", swap(sfb=x_k.sfb)),
        ("sfb_layout", "sfb", sf_contiguous("sfb")),
        ("masked_m_dtype", "masked_m", swap(masked_m=torch.zeros(G, dtype=torch.int64))),
        ("masked_m_shape", "masked_m", swap(masked_m=torch.zeros(G + 1, dtype=torch.int32))),
        ("masked_m_2d", "masked_m", swap(masked_m=torch.zeros((G, 1), dtype=torch.int32))),
        ("masked_m_device", "masked_m", swap(masked_m=torch.zeros(G, dtype=torch.int32, device="meta"))),
        ("out_dtype", "out", swap(out=torch.zeros((G, M, N), dtype=torch.float32))),
        ("out_shape", "out", swap(out=torch.zeros((G, M + 1, N), dtype=torch.float16))),
        ("out_strided", "out", swap(out=torch.zeros((G, N, M), dtype=torch.float16).transpose(1, 2))),
        ("expected_m_negative", "expected_m", swap(expected_m=-1)),
        ("expected_m_float", "expected_m", swap(expected_m=2.5)),
        ("expected_m_bool", "expected_m", swap(expected_m=True)),
    ]


BAD_CASES = _bad_cases()


def _good_args():
    x = make_inputs(3, 40, 48, 256, seed=2)
    return {"a": x.a, "sfa": x.sfa, "b": x.b, "sfb": x.sfb, "masked_m": counts_tensor((1, 2, 3), "cpu"),
            "out": torch.zeros((3, 40, 48), dtype=torch.float16), "expected_m": 4}


@pytest.mark.parametrize("case_id, arg, make_bad", BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_bad_arguments_raise_one_value_error_naming_the_argument(case_id, arg, make_bad):
    args = make_bad(_good_args())
    calls = [lambda: nvfp4_gemm.grouped_mm_masked(**args)]
    if arg != "out":
        calls.append(lambda: nvfp4_gemm.grouped_mm_masked(**{**args, "out": None}))
    for call in calls:
        with pytest.raises(ValueError) as info:
            call()
        message = str(info.value)
        assert message.startswith(f"grouped_mm_masked: argument '{arg}': "), message
        assert "\n" not in message


@pytest.mark.parametrize("case_id, arg, make_bad", [c for c in BAD_CASES if c[1] in ("sfa", "sfb", "out", "b")],
                         ids=[c[0] for c in BAD_CASES if c[1] in ("sfa", "sfb", "out", "b")])
def test_the_checks_need_no_data(case_id, arg, make_bad):
    """The same errors from fake tensors, which hold no data: the checks read metadata, and
    masked_m's values least of all."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    args = make_bad(_good_args())
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake = {k: mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for k, v in args.items()}
        with pytest.raises(ValueError, match=f"argument '{arg}'"):
            OPS.grouped_mm_masked_out(fake["a"], fake["sfa"], fake["b"], fake["sfb"], fake["masked_m"], fake["out"])


def test_a_warm_call_skips_the_checks_it_passed_before(monkeypatch):
    """The checks run once per set of argument metadata: a second call with the same
    tensors (or others laid out alike) gets the first call's problem without them, and an
    expected_m that is wrong is still refused on every call."""
    full = moe._check_masked_args
    runs = []
    monkeypatch.setattr(moe, "_CHECKED", {})
    monkeypatch.setattr(moe, "_check_masked_args", lambda *a: runs.append(1) or full(*a))
    args = _good_args()
    nvfp4_gemm.grouped_mm_masked(**args)
    assert len(runs) == 1
    nvfp4_gemm.grouped_mm_masked(**args)
    other = torch.zeros_like(args["out"])
    nvfp4_gemm.grouped_mm_masked(**{**args, "out": other, "expected_m": 9})
    assert len(runs) == 1, "a call laid out as a checked one ran the checks again"
    with pytest.raises(ValueError, match="argument 'expected_m'"):
        nvfp4_gemm.grouped_mm_masked(**{**args, "expected_m": -1})
    want = nvfp4_gemm.grouped_mm_masked(**{**args, "out": None})  # the functional form: another signature
    assert len(runs) == 2
    assert torch.equal(args["out"], want) and torch.equal(other, want)


@pytest.mark.parametrize("change", ["out_restrided", "a_resized", "sfa_viewed_as_bytes", "masked_m_moved"])
def test_a_tensor_changed_in_place_after_a_checked_call_is_checked_again(change, monkeypatch):
    """The checks' cache is keyed on what the checks read, not on the tensor objects or
    their storage: a tensor whose strides or shape changed in place since a call that
    passed (the same Python object), another view of a passed tensor's storage, or one
    moved to another device, gets the checks' error naming it."""
    monkeypatch.setattr(moe, "_CHECKED", {})
    args = _good_args()
    nvfp4_gemm.grouped_mm_masked(**args)
    arg = change.split("_")[0] if not change.startswith("masked_m") else "masked_m"
    if change == "out_restrided":
        out = args["out"]
        g, m, n = out.shape
        out.as_strided_((g, m, n), (m * n, 1, m))  # the same storage, read column-major
    elif change == "a_resized":
        args["a"].resize_(args["a"].shape[0], args["a"].shape[1], args["a"].shape[2] + 1)  # K/2 129
    elif change == "sfa_viewed_as_bytes":
        args["sfa"] = args["sfa"].view(torch.uint8)
    else:
        args["masked_m"] = args["masked_m"].to("meta")
    with pytest.raises(ValueError, match=f"^grouped_mm_masked: argument '{arg}': "):
        nvfp4_gemm.grouped_mm_masked(**args)


def test_a_failed_check_is_never_remembered(monkeypatch):
    """A call that fails its checks leaves nothing in the cache: the same call fails again,
    with the same message."""
    monkeypatch.setattr(moe, "_CHECKED", {})
    args = {**_good_args(), "out": torch.zeros((3, 41, 48), dtype=torch.float16)}
    messages = []
    for _ in range(2):
        with pytest.raises(ValueError, match="argument 'out'") as info:
            nvfp4_gemm.grouped_mm_masked(**args)
        messages.append(str(info.value))
    assert messages[0] == messages[1] and not moe._CHECKED


def test_the_checks_cache_is_bounded(monkeypatch):
    """At most _CHECKED_MAX signatures are kept (the oldest goes first): a MoE layer that
    sees many shapes does not grow it without end."""
    monkeypatch.setattr(moe, "_CHECKED", {})
    monkeypatch.setattr(moe, "_CHECKED_MAX", 3)
    for groups in range(1, 6):
        a = torch.zeros((groups, 8, 32), dtype=torch.uint8)  # max_m 8, K 64
        b = torch.zeros((groups, 32, 32), dtype=torch.uint8)  # N 32
        sfa, sfb = (torch.empty_strided(moe.stacked_scale_shape(rows, 64, groups), moe.stacked_scale_strides(rows, 64),
                                        dtype=torch.float8_e4m3fn) for rows in (8, 32))
        moe.check_masked_args(a, sfa, b, sfb, torch.zeros(groups, dtype=torch.int32))
    assert len(moe._CHECKED) == 3
    assert sorted(key[2][0] for key in moe._CHECKED) == [3, 4, 5]


def test_symbolic_sizes_take_the_full_checks():
    """Under torch.compile with dynamic shapes the checks see symbolic sizes, which cannot
    key the cache: they run in full, and the compiled call computes the same result."""
    torch._dynamo.reset()
    x = make_inputs(3, 40, 48, 256, seed=6)
    counts = (5, 0, 40)

    @torch.compile(fullgraph=True, dynamic=True, backend="aot_eager")
    def functional(a, sfa, b, sfb, masked_m):
        return nvfp4_gemm.grouped_mm_masked(a, sfa, b, sfb, masked_m)

    got = functional(*x.args(), counts_tensor(counts, "cpu"))
    assert_result(got, expected_out(x, counts), counts, bitwise=True)
    torch._dynamo.reset()


def test_the_module_never_reads_a_tensor_back_on_the_host():
    """No .item(), .tolist(), .cpu(), .numpy() or int()/bool() of a tensor in nvfp4_gemm/moe.py:
    the CUDA path's host code reads shapes only."""
    tree = ast.parse((ROOT / "nvfp4_gemm" / "moe.py").read_text())
    calls = {node.func.attr for node in ast.walk(tree)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)}
    assert not calls & {"item", "tolist", "cpu", "numpy", "synchronize", "nonzero", "any", "all"}


NO_DEVICE_QUERY = """
import torch
def refuse(*args, **kwargs):
    raise AssertionError("a device query at import")
for name in ("is_available", "device_count", "get_device_capability", "get_device_properties",
             "get_device_name", "current_device", "init", "_lazy_init", "synchronize"):
    setattr(torch.cuda, name, refuse)
import nvfp4_gemm
assert callable(nvfp4_gemm.grouped_mm_masked)
assert torch.ops.nvfp4_gemm.grouped_mm_masked.default is not None
assert not torch.cuda.is_initialized()
print("imported")
"""


def test_importing_the_package_queries_no_device():
    proc = subprocess.run([sys.executable, "-c", NO_DEVICE_QUERY], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["imported"]


def test_a_second_import_of_the_package_reuses_the_registered_ops():
    """Reimporting the package (a test that clears sys.modules) finds the ops defined and
    does not define them again."""
    script = ("import sys\nimport nvfp4_gemm\nfor m in [m for m in sys.modules if m.startswith('nvfp4_gemm')]:\n"
              "    del sys.modules[m]\nimport nvfp4_gemm\nprint(callable(nvfp4_gemm.grouped_mm_masked))\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.split() == ["True"], proc.stderr[-3000:]


def test_the_submission_holds_none_of_the_op():
    text = (ROOT / "submission.py").read_text()
    assert "grouped_mm_masked" not in text and "nvfp4_gemm/moe.py" not in text


# ----------------------------------------------------------------------------------------
# GPU: the CUDA implementation
# ----------------------------------------------------------------------------------------
gpu = pytest.mark.gpu
N_GPU, K_GPU = 256, 512


def _gpu_inputs(seed: int, fp4=FP4) -> MoeInputs:
    return make_inputs(8, MAX_M, N_GPU, K_GPU, seed, "cuda", fp4)


def _write_in_place(dst: MoeInputs, src: MoeInputs) -> None:
    """dst's a, sfa (and their unblocked copy) take src's values, in place, through bytes."""
    for d, s in ((dst.a, src.a), (dst.sfa, src.sfa), (dst.sfa_rows, src.sfa_rows)):
        d.view(torch.uint8).copy_(s.view(torch.uint8))


@gpu
@requires_cuda
@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: p.id)
def test_gpu_matches_the_reference(pattern):
    x = _gpu_inputs(seed=21)
    masked_m = counts_tensor(pattern.counts, "cuda")
    got = nvfp4_gemm.grouped_mm_masked(*x.args(), masked_m)
    before = sentinel(8, MAX_M, N_GPU, "cuda")
    out = before.clone()
    assert nvfp4_gemm.grouped_mm_masked(*x.args(), masked_m, out) is out
    torch.cuda.synchronize()
    assert_result(got, expected_out(x, pattern.counts), pattern.counts)
    assert_result(out, expected_out(x, pattern.counts, before), pattern.counts, before)


@gpu
@requires_cuda
def test_gpu_decode_step_of_leaderboard_width_in_several_decode_batches():
    """A decode step at N = 4096, K = 7168 (8 groups of 1-8 tokens): two decode batches of 4
    groups."""
    x = make_inputs(8, 8, 4096, 7168, seed=22, device="cuda")
    counts = (1, 8, 3, 0, 5, 8, 2, 7)
    assert len(decode_batches([(8, 4096, 7168, 1)] * 8, range(8))) == 2
    got = nvfp4_gemm.grouped_mm_masked(*x.args(), counts_tensor(counts, "cuda"), expected_m=4)
    torch.cuda.synchronize()
    assert_result(got, expected_out(x, counts), counts)


@gpu
@requires_cuda
def test_cuda_graph_replays_new_token_counts_and_values():
    """One capture of both forms; per pattern, new counts written into the same masked_m,
    new values into a and sfa in place, out reset to other contents, then a replay: each
    result is the reference's for that pattern's inputs, rows above the counts untouched."""
    x = _gpu_inputs(seed=30)
    masked_m = counts_tensor((MAX_M,) * 8, "cuda")
    out = torch.zeros((8, MAX_M, N_GPU), dtype=torch.float16, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side queue, as torch.cuda.graphs asks
        for _ in range(2):
            nvfp4_gemm.grouped_mm_masked(*x.args(), masked_m, out)
            nvfp4_gemm.grouped_mm_masked(*x.args(), masked_m)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        nvfp4_gemm.grouped_mm_masked(*x.args(), masked_m, out, expected_m=32)
        fresh = nvfp4_gemm.grouped_mm_masked(*x.args(), masked_m, expected_m=32)
    for i, pattern in enumerate(PATTERNS):
        _write_in_place(x, _gpu_inputs(seed=31 + i))
        masked_m.copy_(counts_tensor(pattern.counts, "cuda"))
        before = sentinel(8, MAX_M, N_GPU, "cuda", seed=i)
        out.copy_(before)
        graph.replay()
        torch.cuda.synchronize()
        assert_result(out, expected_out(x, pattern.counts, before), pattern.counts, before)
        assert_result(fresh, expected_out(x, pattern.counts), pattern.counts)


@gpu
@requires_cuda
@pytest.mark.slow
def test_reduce_overhead_compile_replays_new_token_counts_and_values():
    """torch.compile(fullgraph=True, mode="reduce-overhead"): CUDA graphs recorded, none
    skipped, and per pattern the replay with new counts and values in place is the
    reference's result."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()

    @torch.compile(fullgraph=True, mode="reduce-overhead")
    def layer(a, sfa, b, sfb, masked_m):
        return nvfp4_gemm.grouped_mm_masked(a, sfa, b, sfb, masked_m, expected_m=32)

    x = _gpu_inputs(seed=40)
    masked_m = counts_tensor((MAX_M,) * 8, "cuda")
    for _ in range(3):  # warm-up, record, replay
        torch.compiler.cudagraph_mark_step_begin()
        layer(*x.args(), masked_m)
    for i, pattern in enumerate(PATTERNS):
        _write_in_place(x, _gpu_inputs(seed=41 + i))
        masked_m.copy_(counts_tensor(pattern.counts, "cuda"))
        torch.compiler.cudagraph_mark_step_begin()
        got = layer(*x.args(), masked_m).clone()
        torch.cuda.synchronize()
        assert_result(got, expected_out(x, pattern.counts), pattern.counts)
    assert counters["inductor"]["cudagraph_skips"] == 0, dict(counters["inductor"])
    assert counters["inductor"]["cudagraph_recorded_non_static_inputs"] > 0, dict(counters["inductor"])
    torch._dynamo.reset()


@gpu
@requires_cuda
def test_a_warm_call_never_synchronizes():
    """Under torch.cuda.set_sync_debug_mode("error") any host wait (a read back, a blocking
    copy, a synchronize) raises: a warm call of either form makes none."""
    x = _gpu_inputs(seed=50)
    masked_m = counts_tensor(PATTERNS[2].counts, "cuda")
    out = torch.zeros((8, MAX_M, N_GPU), dtype=torch.float16, device="cuda")
    nvfp4_gemm.grouped_mm_masked(*x.args(), masked_m, out)
    nvfp4_gemm.grouped_mm_masked(*x.args(), masked_m)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        nvfp4_gemm.grouped_mm_masked(*x.args(), masked_m, out, expected_m=8)
        fresh = nvfp4_gemm.grouped_mm_masked(*x.args(), masked_m, expected_m=8)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    assert_result(fresh, expected_out(x, PATTERNS[2].counts), PATTERNS[2].counts)


@gpu
@requires_cuda
def test_a_call_on_a_side_queue_runs_there():
    """On a side CUDA queue held busy by a spin kernel, then given new counts and values: the
    op's result is that of the new inputs, so its work was queued behind them on that
    queue, not on the default one."""
    x = _gpu_inputs(seed=60)
    new = _gpu_inputs(seed=61)
    pattern = PATTERNS[2]
    masked_m = counts_tensor((0,) * 8, "cuda")
    new_counts = counts_tensor(pattern.counts, "cuda")
    nvfp4_gemm.grouped_mm_masked(*x.args(), masked_m)  # warm
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # about 0.1 s at 2 GHz
        _write_in_place(x, new)
        masked_m.copy_(new_counts)
        got = nvfp4_gemm.grouped_mm_masked(*x.args(), masked_m)
    torch.cuda.synchronize()
    assert_result(got, expected_out(x, pattern.counts), pattern.counts)


# ----------------------------------------------------------------------------------------
# GPU: the Hopper kernel behind the op (sm90_masked.py)
# ----------------------------------------------------------------------------------------
def _runner():
    return moe._RUNNERS.get(torch.cuda.current_device())


@gpu
@requires_sm90
def test_the_hopper_kernel_takes_the_calls():
    """On an sm_90 GPU with the CuTe DSL, a call whose K is a multiple of 256 runs the
    masked kernels (the runner holds its buffers' entry, initialized), not the torch path;
    its result is the reference's, rows above the counts untouched."""
    x = make_inputs(3, 40, 384, 768, seed=70, device="cuda")
    counts = (40, 0, 17)
    before = sentinel(3, 40, 384, "cuda", seed=7)
    out = before.clone()
    nvfp4_gemm.grouped_mm_masked(*x.args(), counts_tensor(counts, "cuda"), out)
    torch.cuda.synchronize()
    runner = _runner()
    assert runner is not None and any(e.initialized and e.grid.groups == 3 for e in runner.entries.values())
    assert_result(out, expected_out(x, counts, before), counts, before)


@gpu
@requires_sm90
@pytest.mark.parametrize("fault", [None, "stray_write"], ids=["passes", "stray_write"])
def test_the_first_run_check_on_the_hopper_kernel(fault, monkeypatch):
    """NVFP4_GEMM_SELF_CHECK=1: the first run of a config is checked against the exact path
    (masked_runner.check_against_exact). It passes on the kernel's own result (the config
    is then marked checked and the next call is not checked again); with a fault injected
    after the real GEMM's launch (one element written into a row above masked_m, on the
    GPU, as a kernel whose predication were wrong would), the call still returns the exact
    result with rows above the counts untouched, one warning names the check, and the
    device's later calls take the torch path."""
    monkeypatch.setenv("NVFP4_GEMM_SELF_CHECK", "1")
    monkeypatch.setattr(moe, "_RUNNERS", {})
    monkeypatch.setattr(moe, "warn_once", lambda message: warnings.append(message))
    warnings: list = []
    x = make_inputs(3, 40, 384, 768, seed=72, device="cuda")
    counts = (40, 0, 17)
    masked_m = counts_tensor(counts, "cuda")
    before = sentinel(3, 40, 384, "cuda", seed=8)
    out = before.clone()
    runner = moe._kernel_runner(out.device)
    assert runner.check_first_run
    if fault is not None:
        bind = runner.bind

        def faulty_bind(kernels, shape, tables, queue):
            init, plan, gemm = bind(kernels, shape, tables, queue)

            def gemm_then_stray_write():
                gemm()
                out[2, 30, 5] = 1.0  # group 2 has 17 rows: row 30 is not the call's
            return init, plan, gemm_then_stray_write
        monkeypatch.setattr(runner, "bind", faulty_bind)
    nvfp4_gemm.grouped_mm_masked(*x.args(), masked_m, out)
    torch.cuda.synchronize()
    assert_result(out, expected_out(x, counts, before), counts, before)
    if fault is None:
        assert not warnings and len(runner.checked) == 1 and _runner() is runner
        again = before.clone()
        nvfp4_gemm.grouped_mm_masked(*x.args(), masked_m, again)  # checked already: no second check
        torch.cuda.synchronize()
        assert_result(again, expected_out(x, counts, before), counts, before)
    else:
        assert len(warnings) == 1 and "failed its first-run check" in warnings[0] and "group 2" in warnings[0]
        assert _runner() is None and not runner.checked


@gpu
@requires_sm90
def test_the_torch_path_still_serves_the_op_on_a_hopper_gpu(monkeypatch):
    """NVFP4_GEMM_PATH=torch: the op's torch path, exact, no kernel runner."""
    monkeypatch.setenv("NVFP4_GEMM_PATH", "torch")
    monkeypatch.setattr(moe, "_RUNNERS", {})
    x = _gpu_inputs(seed=71)
    counts = PATTERNS[4].counts
    got = nvfp4_gemm.grouped_mm_masked(*x.args(), counts_tensor(counts, "cuda"))
    torch.cuda.synchronize()
    assert _runner() is None
    assert_result(got, expected_out(x, counts), counts)


def _check_plan_tables(x, masked_m, out, expected_m, count_patterns):
    """Runs the entry's plan kernel alone for each pattern of counts and compares what it
    wrote with its Python mirror (masked_plan.masked_tables): the sizes rows, every CTA's
    ranges row, the units each CTA walks, and no unit row beside those. Returns the
    entry and how many patterns the mirror split."""
    from nvfp4_gemm.masked_plan import masked_tables, walked_units
    from nvfp4_gemm.schedule import UNIT_PARTIAL
    from nvfp4_gemm.sm90_masked import bind_masked, compile_masked_sm90

    nvfp4_gemm.grouped_mm_masked(*x.args(), masked_m, out, expected_m=expected_m)  # makes the entry
    p = moe.check_masked_args(*x.args(), masked_m, out)
    e = _runner().entry(*x.args(), masked_m, out, p, expected_m)
    _, plan, _ = bind_masked(compile_masked_sm90(e.config), e.grid, e.tables,
                             torch.cuda.current_stream().cuda_stream)
    split = 0
    for counts in count_patterns:
        masked_m.copy_(counts_tensor(counts, "cuda"))
        e.tables["units"].fill_(-9)
        plan()
        torch.cuda.synchronize()
        sizes, ranges, units = masked_tables(counts, e.grid)
        split += any(u[5] == UNIT_PARTIAL for u in units.values())
        got_units = e.tables["units"].cpu()
        got_ranges = [tuple(r) for r in e.tables["ranges"].cpu().tolist()]
        assert e.tables["sizes"].cpu().tolist() == [list(r) for r in sizes], counts
        assert got_ranges == ranges, counts
        walked = walked_units(got_ranges, {i: tuple(got_units[i].tolist()) for i in range(got_units.shape[0])}, e.grid)
        assert walked == walked_units(ranges, units, e.grid), counts
        written = {i for i in range(got_units.shape[0]) if got_units[i, 0] != -9}
        assert written == set(units), counts  # and no row beside the live tiles'
    return e, split


@gpu
@requires_sm90
@pytest.mark.parametrize("expected_m", [1, 32, None], ids=["hint1", "hint32", "no_hint"])
def test_the_plan_kernel_writes_its_mirrors_tables(expected_m):
    """The device plan (MaskedPlanKernel) against its Python mirror for every pattern,
    under the config each hint picks."""
    x = _gpu_inputs(seed=72)
    masked_m = counts_tensor(PATTERNS[0].counts, "cuda")
    out = torch.zeros((8, MAX_M, N_GPU), dtype=torch.float16, device="cuda")
    _check_plan_tables(x, masked_m, out, expected_m, [pattern.counts for pattern in PATTERNS])


PREFILL_COUNTS = [(64, 512, 300, 129, 511, 96, 200, 77), (512,) * 8, (0,) * 8, (0, 0, 0, 512, 0, 0, 0, 0),
                  (256,) * 8, (1, 2, 3, 4, 5, 6, 7, 8), *(tuple(random.Random(s).randint(64, 512) for _ in range(8))
                                                          for s in range(6))]


@gpu
@requires_sm90
@pytest.mark.slow
def test_a_split_plan_kernel_writes_its_mirrors_tables(monkeypatch):
    """Prefill-sized buffers (8 x 512 rows, N = 4096, K = 7168) under the split-K config
    the hint at the bound picks (the split plan switched on): the device's cuts, PARTIALs
    and FIXUPs are the mirror's for counts the plan splits and counts it does not."""
    monkeypatch.setenv("NVFP4_GEMM_MASKED_SPLIT", "1")
    monkeypatch.delitem(moe._RUNNERS, torch.cuda.current_device(), raising=False)  # a runner that reads it
    x = make_inputs(8, 512, 4096, 7168, seed=75, device="cuda")
    masked_m = counts_tensor(PREFILL_COUNTS[0], "cuda")
    out = torch.zeros((8, 512, 4096), dtype=torch.float16, device="cuda")
    e, split = _check_plan_tables(x, masked_m, out, 512, PREFILL_COUNTS)
    assert e.config.split_k, e.config
    assert 0 < split < len(PREFILL_COUNTS), split


@gpu
@requires_sm90
@pytest.mark.slow
@pytest.mark.parametrize("expected_m", [256, 512], ids=["whole_tiles", "split_k"])
def test_a_prefill_step_at_leaderboard_width(expected_m, monkeypatch):
    """8 groups of 64-512 tokens (max_m 512), N = 4096, K = 7168: the 128-row tile config,
    its narrow phases for the groups' last M tiles, exact against the reference; with the
    hint at the bound the split-K config, several steps in the same buffers (each FIXUP
    resets its flag for the next call), then a CUDA graph of the op replayed with new
    counts (the split plan switched on)."""
    monkeypatch.setenv("NVFP4_GEMM_MASKED_SPLIT", "1")
    monkeypatch.delitem(moe._RUNNERS, torch.cuda.current_device(), raising=False)  # a runner that reads it
    x = make_inputs(8, 512, 4096, 7168, seed=73, device="cuda")
    out = sentinel(8, 512, 4096, "cuda", seed=8)
    before = out.clone()
    masked_m = counts_tensor(PREFILL_COUNTS[0], "cuda")
    for counts in PREFILL_COUNTS[:1] if expected_m == 256 else PREFILL_COUNTS[:4] + PREFILL_COUNTS[6:8]:
        masked_m.copy_(counts_tensor(counts, "cuda"))
        nvfp4_gemm.grouped_mm_masked(*x.args(), masked_m, out, expected_m=expected_m)
        torch.cuda.synchronize()
        assert_result(out, expected_out(x, counts, before), counts, before)
        out.copy_(before)
    p = moe.check_masked_args(*x.args(), masked_m, out)
    assert _runner().entry(*x.args(), masked_m, out, p, expected_m).config.split_k == (expected_m == 512)
    if expected_m == 512:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            nvfp4_gemm.grouped_mm_masked(*x.args(), masked_m, out, expected_m=expected_m)
        for counts in PREFILL_COUNTS[8:]:
            masked_m.copy_(counts_tensor(counts, "cuda"))
            out.copy_(before)
            graph.replay()
            torch.cuda.synchronize()
            assert_result(out, expected_out(x, counts, before), counts, before)


_MEMCHECK = """
import torch, nvfp4_gemm, sys
sys.path.insert(0, "tests")
from test_moe_op import make_inputs, counts_tensor, expected_out, assert_result, PATTERNS, MAX_M, N_GPU
x = make_inputs(8, MAX_M, N_GPU, 512, seed=74, device="cuda")
for pattern in PATTERNS:
    counts = pattern.counts
    got = nvfp4_gemm.grouped_mm_masked(*x.args(), counts_tensor(counts, "cuda"))
    torch.cuda.synchronize()
    assert_result(got, expected_out(x, counts), counts)
from nvfp4_gemm import moe
assert moe._RUNNERS[torch.cuda.current_device()].entries
print("ran", len(PATTERNS), "patterns")
"""


@gpu
@requires_sm90
@pytest.mark.slow
def test_memcheck_finds_nothing_in_the_masked_kernels(tmp_path):
    """compute-sanitizer's memcheck over the op's kernel path for every pattern: no
    out-of-bounds or misaligned access in any kernel."""
    import shutil

    tool = shutil.which("compute-sanitizer") or next(
        (p for p in ("/usr/local/cuda/bin/compute-sanitizer",) if os.path.exists(p)), None)
    if tool is None:
        pytest.skip("compute-sanitizer is not installed")
    # API errors are not reported: the DSL's probes of driver features return some
    # (tools/watchdog_check.py's sanitized runs leave them out alike)
    run = subprocess.run([tool, "--tool", "memcheck", "--report-api-errors", "no", "--error-exitcode", "3",
                          sys.executable, "-c", _MEMCHECK],
                         cwd=ROOT, capture_output=True, text=True, timeout=900)
    text = run.stdout + run.stderr
    assert run.returncode == 0 and "ERROR SUMMARY: 0 errors" in text, text[-3000:]
    assert "ran 6 patterns" in text


# ----------------------------------------------------------------------------------------
# tools/moe_bench.py's CPU side
# ----------------------------------------------------------------------------------------
def _bench():
    sys.path.insert(0, str(ROOT / "tools"))
    import moe_bench

    return moe_bench


def test_the_bench_stacks_the_leaderboards_data_for_the_op():
    """build_case's stacked operands give, through the op, what custom_kernel gives on the
    per-group lists (here both take the exact path), and its fp16 copies are the decoded
    operands."""
    bench = _bench()
    case = bench.MoeCase("tiny", 5, 1, 40)
    counts, data, op_args, (a16, b16) = bench.build_case(torch, case, 64, 256, seed=3, device="cpu")
    assert len(counts) == 5 and all(1 <= m <= 40 for m in counts)
    got = nvfp4_gemm.grouped_mm_masked(*op_args)
    want = nvfp4_gemm.custom_kernel(data)
    for g, m in enumerate(counts):
        assert torch.equal(got[g, :m].view(torch.int16), want[g][:, :, 0].view(torch.int16)), g
    assert torch.equal(torch.bmm(a16.float(), b16.float().transpose(1, 2)).half()[0, :counts[0]], got[0, :counts[0]])


def test_the_bench_needs_a_gpu_and_says_so():
    help_text = subprocess.run([sys.executable, "tools/moe_bench.py", "--help"], cwd=ROOT, capture_output=True,
                               text=True, timeout=120)
    assert help_text.returncode == 0 and "Needs a CUDA GPU" in help_text.stdout
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the bench would run")
    proc = subprocess.run([sys.executable, "tools/moe_bench.py", "--cases", "decode8"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == "tools/moe_bench.py needs a CUDA GPU; torch sees none"


def test_the_bench_tables():
    bench = _bench()
    row = {"case": "decode8", "groups": 8, "tokens": 36, "notes": ["a note"], "flops": 2 * 36 * 4096 * 7168,
           "bytes_bound_us": 5.0, "op_path": "sm90 kernel", "op_config": "n256_m32",
           "gpu_us": {"op": 100.0, "graph": 90.0, "op torch path": 700.0, "leaderboard": 20.0,
                      "decode+cuBLAS": 300.0, "fp16 bmm": 50.0},
           "host_us": {"op": 400.0, "graph": 8.0, "leaderboard": 4.0, "decode+cuBLAS": 500.0, "fp16 bmm": 9.0}}
    text = bench.tables([row], "a GPU", "3,000 GB/s")
    assert "| decode8 | 8 | 36 | 100.0 | 90.0 | 700.0 | 20.0 | n/a | 300.0 | 50.0 | 5.0 | 5.00x | 20.00x | 4.00x |" in text
    assert "| decode8 | 400.0 | 8.0 | 4.0 |" in text and "- decode8: a note" in text
    assert "The op's path: decode8 sm90 kernel n256_m32" in text


# ----------------------------------------------------------------------------------------
# The entry point's direct call (eager, plain tensors) and its way through torch.ops
# ----------------------------------------------------------------------------------------
def test_the_entry_point_calls_the_implementation_directly_when_eager(monkeypatch):
    """Eager, on plain tensors: the implementation runs without the dispatcher, and `out`'s
    version counter moves as the op's declared mutation moves it; under a dispatch mode
    (fake tensors, profilers) the call goes through torch.ops."""
    from torch.utils._python_dispatch import TorchDispatchMode

    x = make_inputs(2, 8, 128, 64, seed=80)
    counts = (3, 8)
    masked_m = counts_tensor(counts, "cpu")
    out = torch.zeros((2, 8, 128), dtype=torch.float16)
    version = out._version
    seen = []

    class Seen(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    assert nvfp4_gemm.grouped_mm_masked(*x.args(), masked_m, out) is out
    assert out._version > version
    assert_result(out, expected_out(x, counts), counts)
    with Seen():
        nvfp4_gemm.grouped_mm_masked(*x.args(), masked_m, out)
    assert any("grouped_mm_masked_out" in name for name in seen), seen[:5]
    assert moe._direct_call_ok((*x.args(), masked_m, out))
    with torch.inference_mode():  # as a MoE layer serving requests runs it
        fresh = torch.zeros((2, 8, 128), dtype=torch.float16)
        assert nvfp4_gemm.grouped_mm_masked(*x.args(), masked_m, fresh) is fresh
    assert_result(fresh, expected_out(x, counts), counts)
    assert not moe._direct_call_ok((*x.args(), masked_m, out.requires_grad_(False), torch.zeros(1, requires_grad=True)))
