"""The reference: E2M1 / E4M3 decode, the blocked scale layout, input generation."""

import math

import pytest
import torch

import reference
import submission

E2M1_SPEC = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def _e4m3_by_formula(code: int) -> float:
    sign = -1.0 if code & 0x80 else 1.0
    exponent, mantissa = (code >> 3) & 0xF, code & 0x7
    if exponent == 0xF and mantissa == 0x7:
        return math.nan
    if exponent == 0:
        return sign * mantissa / 8 * 2.0**-6
    return sign * (1 + mantissa / 8) * 2.0 ** (exponent - 7)


def test_e2m1_all_16_codes_both_decoders():
    expected = torch.tensor(E2M1_SPEC + [-v for v in E2M1_SPEC])
    # Low nibble first: byte (hi << 4 | lo) decodes to [lo, hi].
    codes = torch.arange(16, dtype=torch.uint8)
    packed = (codes | (codes << 4)).view(16, 1)
    ref = reference.decode_e2m1(packed)
    assert torch.equal(ref[:, 0], expected) and torch.equal(ref[:, 1], expected)
    assert torch.equal(torch.signbit(ref[:, 0]), torch.signbit(expected))
    table = submission._e2m1_table(torch.device("cpu"))
    assert torch.equal(table, expected)
    assert torch.equal(torch.signbit(table), torch.signbit(expected))


def test_e2m1_nibble_order():
    packed = torch.tensor([[0x72]], dtype=torch.uint8)  # low nibble 2 (1.0), high 7 (6.0)
    assert reference.decode_e2m1(packed).tolist() == [[1.0, 6.0]]


def test_e4m3_all_256_codes():
    codes = torch.arange(256, dtype=torch.uint8)
    decoded = reference.decode_e4m3(codes.view(torch.float8_e4m3fn))
    for code in range(256):
        want = _e4m3_by_formula(code)
        got = decoded[code].item()
        assert (math.isnan(want) and math.isnan(got)) or got == want, hex(code)


@pytest.mark.parametrize("rows,sf_cols", [(1, 4), (96, 16), (128, 32), (200, 6), (384, 448)])
def test_blocked_layout_matches_byte_offset_formula(rows, sf_cols):
    k = sf_cols * 16
    sf = torch.randint(1, 100, (rows, sf_cols, 1), dtype=torch.uint8).view(torch.float8_e4m3fn)
    blocked = reference.create_reordered_scale_factor_tensor(1, rows, k, sf, device="cpu")
    rest_m, rest_k = -(-rows // 128), -(-sf_cols // 4)
    assert blocked.shape == (32, 4, rest_m, 4, rest_k, 1)
    # The storage is one (L, rest_m, rest_k, 32, 4, 4) allocation in that order.
    storage = blocked.permute(5, 2, 4, 0, 1, 3)
    assert storage.is_contiguous() and storage.data_ptr() == blocked.data_ptr()
    raw = storage.view(torch.uint8).flatten()
    for r in {0, rows // 2, rows - 1}:
        for j in {0, sf_cols // 2, sf_cols - 1}:
            offset = (r // 128 * rest_k + j // 4) * 512 + (r % 32) * 16 + (r % 128) // 32 * 4 + j % 4
            assert raw[offset] == sf[r, j, 0].view(torch.uint8)
    # to_blocked (the cuBLAS layout) places the same bytes at the same offsets.
    flat = reference.to_blocked(sf[:, :, 0]).view(torch.uint8)
    offsets = reference.blocked_scale_offsets(rows, sf_cols).flatten()
    assert torch.equal(flat[offsets], sf[:, :, 0].reshape(-1).view(torch.uint8))
    assert torch.equal(raw[offsets], flat[offsets])


def test_blocked_padding_holds_ones_and_twos():
    sf = torch.full((40, 8, 1), 2.0).to(torch.float8_e4m3fn)
    torch.manual_seed(0)
    blocked = reference.create_reordered_scale_factor_tensor(1, 40, 128, sf, device="cpu")
    values = set(blocked.float().flatten().tolist())
    assert values <= {1.0, 2.0} and 1.0 in values  # padding rows 40..127 are random 1s and 2s


def test_generate_input_deterministic_and_shaped():
    args = dict(m=(96, 7), n=(128, 256), k=(256, 512), g=2, seed=1234)
    d1, d2 = reference.generate_input(**args), reference.generate_input(**args)
    d3 = reference.generate_input(**{**args, "seed": 1235})
    def raw(d):
        return [t.contiguous().flatten().view(torch.uint8) for p in d[:3] for grp in p for t in grp]

    assert all(torch.equal(x, y) for x, y in zip(raw(d1), raw(d2)))
    assert not all(torch.equal(x, y) for x, y in zip(raw(d1), raw(d3)))
    assert d1[3] == [(96, 128, 256, 1), (7, 256, 512, 1)]
    (a, b, c), (sfa, sfb), (sfa_r, _) = d1[0][1], d1[1][1], d1[2][1]
    assert a.shape == (7, 256, 1) and a.dtype == torch.float4_e2m1fn_x2 and a.stride()[:2] == (256, 1)
    assert b.shape == (256, 256, 1) and c.shape == (7, 256, 1) and c.dtype == torch.float16
    assert c.stride() == (256, 1, 7 * 256)
    assert sfa.shape == (7, 32, 1) and sfa.dtype == torch.float8_e4m3fn and sfa.device.type == "cpu"
    assert sfa_r.shape == (32, 4, 1, 4, 8, 1)
    # FP4 bytes are masked to sign + 2 low bits per nibble: values in {0, +-0.5, +-1, +-1.5}.
    assert (a.view(torch.uint8) & 0b0100_0100).sum() == 0
    assert set(sfb.float().flatten().tolist()) <= {1.0, 2.0}


def test_ref_kernel_small_case_by_hand():
    """One 1x1 output over K=32 worked out by hand."""
    a = torch.full((1, 16, 1), 0x22, dtype=torch.uint8)  # all 1.0
    b = torch.full((1, 16, 1), 0x44, dtype=torch.uint8)  # all 2.0
    sfa = torch.tensor([[[2.0], [0.5]]]).to(torch.float8_e4m3fn)  # (1, 2, 1)
    sfb = torch.tensor([[[1.0], [4.0]]]).to(torch.float8_e4m3fn)
    c = torch.zeros(1, 1, 1, dtype=torch.float16)
    out = reference.ref_kernel(([(a, b, c)], [(sfa, sfb)], [None], [(1, 1, 32, 1)]))
    # 16 * (1*2 * 2*1) + 16 * (1*0.5 * 2*4) = 64 + 64
    assert out[0].item() == 128.0
