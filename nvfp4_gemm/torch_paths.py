"""The torch paths: the exact fp32 path (any device; the self-check's reference) and the fp16
path of CUDA GPUs without one of our kernels (decode, then cuBLAS fp16 with fp32 sums), and
the self-check's comparison at the leaderboard's tolerance."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .common import SF_VEC_SIZE, ceil_div
from .decoder import fp4_decoder, launch_decoder
from .formats import _blocked_scales, _e2m1_pair_table, _e2m1_table
from .inputs import GroupedProblem


def _dequantize_rows(packed: torch.Tensor, sf_blocked: torch.Tensor, k: int) -> torch.Tensor:
    """(rows, K/2) packed E2M1 and its blocked scales -> (rows, K) float32, exact."""
    rows = packed.shape[0]
    u8 = packed.view(torch.uint8).to(torch.int64)
    codes = torch.stack((u8 & 0xF, u8 >> 4), dim=-1).reshape(rows, k)
    values = _e2m1_table(packed.device)[codes]
    scales = _blocked_scales(sf_blocked, rows, k)
    return (values.view(rows, k // SF_VEC_SIZE, SF_VEC_SIZE) * scales.unsqueeze(-1)).view(rows, k)


def run_torch_exact(data, problem: GroupedProblem, out: Sequence[torch.Tensor] | None = None) -> list[torch.Tensor]:
    """Reference-grade path for any device: one group's dequantized operands at a time,
    fp32 products and sums (TF32 off), one rounding to fp16, written into c (or into
    `out`, tensors shaped like the c's, which are then left alone)."""
    abc_tensors, _, sf_reordered, _ = data
    outs = [abc[2] for abc in abc_tensors] if out is None else list(out)
    saved_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for (a, b, _), (sfa, sfb), (m, n, k, _), c in zip(abc_tensors, sf_reordered, problem.sizes, outs):
            if m == 0 or n == 0:
                continue
            a_f32 = _dequantize_rows(a[:, :, 0], sfa, k)
            b_f32 = _dequantize_rows(b[:, :, 0], sfb, k)
            c[:, :, 0] = torch.mm(a_f32, b_f32.T).to(torch.float16)
            del a_f32, b_f32
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved_tf32
    return outs


def _dequantize_rows_f16(packed: torch.Tensor, sf_blocked: torch.Tensor, k: int) -> torch.Tensor:
    """(rows, K/2) packed E2M1 and its blocked scales -> (rows, K) float16, exact: a product
    of an E2M1 value and an E4M3 scale has at most 6 significant bits and lies within
    2^-10 .. 2688, inside fp16's normal range. One gather per packed byte (two values) and
    one multiply per value."""
    rows = packed.shape[0]
    pairs = _e2m1_pair_table(packed.device)[packed.view(torch.uint8).reshape(-1).to(torch.int32)]
    values = pairs.view(torch.float16).view(rows, k // SF_VEC_SIZE, SF_VEC_SIZE)
    scales = _blocked_scales(sf_blocked, rows, k, torch.float16)
    return (values * scales.unsqueeze(-1)).view(rows, k)


DECODE_BATCH_BYTES = 256 << 20  # fp16 bytes Fp4RowDecoder fills per launch (decode_batches)


def decode_batches(sizes: Sequence[Sequence[int]], groups: Sequence[int],
                   limit: int | None = None) -> list[list[int]]:
    """`groups` in order, cut into runs whose fp16 operands ((M + N) x K x 2 bytes) stay
    within `limit` (DECODE_BATCH_BYTES by default; a group larger than that runs alone):
    what one decode launch fills before its GEMMs run and free it."""
    limit = DECODE_BATCH_BYTES if limit is None else limit
    batches: list[list[int]] = []
    used = limit + 1
    for g in groups:
        m, n, k, _ = sizes[g]
        need = (m + n) * k * 2
        if used + need > limit:
            batches.append([])
            used = 0
        batches[-1].append(g)
        used += need
    return batches


def decode_jobs(data, problem: GroupedProblem, groups: Sequence[int]):
    """(Fp4RowDecoder's job rows, {group: (a16, b16)}): each operand of `groups` with the
    fp16 tensor it is decoded into."""
    abc_tensors, _, sf_reordered, _ = data
    jobs, outputs = [], {}
    for g in groups:
        m, n, k, _ = problem.sizes[g]
        (a, b, _), (sfa, sfb) = abc_tensors[g], sf_reordered[g]
        a16 = torch.empty((m, k), dtype=torch.float16, device=problem.device)
        b16 = torch.empty((n, k), dtype=torch.float16, device=problem.device)
        for packed, sf, out, rows in ((a, sfa, a16, m), (b, sfb, b16, n)):
            jobs.append((packed.data_ptr(), sf.data_ptr(), out.data_ptr(), rows * (k // SF_VEC_SIZE),
                         k // SF_VEC_SIZE, ceil_div(k, 64)))
        outputs[g] = (a16, b16)
    return jobs, outputs


def run_torch_fp16(data, problem: GroupedProblem, decode_kernel: bool = True) -> list[torch.Tensor]:
    """The fallback on a CUDA device without one of our kernels: each group's operands
    decoded to fp16 (exact), then cuBLAS fp16 GEMM with fp32 accumulation and one rounding
    to fp16, as the reference rounds. Only the order of the fp32 sums differs from
    run_torch_exact; fp16 partial sums are kept out (allow_fp16_reduced_precision_reduction
    off), since a split-K reduction in fp16 would round each partial. Written into each
    group's c.

    The decode is one Fp4RowDecoder launch per batch of groups (decode_batches) where the
    inputs have the kernels' layout and the CuTe DSL compiles for this GPU; else, or with
    decode_kernel=False, torch ops per group (_dequantize_rows_f16). Both give the same
    bits."""
    abc_tensors, _, sf_reordered, _ = data
    groups = [g for g, (m, n, _, _) in enumerate(problem.sizes) if m and n]
    decoder = None
    if decode_kernel and problem.kernel_layout and problem.device.type == "cuda":
        decoder = fp4_decoder(problem.device)
    matmul = torch.backends.cuda.matmul
    saved = matmul.allow_fp16_reduced_precision_reduction
    matmul.allow_fp16_reduced_precision_reduction = False
    try:
        for batch in decode_batches(problem.sizes, groups):
            decoded = None
            if decoder is not None:
                jobs, decoded = decode_jobs(data, problem, batch)
                launch_decoder(decoder, jobs, problem.device)
            for g in batch:
                (a, b, c), (sfa, sfb), k = abc_tensors[g], sf_reordered[g], problem.sizes[g][2]
                if decoded is None:
                    a16 = _dequantize_rows_f16(a[:, :, 0], sfa, k)
                    b16 = _dequantize_rows_f16(b[:, :, 0], sfb, k)
                else:
                    a16, b16 = decoded.pop(g)
                if c.is_contiguous():
                    torch.mm(a16, b16.T, out=c[:, :, 0])
                else:
                    c[:, :, 0] = a16 @ b16.T
                del a16, b16
    finally:
        matmul.allow_fp16_reduced_precision_reduction = saved
    return [abc[2] for abc in abc_tensors]


def run_torch_fallback(data, problem: GroupedProblem) -> list[torch.Tensor]:
    """The torch path a call falls back to: fp16 GEMMs on CUDA (run_torch_fp16), where fp32
    ones without TF32 run at a small fraction of the tensor cores' rate; the fp32 path
    elsewhere (run_torch_exact, which is also the self-check's reference)."""
    if problem.device is not None and problem.device.type == "cuda":
        return run_torch_fp16(data, problem)
    return run_torch_exact(data, problem)


# The leaderboard's tolerance (reference.check_implementation), used by the self-check
SELF_CHECK_RTOL = 1e-3
SELF_CHECK_ATOL = 1e-3


def first_mismatch(outputs: Sequence[torch.Tensor], expected: Sequence[torch.Tensor]) -> str | None:
    """None when every output is within the leaderboard's tolerance of the expected one
    (and has NaN / inf exactly where it does), else what is wrong, naming the group."""
    for g, (got, want) in enumerate(zip(outputs, expected)):
        if got.numel() == 0:
            continue
        got32, want32 = got.float(), want.float()
        bad = ~torch.isclose(got32, want32, rtol=SELF_CHECK_RTOL, atol=SELF_CHECK_ATOL, equal_nan=True)
        count = int(bad.sum())
        if count:
            idx = tuple(int(i) for i in bad.nonzero()[0])
            return (f"group {g}: {count} of {got.numel()} elements of c off by more than "
                    f"rtol = atol = {SELF_CHECK_RTOL:g} (first at {idx}: {float(got32[idx])} "
                    f"against {float(want32[idx])})")
    return None
