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
