"""The FP4 row decoder of the CUDA fp16 fallback (Fp4RowDecoder): every packed operand of a
batch of groups to fp16 in one launch, on any GPU the CuTe DSL targets."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .binding import device_ptr, fake_ptr, to_device_async
from .common import _DSL_IMPORT_ERROR, Int32, Int64, cute, cutlass, warn_once
from .formats import SF_ATOM_BYTES, _e2m1_pair_table, _e4m3_pair_table
from .ptx import ld_global_nc_u8, ld_global_nc_u32, ld_global_nc_v2, mul_f16x2, st_global_v4_b32

DECODE_THREADS = 256
# a job is one operand: addresses of its packed bytes, blocked scales and fp16 output, its
# 16-value blocks (rows x K/16), K/16 and K/64 (the scale atoms per 128 rows), as int64
DECODE_JOB_FIELDS = 6


def decode_scale_offset(r, j, rest_k):
    """Byte offset of row r's K-block j scale in a blocked scale tensor of the kernels'
    layout: 512-byte atoms of 128 rows x 4 K-blocks, (r // 128, j // 4) in row-major order
    of rest_k = K/64 atoms per 128 rows, CUTLASS's 32 x 4 x 4 order inside. Works on host
    ints and on kernel Int64s alike."""
    return ((r // 128) * rest_k + j // 4) * SF_ATOM_BYTES + (r % 32) * 16 + ((r % 128) // 32) * 4 + j % 4


class Fp4RowDecoder:
    """Packed E2M1 rows and their blocked E4M3 scales -> fp16 rows, exactly, for the fp16
    fallback (run_torch_fp16): every operand of a batch of groups in one launch, one pass
    over memory (9 bytes read, 32 written per 16 values), where the torch decode makes
    several (an int32 index, a gather, a multiply: about 10 bytes moved per value).

    How it works:
      1. The host lists one job per operand (decode_jobs: packed rows, scales, fp16 output,
         16-value blocks, blocks per row, scale atoms per row) and uploads the table.
      2. Each thread takes one 16-value block of one job: reads its scale byte from the
         blocked atom (decode_scale_offset) and its 8 packed bytes (non-coherent loads).
      3. It maps each byte to the f16x2 of its two values and the scale to an f16x2 pair,
         through two 256-entry tables, multiplies, and stores 32 bytes.

    Constraints: the kernels' layout (dense packed rows, the blocked scale allocation);
    any GPU the CuTe DSL compiles for (no conversion instruction of one architecture).
    An elementwise kernel in the CuTe DSL's style (examples/python/CuTeDSL/ampere/
    elementwise_add.py in NVIDIA/cutlass), with inline-PTX loads and stores.

    Grid (blocks of the largest job / DECODE_THREADS, jobs): each thread one 16-value scale
    block of one job, its 8 packed bytes to 32 bytes of fp16. Table-driven, with no
    conversion instruction that only some GPUs have: a packed byte -> the f16x2 of its two
    E2M1 values (_e2m1_pair_table), an E4M3 byte -> the f16x2 (s, s) (_e4m3_pair_table), one
    f16x2 multiply per byte. An E2M1 value times an E4M3 scale has at most 6 significant
    bits and lies within 2^-10 .. 2688, so the fp16 product is exact (a NaN scale gives NaN
    as in the reference). Needs the kernels' layout: packed rows dense, scales in the
    blocked atom order (decode_scale_offset)."""

    @cute.jit
    def __call__(self, jobs_ptr: cute.Pointer, pair_ptr: cute.Pointer, scale_ptr: cute.Pointer,
                 num_jobs: Int32, max_blocks: Int32):
        self.kernel(jobs_ptr, pair_ptr, scale_ptr).launch(
            grid=[(max_blocks + DECODE_THREADS - 1) // DECODE_THREADS, num_jobs, 1],
            block=[DECODE_THREADS, 1, 1],
        )

    @cute.kernel
    def kernel(self, jobs_ptr, pair_ptr, scale_ptr):
        tidx, _, _ = cute.arch.thread_idx()
        bx, job, _ = cute.arch.block_idx()
        mJobs = cute.make_tensor(jobs_ptr, cute.make_layout((DECODE_JOB_FIELDS, 1 << 20), stride=(1, DECODE_JOB_FIELDS)))
        t = Int64(bx) * DECODE_THREADS + tidx
        if t < mJobs[3, job]:
            kblocks = mJobs[4, job]
            r = t // kblocks
            j = t - r * kblocks
            scale = ld_global_nc_u8(mJobs[1, job] + decode_scale_offset(r, j, mJobs[5, job]))
            s2 = ld_global_nc_u32(scale_ptr.toint() + Int64(scale) * 4)
            words = ld_global_nc_v2(mJobs[0, job] + t * 8)
            pairs = [
                mul_f16x2(ld_global_nc_u32(pair_ptr.toint() + Int64((words[i // 4] >> (8 * (i % 4))) & 0xFF) * 4), s2)
                for i in range(8)
            ]
            out = mJobs[2, job] + t * 32
            st_global_v4_b32(out, *pairs[:4], Int32(1))
            st_global_v4_b32(out + 16, *pairs[4:], Int32(1))


_decoders: dict[tuple[int, int], Any] = {}  # compute capability -> compiled decoder, or False


def compile_fp4_decoder():
    """Fp4RowDecoder compiled for the current device's architecture (CUTE_DSL_ARCH's when set,
    as in the compile-only tests)."""
    return cute.compile(Fp4RowDecoder(), fake_ptr(cutlass.Int64), fake_ptr(cutlass.Int32),
                        fake_ptr(cutlass.Int32), Int32(1), Int32(1))


def fp4_decoder(device: torch.device):
    """Fp4RowDecoder compiled for the device's architecture (once per architecture), or None
    where the CuTe DSL is missing or does not compile for it: the fp16 fallback then decodes
    with torch ops (one warning)."""
    if _DSL_IMPORT_ERROR is not None:
        return None
    arch = torch.cuda.get_device_capability(device)
    fn = _decoders.get(arch)
    if fn is None:
        try:
            with torch.cuda.device(device):
                fn = compile_fp4_decoder()
        except Exception as e:  # any failure leaves the torch decode, which needs nothing more
            warn_once(f"the FP4 decode kernel does not compile for sm_{arch[0]}{arch[1]} ({type(e).__name__}: "
                      f"{e}); the fp16 fallback decodes with torch ops")
            fn = False
        _decoders[arch] = fn
    return fn or None


def launch_decoder(decoder, jobs: Sequence[tuple[int, ...]], device: torch.device) -> None:
    """One decode launch on the device's default CUDA queue over `jobs` (decode_jobs' rows)."""
    if device.index is None:  # "cuda": the current device
        device = torch.device("cuda", torch.cuda.current_device())
    table = to_device_async(torch.tensor(jobs, dtype=torch.int64), device)
    with torch.cuda.device(device):  # the module and the default queue are the device's
        decoder(device_ptr(table, cutlass.Int64), device_ptr(_e2m1_pair_table(device), cutlass.Int32),
                device_ptr(_e4m3_pair_table(device), cutlass.Int32), Int32(len(jobs)),
                Int32(max(job[3] for job in jobs)))
