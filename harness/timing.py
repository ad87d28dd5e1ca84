"""The leaderboard's timing loop (time_calls) and its statistics.

A benchmark has 15 inputs. Each round synchronizes, flushes the L2 and puts one CUDA-event
pair (the host clock on a CPU) around the 15 calls, divided by 15; rounds go on until the
standard error is under 0.1 % of the mean or the time budget ends. A CPU run stops after
CPU_MAX_REPEATS rounds."""

from __future__ import annotations

import dataclasses
import math
import time

import torch

from harness.progress import report_progress
from harness.specs import TestCase
from harness.text import _left
from reference import check_implementation, generate_input
from utils import clear_l2_cache_large as clear_l2_cache

NUM_ITERATIONS_PER_BENCHMARK = 15
# CPU timing: the leaderboard repeats up to 100 times; a CPU-only run keeps this short.
CPU_MAX_REPEATS = 2


@dataclasses.dataclass
class Stats:
    runs: int
    mean: float
    std: float
    err: float
    best: float
    worst: float


def calculate_stats(durations: list[float]) -> Stats:
    """Stats over durations in nanoseconds (std and err are 0 for a single run)."""
    runs = len(durations)
    avg = sum(durations) / runs
    variance = sum((x - avg) ** 2 for x in durations)
    std = math.sqrt(variance / (runs - 1)) if runs > 1 else 0.0
    err = std / math.sqrt(runs)
    return Stats(runs, avg, std, err, float(min(durations)), float(max(durations)))


def _clone_data(data):
    if isinstance(data, tuple):
        return tuple(_clone_data(x) for x in data)
    if isinstance(data, list):
        return [_clone_data(x) for x in data]
    if isinstance(data, dict):
        return {k: _clone_data(v) for k, v in data.items()}
    if isinstance(data, torch.Tensor):
        return data.clone()
    return data


def _synchronize():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class _Timer:
    """CUDA events on a GPU (as the leaderboard), the host clock on a CPU."""

    def __init__(self):
        self.cuda = torch.cuda.is_available()

    def start(self):
        if self.cuda:
            self._start = torch.cuda.Event(enable_timing=True)
            self._end = torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._t0 = time.perf_counter_ns()

    def stop_ns(self) -> float:
        if self.cuda:
            self._end.record()
            torch.cuda.synchronize()
            return self._start.elapsed_time(self._end) * 1e6
        return float(time.perf_counter_ns() - self._t0)


def _benchmark_inputs(test: TestCase) -> list:
    data_list = []
    for i in range(NUM_ITERATIONS_PER_BENCHMARK):
        if "seed" in test.args:
            test.args["seed"] += 42
        data_list.append(generate_input(**test.args))
        report_progress(f"inputs {i + 1}/{NUM_ITERATIONS_PER_BENCHMARK} made")
    return data_list


def time_calls(fn, data_list, recheck, check_copy, max_repeats, max_time_ns):
    """The leaderboard's timing loop. Returns Stats or an error message."""
    durations = []
    timer = _Timer()
    if not timer.cuda:
        max_repeats = min(max_repeats, CPU_MAX_REPEATS)
    bm_start_time = time.perf_counter_ns()
    for i in range(max_repeats):
        _synchronize()
        outputs = []
        clear_l2_cache()
        timer.start()
        for j, data in enumerate(data_list):
            outputs.append(fn(data))
            if not timer.cuda:  # a CPU round can take minutes (a send is some us a second)
                calls = f"call {j + 1}/{len(data_list)}"
                report_progress(f"round {i + 1} of {max_repeats}: {calls}")
        duration = timer.stop_ns() / NUM_ITERATIONS_PER_BENCHMARK
        if recheck:
            for reference_output, custom_output in zip(check_copy, outputs):
                good, message = check_implementation(reference_output, custom_output)
                if not good:
                    return message
        durations.append(duration)
        total_bm_duration = time.perf_counter_ns() - bm_start_time
        # On a CPU the rounds are few and long: how many are done and the time left
        if timer.cuda:
            report_progress(f"round {i + 1} timed")
        else:
            rounds_left = max_repeats - i - 1
            left = rounds_left * total_bm_duration / (i + 1) * 1e-9 if rounds_left else None
            report_progress(f"round {i + 1} of {max_repeats} timed{_left(left)}")
        if i > 1 and total_bm_duration > 1e8:
            stats = calculate_stats(durations)
            if (
                stats.err / stats.mean < 0.001
                or stats.mean * stats.runs > max_time_ns
                or total_bm_duration > 120e9
            ):
                break
    return calculate_stats(durations)
