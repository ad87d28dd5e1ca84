"""The memory a case needs (case_memory, per worker function) and the memory free where it
runs, checked before anything is allocated: a case whose estimate is over MEMORY_HEADROOM
of the free memory fails with one line saying both, and the other cases run."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from harness.ceilings import scale_bytes
from harness.specs import SF_VEC_SIZE
from harness.text import bytes_text
from harness.timing import NUM_ITERATIONS_PER_BENCHMARK

# Work beyond the tensors a step keeps, from the peak resident memory of the worker
# functions on a CPU (M, N, K from 256 to 8192): ref_kernel (each check) and the exact path
# decode a group's A and B to fp32 through int32 / fp32 temporaries, about 30 bytes per
# FP4 value at their peak, then multiply into fp32 and round to fp16; worst_mismatch holds
# fp32 copies of out and ref and the ratio between them.
DECODE_WORK_BYTES = 32  # per FP4 value of a group's A and B
PRODUCT_WORK_BYTES = 8  # per element of a group's C
MISMATCH_WORK_BYTES = 24  # per element of a group's C
DEQUANTIZED_BASELINE_BYTES = 6  # per FP4 value: the GPU baselines' bf16 / fp16 operands
# The allocators' slack on top: on a CPU, temporaries under glibc's mmap threshold (32 MiB)
# come from its heap, which fragments and grows (a case of four 2048^3 groups peaked 140 MiB
# over the rest of the estimate); on a GPU, the caching allocator's rounding.
ALLOCATOR_SLACK_BYTES = 256 << 20
# A case runs when its estimate is at most this fraction of the memory free where it runs.
MEMORY_HEADROOM = 0.9
# Copies of one input that each worker function holds at its peak, with what else it keeps:
# a test the input and the copy custom_kernel gets (the human test also the reference's
# copy); a benchmark its 15 inputs, their 15 copies for the checks and the copy of the call
# being checked, with the 15 outputs; the baselines their 15 inputs.
WORKER_INPUT_COPIES = {
    "_run_single_test": 2,
    "_run_single_test_detailed": 3,
    "_run_single_benchmark": 2 * NUM_ITERATIONS_PER_BENCHMARK + 1,
    "_run_single_profile_torch": 2,
    "_run_single_profile_ncu": 2,
    "_run_baselines": NUM_ITERATIONS_PER_BENCHMARK,
}


def _groups(args: dict):
    return zip(args["m"], args["n"], args["k"])


def input_bytes(args: dict, cuda: bool) -> int:
    """Bytes of one generate_input on the compute device: A and B (K/2 bytes a row), C in
    fp16 and the blocked scales, and on a CPU also the plain scales (on the CPU anyway)."""
    total = 0
    for m, n, k in _groups(args):
        total += (m + n) * k // 2 + 2 * m * n + scale_bytes(m, k) + scale_bytes(n, k)
        if not cuda:
            total += (m + n) * (k // SF_VEC_SIZE)
    return total


def case_memory(args: dict, worker: str, cuda: bool) -> int:
    """About the most bytes the worker function `worker` (by name) holds at once for this
    case on the compute device: its copies of the inputs (WORKER_INPUT_COPIES) and the
    largest group's work in a check or a call (the outputs of a benchmark too) and the
    allocators' slack."""
    groups = list(_groups(args))
    work = max(
        DECODE_WORK_BYTES * (m + n) * k + PRODUCT_WORK_BYTES * m * n for m, n, k in groups
    )
    total = WORKER_INPUT_COPIES[worker] * input_bytes(args, cuda)
    if worker == "_run_single_test_detailed":
        work = max(work, max(MISMATCH_WORK_BYTES * m * n for m, n, _ in groups))
    if worker == "_run_single_benchmark":
        total += NUM_ITERATIONS_PER_BENCHMARK * sum(2 * m * n for m, n, _ in groups)
    if worker == "_run_baselines" and cuda:
        values = sum((m + n) * k for m, n, k in groups)
        total += NUM_ITERATIONS_PER_BENCHMARK * DEQUANTIZED_BASELINE_BYTES * values
    return total + work + ALLOCATOR_SLACK_BYTES


def memory_problem(needed: int, where: str, free: int | None) -> str:
    """Why a case needing `needed` bytes cannot run where `free` bytes are free (in words:
    `where`), or "" when it fits within MEMORY_HEADROOM of them or free is unknown."""
    if free is None or needed <= MEMORY_HEADROOM * free:
        return ""
    return (
        f"the case needs about {bytes_text(needed)}; {where} has {bytes_text(free)} free, "
        f"of which a case may use {MEMORY_HEADROOM:.0%} ({bytes_text(MEMORY_HEADROOM * free)})"
    )


def _cgroup_free_bytes() -> int | None:
    """What this container's memory limit leaves (limit - usage + inactive file pages),
    where a cgroup (v2 or v1) sets one; None elsewhere."""
    for limit_file, usage_file, stat_file, inactive in (
        ("memory.max", "memory.current", "memory.stat", "inactive_file"),
        ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes", "memory/memory.stat",
         "total_inactive_file"),
    ):
        root = Path("/sys/fs/cgroup")
        try:
            limit = (root / limit_file).read_text().strip()
            usage = int((root / usage_file).read_text())
        except (OSError, ValueError):
            continue
        if not limit.isdigit() or int(limit) >= 1 << 60:  # "max", or no limit
            return None
        stat = dict(line.split() for line in (root / stat_file).read_text().splitlines())
        return int(limit) - usage + int(stat.get(inactive, 0))
    return None


def host_free_bytes() -> int | None:
    """The host memory a new allocation can have: MemAvailable (/proc/meminfo), or the
    free pages (os.sysconf) where there is no /proc, capped by a cgroup's limit; None
    when neither is known."""
    free = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                free = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if free is None:
        try:
            free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):
            return None
    try:
        limited = _cgroup_free_bytes()
    except (OSError, ValueError):
        limited = None
    return free if limited is None else min(free, limited)


def _free_memory() -> tuple[str, int | None, bool]:
    """Where a case's tensors go, in words, the bytes free there (None: unknown) and
    whether that is a GPU: the worker's CUDA device (free to the driver, and what torch
    holds cached but unused), else the host."""
    if torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info()
        free += torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
        return f"the GPU ({torch.cuda.get_device_name()})", free, True
    return "the CPU", host_free_bytes(), False
