"""What each mode does with one case, in the worker process: a test checked against the
reference, a benchmark timed as the leaderboard times it, a profile.

A function's name keys its memory estimate (memory.WORKER_INPUT_COPIES)."""

from __future__ import annotations

import math
import time

import torch

from harness.progress import report_progress
from harness.specs import TestCase
from harness.text import _left
from harness.timing import (
    CPU_MAX_REPEATS,
    NUM_ITERATIONS_PER_BENCHMARK,
    _benchmark_inputs,
    _clone_data,
    _synchronize,
    time_calls,
)
from reference import check_implementation, generate_input, ref_kernel

RTOL = ATOL = 1e-3


def _run_single_test(test: TestCase):
    from submission import custom_kernel

    data = generate_input(**test.args)
    _synchronize()
    submission_output = custom_kernel(_clone_data(data))
    _synchronize()
    return check_implementation(data, submission_output)


def _same_shapes(outputs, expected) -> bool:
    if not isinstance(outputs, (list, tuple)) or len(outputs) != len(expected):
        return False
    return all(
        isinstance(o, torch.Tensor) and o.shape == r.shape for o, r in zip(outputs, expected)
    )


def worst_mismatch(outputs, expected) -> dict:
    """The element with the largest |out - ref| / (atol + rtol |ref|) over all groups; an
    empty group (M = 0 or N = 0) has none. group is None when every group is empty."""
    worst = {"ratio": 0.0, "group": None, "index": None, "got": None, "expected": None}
    for g, (out, ref) in enumerate(zip(outputs, expected)):
        if ref.numel() == 0:
            continue
        out32, ref32 = out.float().to(ref.device), ref.float()
        ratio = (out32 - ref32).abs() / (ATOL + RTOL * ref32.abs())
        ratio = torch.where(
            torch.isnan(out32) == torch.isnan(ref32), ratio.nan_to_num(0.0), math.inf
        )
        value, flat = ratio.flatten().max(dim=0)
        if value.item() > worst["ratio"] or worst["group"] is None:
            idx = tuple(int(i) for i in torch.unravel_index(flat, ratio.shape))
            worst = {
                "ratio": float(value.item()),
                "group": g,
                "index": idx,
                "got": float(out32[idx].item()),
                "expected": float(ref32[idx].item()),
            }
    return worst


def _run_single_test_detailed(test: TestCase) -> dict:
    """Human mode: pass/fail, the leaderboard's message and the worst element."""
    from submission import custom_kernel

    data = generate_input(**test.args)
    _synchronize()
    start = time.perf_counter()
    output = custom_kernel(_clone_data(data))
    _synchronize()
    seconds = time.perf_counter() - start
    expected = ref_kernel(_clone_data(data))
    ok, message = check_implementation(data, output)
    worst = worst_mismatch(output, expected) if _same_shapes(output, expected) else None
    return {"ok": ok, "message": message, "worst": worst, "seconds": seconds}


def _run_single_benchmark(test: TestCase, recheck: bool, max_repeats: int, max_time_ns: float):
    from submission import custom_kernel

    data_list = _benchmark_inputs(test)
    check_copy = _clone_data(data_list)
    outputs = []
    count = NUM_ITERATIONS_PER_BENCHMARK
    start = time.perf_counter()
    for i, data in enumerate(data_list):
        outputs.append(custom_kernel(_clone_data(data)))
        report_progress(f"calls {i + 1}/{count} made")
    call_s = (time.perf_counter() - start) / count
    start = time.perf_counter()
    # The time left, on a CPU (where the timed rounds are CPU_MAX_REPEATS): the checks to
    # come, and the rounds' calls (and their checks in leaderboard mode)
    rounds = None if torch.cuda.is_available() else min(max_repeats, CPU_MAX_REPEATS)
    for i, (reference_output, custom_output) in enumerate(zip(check_copy, outputs)):
        good, message = check_implementation(reference_output, custom_output)
        if not good:
            return message
        left = None
        if rounds is not None:
            check_s = (time.perf_counter() - start) / (i + 1)
            left = (count - i - 1) * check_s + rounds * count * (call_s + recheck * check_s)
        report_progress(f"checked {i + 1}/{count}{_left(left)}")
    return time_calls(custom_kernel, data_list, recheck, check_copy, max_repeats, max_time_ns)


def _run_single_profile_torch(test: TestCase) -> str:
    from torch.profiler import ProfilerActivity, profile

    from submission import custom_kernel

    data = generate_input(**test.args)
    _synchronize()
    cloned = _clone_data(data)
    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        custom_kernel(cloned)
        _synchronize()
    sort = "self_cuda_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
    return prof.key_averages().table(sort_by=sort, row_limit=20)


def _run_single_profile_ncu(test: TestCase) -> str:
    from torch.cuda.nvtx import range as nvtx_range

    from submission import custom_kernel

    with nvtx_range("generate input"):
        data = generate_input(**test.args)
        _synchronize()
    cloned = _clone_data(data)
    with nvtx_range("custom_kernel"):
        custom_kernel(cloned)
        _synchronize()
    return ""
