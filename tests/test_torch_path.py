"""The exact torch path against ref_kernel (CPU here; the same tests run on a GPU)."""

import pytest
import torch
from cases import ODD_CASES, task_cases

import reference
import submission
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
    got = submission.custom_kernel(_clone(data))
    return got, expected


@pytest.mark.parametrize("case", task_cases("tests") + ODD_CASES, ids=lambda c: c.id)
def test_torch_path_matches_reference(case):
    got, expected = _run_both(reference.generate_input(**case.args()))
    assert len(got) == len(expected)
    for g, (out, ref) in enumerate(zip(got, expected)):
        assert out.shape == ref.shape and out.dtype == torch.float16
        assert verbose_allclose(out, ref, rtol=1e-3, atol=1e-3) == [], f"group {g}"


def test_torch_path_writes_into_c():
    data = reference.generate_input(m=(33,), n=(128,), k=(256,), g=1, seed=5)
    c = data[0][0][2]
    c.fill_(float("nan"))
    out = submission.custom_kernel(data)
    assert out[0] is c and not torch.isnan(c).any()


def test_poisoned_scale_padding_changes_nothing_bitwise():
    """Blocked-scale padding (rows >= M, columns >= K/16) set to 0xFF (NaN in E4M3) must not
    reach the output."""
    data = reference.generate_input(m=(40,), n=(136,), k=(96,), g=1, seed=9)
    clean = submission.custom_kernel(_clone(data))[0].clone()
    poisoned = _clone(data)
    for sf_blocked, rows, k in ((poisoned[2][0][0], 40, 96), (poisoned[2][0][1], 136, 96)):
        raw = sf_blocked.permute(5, 2, 4, 0, 1, 3).view(torch.uint8).flatten()
        mask = torch.ones_like(raw, dtype=torch.bool)
        mask[reference.blocked_scale_offsets(rows, k // 16).flatten()] = False
        raw[mask] = 0xFF
    out = submission.custom_kernel(poisoned)[0]
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
    first = [c.clone() for c in submission.custom_kernel(_clone(data))]
    for _ in range(3):
        again = submission.custom_kernel(_clone(data))
        assert all(torch.equal(x.view(torch.int16), y.view(torch.int16)) for x, y in zip(first, again))


# ---- the fp16 fallback of CUDA devices without a kernel (run_torch_fp16); it runs on the
# CPU as well, where these tests hold it to the reference

def _fp16_path(data):
    return submission.run_torch_fp16(data, submission.validate_inputs(data))


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
    f16 = submission._dequantize_rows_f16(a[:, :, 0], sfa, k)
    f32 = submission._dequantize_rows(a[:, :, 0], sfa, k)
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
    monkeypatch.setattr(submission, "run_torch_fp16", lambda data, problem: calls.append("fp16"))
    monkeypatch.setattr(submission, "run_torch_exact", lambda data, problem: calls.append("exact"))
    data = reference.generate_input(m=(64,), n=(128,), k=(256,), g=1, seed=2)
    problem = submission.validate_inputs(data)
    submission.run_torch_fallback(data, problem)
    submission.run_torch_fallback(data, dataclasses.replace(problem, device=torch.device("cuda", 0)))
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
