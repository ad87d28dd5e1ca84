"""CPU checks of the Hopper kernel's host-side math: the FP4 decode's bit arithmetic (as the
kernel's inline PTX does it), the K permutation it implies, configs and legality."""

import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import submission as S  # noqa: E402

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def e4m3_bytes_to_f16(b: torch.Tensor) -> torch.Tensor:
    """cvt.rn.f16x2.e4m3x2, per byte (exact: every E4M3 value is an fp16 value)."""
    return b.to(torch.uint8).view(torch.float8_e4m3fn).to(torch.float16)


def decode_word(w: torch.Tensor, scale_x64: torch.Tensor) -> torch.Tensor:
    """decode_e2m1_word's arithmetic on int64 tensors of 32-bit words: returns (..., 4, 2)
    fp16, outputs t = 0..3 holding nibbles (0, 2), (4, 6), (1, 3), (5, 7)."""
    m32 = 0xFFFFFFFF
    even = (((w << 2) & 0x1C1C1C1C) | ((w << 4) & 0x80808080)) & m32
    odd = (((w >> 2) & 0x1C1C1C1C) | (w & 0x80808080)) & m32
    halves = []
    for e in (even, odd):
        byte = torch.stack([(e >> (8 * j)) & 0xFF for j in range(4)], -1)
        halves.append(e4m3_bytes_to_f16(byte))
    # cvt of the low / high 16 bits -> (byte0, byte1), (byte2, byte3)
    out = torch.stack([halves[0][..., 0:2], halves[0][..., 2:4], halves[1][..., 0:2], halves[1][..., 2:4]], -2)
    return out * scale_x64[..., None, None]  # mul.rn.f16x2 by (64 s, 64 s)


def test_decode_is_exact_for_every_code_pair_and_scale():
    # every byte (two E2M1 codes) in every byte position, against every finite E4M3 scale
    scales = e4m3_bytes_to_f16(torch.arange(256)).float()
    scales = scales[torch.isfinite(scales) & (scales > 0)]
    lut = torch.tensor(E2M1, dtype=torch.float64)
    b = torch.arange(256, dtype=torch.int64)
    for pos in range(4):
        w = (b << (8 * pos))[:, None].expand(256, len(scales))
        x64 = (scales * 64).to(torch.float16)
        assert torch.equal(x64.float(), scales * 64)  # 64 * 448 fits fp16 exactly
        got = decode_word(w, x64[None, :].expand(256, -1)).double()  # (256, S, 4, 2)
        for t, pair in enumerate(((0, 2), (4, 6), (1, 3), (5, 7))):
            for e, nib in enumerate(pair):
                code = (w >> (4 * nib)) & 0xF
                want = lut[code] * scales.double()[None, :]
                assert torch.equal(got[..., t, e], want), (pos, t, e)


