"""The exact torch path against ref_kernel (CPU here; the same tests run on a GPU)."""

import pytest
import torch
from cases import ODD_CASES, task_cases

import reference
from nvfp4_gemm import common, decoder, dispatch, formats, inputs, torch_paths
from utils import verbose_allclose


def _clone(data):
    abc, sf, sfr, sizes = data
    return (
        [tuple(t.clone() for t in g) for g in abc],
        [tuple(t.clone() for t in g) for g in sf],
        [tuple(t.clone() for t in g) for g in sfr],
        list(sizes),
    )


def _run_both(data):
    expected = reference.ref_kernel(_clone(data))
    got = dispatch.custom_kernel(_clone(data))
    return got, expected


@pytest.mark.parametrize("case", task_cases("tests") + ODD_CASES, ids=lambda c: c.id)
def test_torch_path_matches_reference(case):
    got, expected = _run_both(reference.generate_input(**case.args()))
    assert len(got) == len(expected)
    for g, (out, ref) in enumerate(zip(got, expected)):
        assert out.shape == ref.shape and out.dtype == torch.float16
        assert verbose_allclose(out, ref, rtol=1e-3, atol=1e-3) == [], f"group {g}"
        if out.device.type == "cpu":  # the exact path: the reference's own arithmetic, bit for bit
            assert torch.equal(out.view(torch.int16), ref.view(torch.int16)), f"group {g}"


def test_torch_path_writes_into_c():
    data = reference.generate_input(m=(33,), n=(128,), k=(256,), g=1, seed=5)
    c = data[0][0][2]
    c.fill_(float("nan"))
    out = dispatch.custom_kernel(data)
    assert out[0] is c and not torch.isnan(c).any()


