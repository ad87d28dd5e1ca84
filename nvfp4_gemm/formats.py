"""NVFP4 number formats and scale layouts: the E2M1 code table, the E4M3 and packed-pair decode
tables, and cuBLAS's blocked scale layout (128-row x 4-scale atoms of 512 bytes) as shapes,
strides and an unblocking permute."""

from __future__ import annotations

import torch

from .common import SF_VEC_SIZE, ceil_div


def _blocked_scale_shape(rows: int, k: int) -> tuple[int, ...]:
    return (32, 4, ceil_div(rows, 128), 4, ceil_div(k // SF_VEC_SIZE, 4), 1)


def _blocked_scale_strides(rows: int, k: int) -> tuple[int, ...]:
    """Element strides of the leaderboard's permuted view of an (L, rest_mn, rest_k, 32, 4, 4)
    allocation (the L stride is left out: L == 1)."""
    rest_k = ceil_div(k // SF_VEC_SIZE, 4)
    return (16, 4, rest_k * 512, 1, 512)


# E2M1 code -> value: sign bit 3, exponent bits 2..1 (bias 1), mantissa bit 0.
_E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
_e2m1_tables: dict[torch.device, torch.Tensor] = {}


def _e2m1_table(device: torch.device) -> torch.Tensor:
    """The 16 code values on `device`, cached once copied there."""
    table = _e2m1_tables.get(device)
    if table is None:
        table = _e2m1_tables[device] = torch.tensor(_E2M1_VALUES, dtype=torch.float32, device=device)
    return table


def _blocked_scales(sf_blocked: torch.Tensor, rows: int, k: int, dtype=torch.float32) -> torch.Tensor:
    """(rows, K/16) scales (exact in fp32 and fp16) out of a blocked (32, 4, rest_m, 4,
    rest_k, 1) view, whose element [r % 32, (r % 128) // 32, r // 128, j % 4, j // 4, 0] is
    row r's scale j: one permute and copy, no index tensors."""
    scales = sf_blocked.permute(2, 1, 0, 4, 3, 5).reshape(-1, sf_blocked.shape[4] * 4)
    return scales[:rows, :k // SF_VEC_SIZE].to(dtype)


_e2m1_pair_tables: dict[torch.device, torch.Tensor] = {}


def _e2m1_pair_table(device: torch.device) -> torch.Tensor:
    """(256,) int32: packed byte -> its two fp16 values' bits (low code in the low half, as
    a little-endian (rows, K) fp16 view reads them). Made by ops on the device from the
    16-value table; cached."""
    table = _e2m1_pair_tables.get(device)
    if table is None:
        values = _e2m1_table(device).to(torch.float16).view(torch.int16).to(torch.int32) & 0xFFFF
        byte = torch.arange(256, device=device)
        table = _e2m1_pair_tables[device] = values[byte & 0xF] | (values[byte >> 4] << 16)
    return table
_e4m3_pair_tables: dict[torch.device, torch.Tensor] = {}


def _e4m3_pair_table(device: torch.device) -> torch.Tensor:
    """(256,) int32: an E4M3 byte -> the fp16 bits of its value in both halves (the f16x2
    multiplier of Fp4RowDecoder; NaN for 0x7F and 0xFF). Made on the device; cached."""
    table = _e4m3_pair_tables.get(device)
    if table is None:
        codes = torch.arange(256, dtype=torch.int32, device=device).to(torch.uint8)
        bits = codes.view(torch.float8_e4m3fn).to(torch.float16).view(torch.int16).to(torch.int32) & 0xFFFF
        table = _e4m3_pair_tables[device] = bits | (bits << 16)
    return table
SF_ATOM_BYTES = 512  # 128 rows x 4 scale columns