def test_k_permutation_is_a_bijection_and_matches_the_token_slots():
    logical = sorted(S.sm90_logical_k(q, i, e) for q in range(4) for i in range(16) for e in range(2))
    physical = sorted(S.sm90_physical_k(q, i, e) for q in range(4) for i in range(16) for e in range(2))
    assert logical == physical == list(range(S.SM90_PACKED_K_TILE))
    for q in range(4):
        for i in range(16):
            half, chunk = S.sm90_token_slot(i)
            for e in range(2):
                c = S.sm90_logical_k(q, i, e)
                assert (c // S.SM90_DECODE_K, (c % S.SM90_DECODE_K) // 8, c % 8) == (half, chunk, 2 * q + e)
    # each chunk's 16-element scale blocks: words 0-1 and 2-3 of chunk q are K blocks 2q, 2q+1
    for q in range(4):
        for i in range(16):
            assert S.sm90_physical_k(q, i, 0) // 16 == 2 * q + (i // 8)


def test_permuted_dot_product_equals_the_plain_one():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(128, generator=g, dtype=torch.float64), torch.randn(128, generator=g, dtype=torch.float64)
    perm = [S.sm90_physical_k(q, i, e) for q in range(4) for i in range(16) for e in range(2)]
    order = sorted(range(128), key=lambda j: S.sm90_logical_k(j // 32, (j % 32) // 2, j % 2))
    pa, pb = a[[perm[j] for j in order]], b[[perm[j] for j in order]]
    assert torch.allclose((pa * pb).sum(), (a * b).sum(), rtol=0, atol=1e-12)


def test_sw64_spreads_a_quarter_warp_over_eight_bank_groups():
    # decode WG: 8 consecutive rows, one chunk column; consumers: 2 rows x 4 chunks
    for chunk in range(4):
        for r0 in range(0, 64, 8):
            groups = {(S.sw64(r, chunk) % 128) // 16 for r in range(r0, r0 + 8)}
            assert len(groups) == 8
    for r0 in range(0, 64, 2):
        groups = {(S.sw64(r, q) % 128) // 16 for r in (r0, r0 + 1) for q in range(4)}
        assert len(groups) == 8


def test_launch_registers():
    # ptxas budgets whole warpgroups: 13 warps -> 4 WGs (128), 17 warps -> 5 WGs (96)
    assert S.sm90_launch_registers(416) == 128
    assert S.sm90_launch_registers(544) == 96
    assert S.sm90_launch_registers(640) == 96
    assert S.sm90_launch_registers(128) == 255 // 8 * 8


def test_register_split_fits_the_ctas_pool():
    """setmaxnreg.inc spins until the CTA's pool (warps x launch registers) can grant it:
    every split must fit that pool exactly or with room, in steps of 8, and give the
    consumers more than their estimate (ptxas used 125 where the estimate is 120)."""
    assert S.sm90_register_split(S.Sm90Config()) is None  # 416 threads: 128 each, no split
    cfg = S.Sm90Config(decode_wgs=2)
    consumer, decoder = S.sm90_register_split(cfg)
    assert (consumer, decoder) == (128, 64)
    threads = S.sm90_threads(cfg)
    launch = S.sm90_launch_registers(threads)
    pool = threads * launch  # 544 x 96
    used = 128 * cfg.consumer_wgs * consumer + 128 * cfg.decode_wgs * decoder + 32 * launch
    assert used <= pool and consumer % 8 == 0 and decoder % 8 == 0
    assert consumer > S.sm90_consumer_registers(cfg) and decoder >= S.SM90_DECODER_MIN_REGISTERS


def test_register_split_rejects_a_starved_decoder(monkeypatch):
    monkeypatch.setattr(S, "sm90_consumer_registers", lambda cfg: 200)
    assert S.sm90_register_split(S.Sm90Config(decode_wgs=2))[1] < S.SM90_DECODER_MIN_REGISTERS
    assert not S.sm90_config_is_legal(S.Sm90Config(decode_wgs=2))


@pytest.mark.parametrize(
    "kw, legal",
    [
        ({}, True),
        ({"tile_n": 64}, True),
        ({"tile_n": 64, "decode_wgs": 2}, True),
        ({"decode_wgs": 2}, True),  # 96 registers at launch; setmaxnreg: consumers 128, decoders 64
        ({"tile_m": 64, "small_m": 0}, True),
        ({"tile_m": 64, "small_m": 0, "decode_wgs": 2}, True),  # 32 accumulators fit in 96 registers
        ({"tile_m": 64, "decode_wgs": 2, "small_m": 0, "tile_n": 64}, True),
        ({"tile_m": 64, "decode_wgs": 2, "small_m": 64}, False),  # small phase needs 128-row tiles
        ({"tile_m": 64}, False),  # the narrow second phase needs 128-row tiles
        ({"small_m": 32}, False),
        ({"stages": 1}, False),
        ({"stages": 9}, False),
        ({"token_buffers": 1}, False),
        ({"tile_m": 96}, False),
        ({"swap_ab": False}, False),
    ],
)
def test_legality(kw, legal):
    cfg = S.Sm90Config(**kw)
    assert S.sm90_config_is_legal(cfg) is legal
    if legal:
        assert S.sm90_smem_bytes(cfg) <= S.SM90_SMEM_CAPACITY
        assert S.sm90_threads(cfg) == 128 * (cfg.consumer_wgs + cfg.decode_wgs) + 32
