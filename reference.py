"""Reference for the `nvfp4_group_gemm` task: input generation, the blocked scale layout,
an exact reference kernel and the checker. Names and behaviour follow the leaderboard's
reference.py, but everything here also runs without CUDA.

- `generate_input` makes the same RNG calls in the same order as the leaderboard, so with
  CUDA a seed gives the leaderboard's tensors; without CUDA the same calls run on the CPU
  and give inputs of the same kind (other values).
- `ref_kernel` decodes E2M1 and E4M3 itself, multiplies in fp32 (exact: at most 6
  significant bits per product factor), accumulates in fp32 with TF32 off and rounds once
  to fp16 into `c`. It does not depend on FP4 `torch._scaled_mm`, which only Blackwell has;
  `scaled_mm_reference` offers that as a cross-check where it exists.
- `check_implementation` is the leaderboard's: rtol = atol = 1e-3.
"""

import contextlib

import torch

from task import input_t, output_t
from utils import make_match_reference

# One E4M3 scale per 16 consecutive K values.
sf_vec_size = 16
# A blocked scale atom covers 128 rows x 4 scale columns in 512 bytes.
SF_ATOM_ROWS = 128
SF_ATOM_COLS = 4
SF_ATOM_BYTES = 512


def ceil_div(a, b):
    return (a + b - 1) // b


def _default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


