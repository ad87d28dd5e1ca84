"""The device steps both masked plan kernels share (sm90_masked.MaskedPlanKernel,
sm100_masked.MaskedSm100PlanKernel): a group's clamped rows and sizes row, and the block's
inclusive scan over the groups. Not part of submission.py."""

from __future__ import annotations

from .common import Int32, cute, cutlass


@cute.jit
def group_rows(mMasked, mSizes, tidx, groups, max_m, n, k):
    """Thread tidx's group: masked_m clamped to 0 .. max_m (0 past the last group), its
    sizes row (m, N, K, 1) written."""
    m = Int32(0)
    if tidx < groups:
        m = cutlass.min(cutlass.max(mMasked[tidx], Int32(0)), max_m)
        mSizes[0, tidx] = m
        mSizes[1, tidx] = n
        mSizes[2, tidx] = k
        mSizes[3, tidx] = Int32(1)
    return m


@cute.jit
def block_scan(sScan, tidx, values: cutlass.Constexpr[int], threads: cutlass.Constexpr[int]):
    """sScan (threads, values) in shared memory -> its inclusive scan along the threads,
    every value at once (Hillis-Steele: log2(threads) steps of a read, a barrier, a write
    and a barrier); the caller has made every entry visible (a barrier) before."""
    for step in cutlass.range_constexpr(threads.bit_length() - 1):
        d = 1 << step
        mine = []
        for v in cutlass.range_constexpr(values):
            prev = Int32(0)
            if tidx >= d:
                prev = sScan[tidx - d, v]
            mine.append(sScan[tidx, v] + prev)
        cute.arch.barrier()
        for v in cutlass.range_constexpr(values):
            sScan[tidx, v] = mine[v]
        cute.arch.barrier()