def test_poisoned_scale_padding_changes_nothing_bitwise():
    """Blocked-scale padding (rows >= M, columns >= K/16) set to 0xFF (NaN in E4M3) must not
    reach the output."""
    data = reference.generate_input(m=(40,), n=(136,), k=(96,), g=1, seed=9)
    clean = dispatch.custom_kernel(_clone(data))[0].clone()
    poisoned = _clone(data)
    for sf_blocked, rows, k in ((poisoned[2][0][0], 40, 96), (poisoned[2][0][1], 136, 96)):
        raw = sf_blocked.permute(5, 2, 4, 0, 1, 3).view(torch.uint8).flatten()
        mask = torch.ones_like(raw, dtype=torch.bool)
        mask[reference.blocked_scale_offsets(rows, k // 16).flatten()] = False
        raw[mask] = 0xFF
    out = dispatch.custom_kernel(poisoned)[0]
    assert torch.equal(out.view(torch.int16), clean.view(torch.int16))


def test_nan_scale_propagates_like_reference():
    data = reference.generate_input(m=(64,), n=(128,), k=(256,), g=1, seed=3)
    nan = torch.tensor([float("nan")]).to(torch.float8_e4m3fn)
    data[1][0][0][5, 2, 0] = nan[0]  # CPU copy, read by the reference
    data[2][0][0][5 % 32, 0, 0, 2 % 4, 0, 0] = nan[0]  # blocked copy, read by the kernels
    got, expected = _run_both(data)
    assert torch.isnan(expected[0][5]).any()
    assert torch.equal(torch.isnan(got[0]), torch.isnan(expected[0]))
    assert verbose_allclose(got[0], expected[0], rtol=1e-3, atol=1e-3) == []


def test_overflow_gives_inf_like_reference():
    data = reference.generate_input(m=(8,), n=(128,), k=(2048,), g=1, seed=4)
    big = torch.tensor([448.0]).to(torch.float8_e4m3fn)
    data[1][0][0].fill_(big[0])
    data[1][0][1].fill_(big[0])
    data[2][0][0].fill_(big[0])
    data[2][0][1].fill_(big[0])
    data[0][0][0].view(torch.uint8).fill_(0x77)  # 6.0 everywhere
    data[0][0][1].view(torch.uint8).fill_(0x77)
    got, expected = _run_both(data)
    assert torch.isposinf(expected[0]).all()
    assert verbose_allclose(got[0], expected[0], rtol=1e-3, atol=1e-3) == []


def test_same_input_is_bitwise_deterministic():
    data = reference.generate_input(m=(72, 130), n=(256, 128), k=(512, 256), g=2, seed=11)
    first = [c.clone() for c in dispatch.custom_kernel(_clone(data))]
    for _ in range(3):
        again = dispatch.custom_kernel(_clone(data))
        assert all(torch.equal(x.view(torch.int16), y.view(torch.int16)) for x, y in zip(first, again))


# ---- the fp16 fallback of CUDA devices without a kernel (run_torch_fp16); it runs on the
# CPU as well, where these tests hold it to the reference

def _fp16_path(data):
    return torch_paths.run_torch_fp16(data, inputs.validate_inputs(data))


@pytest.mark.parametrize("case", task_cases("tests") + ODD_CASES, ids=lambda c: c.id)
def test_fp16_path_matches_reference(case):
    data = reference.generate_input(**case.args())
    expected = reference.ref_kernel(_clone(data))
    got = _fp16_path(_clone(data))
    for g, (out, ref) in enumerate(zip(got, expected)):
        assert out.shape == ref.shape and out.dtype == torch.float16
        assert verbose_allclose(out, ref, rtol=1e-3, atol=1e-3) == [], f"group {g}"


def test_fp16_decode_is_the_exact_decode_for_every_byte_and_scale():
    """Every packed byte and every finite E4M3 scale decodes to the same value in fp16 as in
    fp32 (the products are exact in both)."""
    rows, k = 256, 512
    data = reference.generate_input(m=(rows,), n=(128,), k=(k,), g=1, seed=21)
    a, sfa = data[0][0][0], data[2][0][0]
    a.view(torch.uint8).copy_(torch.arange(256, dtype=torch.uint8).repeat(rows * k // 2 // 256).view_as(a.view(torch.uint8)))
    finite = torch.arange(0x7F, dtype=torch.uint8)  # 0x7F is NaN
    sfa.view(torch.uint8).copy_(finite.repeat(sfa.numel() // 0x7F + 1)[:sfa.numel()].view_as(sfa.view(torch.uint8)))
    f16 = torch_paths._dequantize_rows_f16(a[:, :, 0], sfa, k)
    f32 = torch_paths._dequantize_rows(a[:, :, 0], sfa, k)
    assert f16.dtype == torch.float16 and torch.equal(f16.float(), f32)


def test_fp16_path_keeps_nan_inf_and_scale_padding_like_the_reference():
    data = reference.generate_input(m=(64,), n=(128,), k=(256,), g=1, seed=3)
    nan = torch.tensor([float("nan")]).to(torch.float8_e4m3fn)
    data[1][0][0][5, 2, 0] = nan[0]
    data[2][0][0][5 % 32, 0, 0, 2 % 4, 0, 0] = nan[0]
    expected = reference.ref_kernel(_clone(data))[0]
    got = _fp16_path(_clone(data))[0]
    assert torch.isnan(expected[5]).any() and torch.equal(torch.isnan(got), torch.isnan(expected))
    big = reference.generate_input(m=(8,), n=(128,), k=(2048,), g=1, seed=4)
    for t in (big[1][0][0], big[1][0][1], big[2][0][0], big[2][0][1]):
        t.fill_(torch.tensor([448.0]).to(torch.float8_e4m3fn)[0])
    big[0][0][0].view(torch.uint8).fill_(0x77)
    big[0][0][1].view(torch.uint8).fill_(0x77)
    assert torch.isposinf(_fp16_path(big)[0]).all()
    padded = reference.generate_input(m=(40,), n=(136,), k=(96,), g=1, seed=9)
    clean = _fp16_path(_clone(padded))[0].clone()
    for sf_blocked, rows, k in ((padded[2][0][0], 40, 96), (padded[2][0][1], 136, 96)):
        raw = sf_blocked.permute(5, 2, 4, 0, 1, 3).view(torch.uint8).flatten()
        mask = torch.ones_like(raw, dtype=torch.bool)
        mask[reference.blocked_scale_offsets(rows, k // 16).flatten()] = False
        raw[mask] = 0xFF
    assert torch.equal(_fp16_path(padded)[0].view(torch.int16), clean.view(torch.int16))


def test_fp16_path_leaves_the_reduction_flag_as_it_was(monkeypatch):
    matmul = torch.backends.cuda.matmul  # a module proxy that monkeypatch cannot patch
    saved, seen = matmul.allow_fp16_reduced_precision_reduction, []
    real_mm = torch.mm

    def mm(*args, **kwargs):
        seen.append(matmul.allow_fp16_reduced_precision_reduction)
        return real_mm(*args, **kwargs)

    monkeypatch.setattr(torch, "mm", mm)
    matmul.allow_fp16_reduced_precision_reduction = True
    try:
        _fp16_path(reference.generate_input(m=(64,), n=(128,), k=(256,), g=1, seed=2))
        assert seen == [False] and matmul.allow_fp16_reduced_precision_reduction is True
    finally:
        matmul.allow_fp16_reduced_precision_reduction = saved


def test_the_fallback_is_fp16_on_cuda_and_exact_elsewhere(monkeypatch):
    import dataclasses

    calls = []
    monkeypatch.setattr(torch_paths, "run_torch_fp16", lambda data, problem: calls.append("fp16"))
    monkeypatch.setattr(torch_paths, "run_torch_exact", lambda data, problem: calls.append("exact"))
    data = reference.generate_input(m=(64,), n=(128,), k=(256,), g=1, seed=2)
    problem = inputs.validate_inputs(data)
    torch_paths.run_torch_fallback(data, problem)
    torch_paths.run_torch_fallback(data, dataclasses.replace(problem, device=torch.device("cuda", 0)))
    assert calls == ["exact", "fp16"]


def test_fp16_path_takes_any_layout_the_exact_path_takes():
    """The fallback serves calls the kernels decline: operands with padded rows, an operand
    off 16 bytes, a non-contiguous c."""
    data = reference.generate_input(m=(64, 40), n=(128, 256), k=(256, 512), g=2, seed=13)
    a = data[0][0][0]
    wide = torch.zeros((64, 256, 1), dtype=torch.uint8)
    wide[:, :128] = a.view(torch.uint8)
    b = data[0][1][1]
    flat = torch.zeros(b.numel() + 16, dtype=torch.uint8)
    moved = flat[4:4 + b.numel()].view(b.dtype).view(b.shape)
    moved.view(torch.uint8).copy_(b.view(torch.uint8))
    c_wide = torch.zeros((40, 512, 1), dtype=torch.float16)
    data[0][0] = (wide[:, :128].view(torch.float4_e2m1fn_x2), data[0][0][1], data[0][0][2])
    data[0][1] = (data[0][1][0], moved, c_wide[:, :256])
    expected = reference.ref_kernel(_clone(data))
    got = _fp16_path(data)
    assert got[1] is data[0][1][2] and not got[1].is_contiguous()
    for g, (out, ref) in enumerate(zip(got, expected)):
        assert verbose_allclose(out, ref, rtol=1e-3, atol=1e-3) == [], f"group {g}"


# ---- Fp4RowDecoder, the fp16 fallback's decode kernel on CUDA: its host side here (its
# compile in tests/test_sm90_compile.py, its results on a GPU in tests/test_gpu.py)

def _raw_bytes(t):
    """The bytes of t's storage from its first element on, as a flat uint8 tensor (what a
    kernel addresses from data_ptr())."""
    raw = t.view(torch.uint8)
    return raw.as_strided((raw.untyped_storage().nbytes() - raw.storage_offset(),), (1,), raw.storage_offset())


@pytest.mark.parametrize("rows, k", [(1, 256), (7, 512), (129, 1024), (300, 768), (64, 7168)])
def test_decode_scale_offset_addresses_the_blocked_scales(rows, k):
    data = reference.generate_input(m=(rows,), n=(128,), k=(k,), g=1, seed=rows)
    sfa = data[2][0][0]
    flat = _raw_bytes(sfa)
    r = torch.arange(rows).repeat_interleave(k // 16)
    j = torch.arange(k // 16).repeat(rows)
    offsets = decoder.decode_scale_offset(r, j, common.ceil_div(k, 64))
    want = formats._blocked_scales(sfa, rows, k).to(torch.float8_e4m3fn).view(torch.uint8).reshape(-1)
    assert torch.equal(flat[offsets], want)


def test_e4m3_pair_table_is_each_scale_twice_in_fp16():
    table = formats._e4m3_pair_table(torch.device("cpu"))
    halves = table.view(torch.int16).view(torch.float16).view(256, 2)
    scales = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn).to(torch.float16)
    assert torch.equal(halves[:, 0].view(torch.int16), halves[:, 1].view(torch.int16))
    finite = ~torch.isnan(scales)
    assert finite.sum() == 254 and torch.isnan(halves[~finite, 0]).all()
    assert torch.equal(halves[finite, 0], scales[finite])


def _emulate_decoder(job, packed, sf, table_pairs, table_scales):
    """Fp4RowDecoder's arithmetic for one job, in torch on the CPU: thread t reads the 8
    bytes at t * 8 and the scale byte at decode_scale_offset, multiplies each byte's f16x2
    by the scale's f16x2 and writes 32 bytes at t * 32."""
    _, _, _, blocks, kblocks, rest_k = job
    t = torch.arange(blocks)
    r, j = t // kblocks, t % kblocks
    scale = _raw_bytes(sf)[decoder.decode_scale_offset(r, j, rest_k)].long()
    s2 = table_scales[scale].view(torch.float16).view(blocks, 1, 2)
    pairs = table_pairs[_raw_bytes(packed)[: blocks * 8].long()].view(torch.float16).view(blocks, 8, 2)
    return (pairs * s2).reshape(-1)


def test_decode_jobs_and_the_decoders_arithmetic_give_the_torch_decode():
    """decode_jobs' fields, with the kernel's indexing and tables (emulated), reproduce
    _dequantize_rows_f16 bit for bit, NaN scales included."""
    data = reference.generate_input(m=(40, 129), n=(256, 384), k=(512, 1024), g=2, seed=4)
    nan = torch.tensor([float("nan")]).to(torch.float8_e4m3fn)
    data[2][1][1][7, 1, 0, 3, 2, 0] = nan[0]  # row 39, scale column 11 of group 1's b
    problem = inputs.validate_inputs(data)
    jobs, outputs = torch_paths.decode_jobs(data, problem, [0, 1])
    pairs = formats._e2m1_pair_table(torch.device("cpu"))
    scales = formats._e4m3_pair_table(torch.device("cpu"))
    assert len(jobs) == 4 and set(outputs) == {0, 1}
    for i, job in enumerate(jobs):
        g, side = divmod(i, 2)
        (m, n, k, _), packed, sf = problem.sizes[g], data[0][g][side], data[2][g][side]
        rows = (m, n)[side]
        out = outputs[g][side]
        assert job == (packed.data_ptr(), sf.data_ptr(), out.data_ptr(), rows * k // 16, k // 16, k // 64)
        assert out.shape == (rows, k) and out.dtype == torch.float16
        got = _emulate_decoder(job, packed, sf, pairs, scales).view(rows, k)
        want = torch_paths._dequantize_rows_f16(packed[:, :, 0], sf, k)
        assert torch.equal(torch.isnan(got), torch.isnan(want))
        assert torch.equal(got.nan_to_num().view(torch.int16), want.nan_to_num().view(torch.int16))
    assert torch.isnan(_emulate_decoder(jobs[3], data[0][1][1], data[2][1][1], pairs, scales).view(384, 1024)[39, 176:192]).all()


def test_decode_batches_bound_the_decoded_bytes():
    sizes = [(64, 4096, 7168, 1)] * 3 + [(0, 128, 256, 1), (1, 128, 256, 1)]
    per_group = (64 + 4096) * 7168 * 2  # 59.6 MB
    assert torch_paths.decode_batches(sizes, [0, 1, 2, 4]) == [[0, 1, 2, 4]]
    assert torch_paths.decode_batches(sizes, [0, 1, 2, 4], limit=2 * per_group) == [[0, 1], [2, 4]]
    assert torch_paths.decode_batches(sizes, [0, 1, 2], limit=per_group - 1) == [[0], [1], [2]]
    assert torch_paths.decode_batches(sizes, []) == []


def test_fp16_path_on_the_cpu_never_asks_for_the_decoder(monkeypatch):
    monkeypatch.setattr(torch_paths, "fp4_decoder", lambda device: pytest.fail("decoder asked for on the CPU"))
    data = reference.generate_input(m=(64,), n=(128,), k=(256,), g=1, seed=2)
    _fp16_path(data)


E2M1_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def _cublas_blocked_scale(flat: torch.Tensor, rows: int, k: int) -> torch.Tensor:
    """What cuBLAS's block-scaled FP4 GEMM reads as the scale of (row, 16-value block) from a
    flat scale operand in its blocked layout (NVIDIA's cuBLAS docs, "1D Block Scaling Factors
    Layout"): 512-byte atoms of 128 rows x 4 blocks, atom (i, j) at (i * ceil(K/64) + j) *
    512, row r and block c of an atom at (r % 32) * 16 + (r % 128 // 32) * 4 + c."""
    rest_k = -(-k // 64)
    r = torch.arange(rows)[:, None]
    kb = torch.arange(k // 16)[None, :]
    offset = ((r // 128) * rest_k + kb // 4) * 512 + (r % 32) * 16 + (r % 128 // 32) * 4 + kb % 4
    return flat.view(torch.uint8)[offset].view(torch.float8_e4m3fn).float()


def _cublas_fp4_gemm(mat1, mat2, scale_a, scale_b) -> torch.Tensor:
    """An exact emulation of torch._scaled_mm's FP4 GEMM on cuBLAS, from its arguments as
    cuBLAS reads them: mat1 [M, K/2] row-major and mat2 [K/2, N] column-major, two E2M1
    values per byte, the lower K in the low nibble; one E4M3 scale per 16 K values in the
    blocked layout; products summed exactly (float64), rounded once to fp16."""
    lut = torch.tensor(E2M1_VALUES, dtype=torch.float64)
    assert mat1.dtype == mat2.dtype == torch.float4_e2m1fn_x2
    assert mat1.stride(1) == 1 and mat2.stride(0) == 1, "mat1 must be row-major and mat2 column-major"
    m, k = mat1.shape[0], 2 * mat1.shape[1]
    n = mat2.shape[1]
    assert scale_a.dim() == scale_b.dim() == 1

    def decode(packed):  # [rows, K/2] bytes -> [rows, K] values
        u = packed.view(torch.uint8).long()
        return torch.stack((lut[u & 15], lut[u >> 4]), -1).flatten(-2)

    a = decode(mat1) * _cublas_blocked_scale(scale_a, m, k).double().repeat_interleave(16, 1)
    b = decode(mat2.t()) * _cublas_blocked_scale(scale_b, n, k).double().repeat_interleave(16, 1)
    return (a @ b.t()).to(torch.float16)


@pytest.mark.parametrize("m, n, k", [(96, 128, 256), (129, 384, 512), (1, 200, 1536), (300, 136, 768)])
def test_scaled_mm_arguments_compute_the_task_as_cublas_reads_them(m, n, k):
    """run_scaled_mm's operands (scaled_mm_args), read the way cuBLAS's block-scaled FP4 GEMM
    reads them, give the task's result: row and column order, nibble order, and every scale
    at its place in the blocked layout (a wrong permute scatters them), at sizes with partial
    scale atoms along M, N and K."""
    data = reference.generate_input(m=(m,), n=(n,), k=(k,), g=1, seed=m + n + k)
    (a, b, c), (sfa, sfb) = data[0][0], data[2][0]
    args = dispatch.scaled_mm_args(a, b, sfa, sfb)
    assert args[2].numel() == -(-m // 128) * 128 * -(-k // 64) * 4  # whole atoms
    assert args[3].numel() == -(-n // 128) * 128 * -(-k // 64) * 4
    got = _cublas_fp4_gemm(*args)
    want = reference.ref_kernel(([(a, b, c.clone())], data[1], data[2], data[3]))[0][:, :, 0]
    assert torch.allclose(got.float(), want.float(), rtol=1e-3, atol=1e-3)
    # the emulation is sharp: scales of a permute that swaps the 32- and 4-row axes differ
    wrong = sfa.permute(5, 2, 4, 1, 0, 3).reshape(-1)
    if m > 32:
        assert not torch.allclose(_cublas_fp4_gemm(args[0], args[1], wrong, args[3]).float(), want.float(),
                                  rtol=1e-3, atol=1e-3)