# --------------------------------------------------------------------------------------
# Blocked (cuBLAS) scale-factor layout
# --------------------------------------------------------------------------------------
def blocked_scale_offsets(rows: int, sf_cols: int, device="cpu") -> torch.Tensor:
    """Byte offset of scale (r, j) inside one batch of the blocked layout, shape (rows, sf_cols).

    Atom (r // 128, j // 4) starts at ((r // 128) * rest_k + j // 4) * 512; inside it row r
    sits at (r % 32) * 16 + ((r % 128) // 32) * 4 and column j at j % 4.
    """
    rest_k = ceil_div(sf_cols, SF_ATOM_COLS)
    r = torch.arange(rows, device=device).unsqueeze(1)
    j = torch.arange(sf_cols, device=device).unsqueeze(0)
    atom = (r // SF_ATOM_ROWS) * rest_k + j // SF_ATOM_COLS
    return atom * SF_ATOM_BYTES + (r % 32) * 16 + ((r % SF_ATOM_ROWS) // 32) * 4 + j % 4


def to_blocked(input_matrix):
    """Flattened blocked layout of a (rows, sf_cols) scale matrix, zero-padded to whole atoms
    (the leaderboard's `to_blocked`, as cuBLAS and `torch._scaled_mm` expect)."""
    rows, cols = input_matrix.shape
    n_row_blocks = ceil_div(rows, SF_ATOM_ROWS)
    n_col_blocks = ceil_div(cols, SF_ATOM_COLS)
    padded = torch.nn.functional.pad(
        input_matrix,
        (0, n_col_blocks * SF_ATOM_COLS - cols, 0, n_row_blocks * SF_ATOM_ROWS - rows),
        mode="constant",
        value=0,
    )
    blocks = padded.view(n_row_blocks, SF_ATOM_ROWS, n_col_blocks, SF_ATOM_COLS)
    blocks = blocks.permute(0, 2, 1, 3)
    return blocks.reshape(-1, 4, 32, 4).transpose(1, 2).reshape(-1, 32, 16).flatten()


def create_reordered_scale_factor_tensor(l, mn, k, ref_f8_tensor, device=None):
    """Blocked scales as a (32, 4, rest_mn, 4, rest_k, l) view of an (l, rest_mn, rest_k,
    32, 4, 4) allocation. The padding holds random 1s and 2s, as on the leaderboard."""
    device = device or _default_device()
    sf_k = ceil_div(k, sf_vec_size)
    rest_mn = ceil_div(mn, SF_ATOM_ROWS)
    rest_k = ceil_div(sf_k, SF_ATOM_COLS)
    filled = torch.randint(1, 3, (l, rest_mn, rest_k, 32, 4, 4), dtype=torch.int8, device=device)
    filled = filled.to(dtype=torch.float8_e4m3fn)
    src = ref_f8_tensor.to(device)  # (mn, sf_k, l)
    offsets = blocked_scale_offsets(mn, sf_k, device=device)
    flat = filled.view(torch.uint8).view(l, -1)
    for b in range(l):
        flat[b].view(-1)[offsets.flatten()] = src[:, :, b].reshape(-1).view(torch.uint8)
    return filled.permute(3, 4, 1, 5, 2, 0)


# --------------------------------------------------------------------------------------
# Input generation
# --------------------------------------------------------------------------------------
def _create_fp4_tensors(l, mn, k, device):
    # Keep the sign bit and the 2 low bits of each nibble: values in {0, +-0.5, +-1, +-1.5}.
    ref_i8 = torch.randint(255, size=(l, mn, k // 2), dtype=torch.uint8, device=device)
    ref_i8 = ref_i8 & 0b1011_1011
    return ref_i8.permute(1, 2, 0).view(torch.float4_e2m1fn_x2)


def generate_input(m: tuple, n: tuple, k: tuple, g: int, seed: int):
    """(abc_tensors, sfasfb_tensors, sfasfb_reordered_tensors, problem_sizes) for g groups.

    a: [m, k/2, 1] float4_e2m1fn_x2, b: [n, k/2, 1], c: [m, n, 1] float16 (permuted views of
    [1, rows, cols] allocations); sfa: [m, k/16, 1], sfb: [n, k/16, 1] float8_e4m3fn on the
    CPU; reordered scales on the compute device.
    """
    device = _default_device()
    torch.manual_seed(seed)
    abc_tensors, sfasfb_tensors, sfasfb_reordered_tensors, problem_sizes = [], [], [], []
    l = 1
    for group_idx in range(g):
        mi, ni, ki = m[group_idx], n[group_idx], k[group_idx]
        a_ref = _create_fp4_tensors(l, mi, ki, device)
        b_ref = _create_fp4_tensors(l, ni, ki, device)
        c_ref = torch.randn((l, mi, ni), dtype=torch.float16, device=device).permute(1, 2, 0)
        sf_k = ceil_div(ki, sf_vec_size)
        sfa_ref_cpu = (
            torch.randint(1, 3, (l, mi, sf_k), dtype=torch.int8)
            .to(dtype=torch.float8_e4m3fn)
            .permute(1, 2, 0)
        )
        sfb_ref_cpu = (
            torch.randint(1, 3, (l, ni, sf_k), dtype=torch.int8)
            .to(dtype=torch.float8_e4m3fn)
            .permute(1, 2, 0)
        )
        sfa_reordered = create_reordered_scale_factor_tensor(l, mi, ki, sfa_ref_cpu, device)
        sfb_reordered = create_reordered_scale_factor_tensor(l, ni, ki, sfb_ref_cpu, device)
        abc_tensors.append((a_ref, b_ref, c_ref))
        sfasfb_tensors.append((sfa_ref_cpu, sfb_ref_cpu))
        sfasfb_reordered_tensors.append((sfa_reordered, sfb_reordered))
        problem_sizes.append((mi, ni, ki, l))
    return (abc_tensors, sfasfb_tensors, sfasfb_reordered_tensors, problem_sizes)


# --------------------------------------------------------------------------------------
# Exact reference
# --------------------------------------------------------------------------------------
def decode_e2m1(packed: torch.Tensor) -> torch.Tensor:
    """float32 values of packed E2M1 bytes (..., K/2) -> (..., K); low nibble first.

    E2M1: sign bit 3, exponent bits 2..1 (bias 1), mantissa bit 0; exponent 0 is subnormal
    (0 or 0.5).
    """
    u8 = packed.view(torch.uint8)
    nibbles = torch.stack((u8 & 0x0F, u8 >> 4), dim=-1).flatten(-2).to(torch.int32)
    sign = 1.0 - 2.0 * ((nibbles >> 3) & 1).to(torch.float32)
    exponent = (nibbles >> 1) & 3
    mantissa = (nibbles & 1).to(torch.float32)
    normal = torch.ldexp(1.0 + 0.5 * mantissa, exponent - 1)
    magnitude = torch.where(exponent == 0, 0.5 * mantissa, normal)
    return sign * magnitude


def decode_e4m3(scales: torch.Tensor) -> torch.Tensor:
    """float32 values of float8_e4m3fn scales (exact)."""
    return scales.to(torch.float32)


@contextlib.contextmanager
def _ieee_fp32_matmul():
    """Plain fp32 products and sums on every backend (no TF32 on NVIDIA GPUs)."""
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def _dequantize(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """(rows, K/2) packed and (rows, K/16) scales -> (rows, K) float32."""
    values = decode_e2m1(packed)
    return values * decode_e4m3(scales.to(values.device)).repeat_interleave(sf_vec_size, dim=-1)


def ref_kernel(data: input_t) -> output_t:
    """Exact NVFP4 block-scaled grouped GEMM: c[:, :, l] = fp16(sum_k A*sfa * B*sfb)."""
    abc_tensors, sfasfb_tensors, _, problem_sizes = data
    result_tensors = []
    with _ieee_fp32_matmul():
        for (a_ref, b_ref, c_ref), (sfa_ref, sfb_ref), (_, _, _, l) in zip(
            abc_tensors, sfasfb_tensors, problem_sizes
        ):
            for l_idx in range(l):
                a_f32 = _dequantize(a_ref[:, :, l_idx], sfa_ref[:, :, l_idx])
                b_f32 = _dequantize(b_ref[:, :, l_idx], sfb_ref[:, :, l_idx])
                c_ref[:, :, l_idx] = (a_f32 @ b_f32.T).to(torch.float16)
            result_tensors.append(c_ref)
    return result_tensors


def has_fp4_scaled_mm() -> bool:
    """FP4 `torch._scaled_mm` exists on Blackwell (sm_100) GPUs only."""
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 10


def scaled_mm_reference(data: input_t) -> output_t:
    """The leaderboard's own reference (cuBLAS FP4 `torch._scaled_mm`), Blackwell only.

    Returns new fp16 tensors and leaves `c` alone; use it to cross-check `ref_kernel`.
    """
    abc_tensors, sfasfb_tensors, _, problem_sizes = data
    outputs = []
    for (a_ref, b_ref, c_ref), (sfa_ref, sfb_ref), (_, _, _, l) in zip(
        abc_tensors, sfasfb_tensors, problem_sizes
    ):
        out = torch.empty_like(c_ref)
        for l_idx in range(l):
            out[:, :, l_idx] = torch._scaled_mm(
                a_ref[:, :, l_idx].view(torch.float4_e2m1fn_x2),
                b_ref[:, :, l_idx].transpose(0, 1).view(torch.float4_e2m1fn_x2),
                to_blocked(sfa_ref[:, :, l_idx]).cuda(),
                to_blocked(sfb_ref[:, :, l_idx]).cuda(),
                bias=None,
                out_dtype=torch.float16,
            )
        outputs.append(out)
    return outputs


check_implementation = make_match_reference(ref_kernel, rtol=1e-03, atol=1e-03)
