"""Human mode (no POPCORN_FD): runs the cases in the worker, prints each case's line as it
goes (with a long case's progress) and the tables at the end, and on Ctrl-C the table of
what finished."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import time
from pathlib import Path

import torch

from harness import EXIT_FAIL
from harness.baselines import _run_baselines, peak_with_baselines
from harness.ceilings import (
    B200_SPEED_OF_LIGHT_US,
    Roofline,
    _roofline_text,
    _set_roofline,
    bytes_of,
    case_gemm_shapes,
    cpu_plan,
    flops_of,
    measure_roofline,
    sol_mode,
)
from harness.report import (
    _case_label,
    _device_name,
    _machine_line,
    _print_test_table,
    _worst_text,
    benchmark_report,
    write_report,
)
from harness.runs import _run_single_profile_torch, _run_single_test_detailed
from harness.specs import TestCase, spec_problem
from harness.text import _plural, one_line
from harness.timing import Stats
from harness.worker import CaseError, CaseRunner, _benchmark, fits_in_memory, run_case


def _describe_path() -> str:
    import submission

    select_path = getattr(submission, "select_path", None)
    if select_path is None:
        return "unknown (submission.py has no select_path)"
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    return select_path(device)


def _path_line(runner: CaseRunner) -> str:
    path = runner.run(_describe_path)
    return f"unknown ({path.message})" if isinstance(path, CaseError) else path


class CaseLine:
    """A case's line in human mode: its head (`  [1/4] G=8 ... ...`), the worker's progress
    while it runs, then its result. On a terminal the progress replaces itself in place;
    elsewhere (a log) it is appended, at most once every log_every_s."""

    def __init__(self, stream=None, log_every_s: float = 10.0):
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()
        self.log_every_s = log_every_s
        self.head = None  # the open line's head; None: no line open
        self._shown = False
        self._logged = 0.0

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def start(self, head: str) -> None:
        self.head, self._shown, self._logged = head, False, time.monotonic()
        self._write(head)

    def progress(self, text: str) -> None:
        if self.head is None:
            return
        if self.tty:
            width = shutil.get_terminal_size().columns - 1
            self._write(f"\r{self.head} {text}"[: width + 1] + "\x1b[K")
            self._shown = True
        elif time.monotonic() - self._logged >= self.log_every_s:
            self._logged = time.monotonic()
            self._write(f" [{text}]")

    def finish(self, result: str) -> None:
        """End the open line with result (nothing when no line is open)."""
        if self.head is None:
            return
        if self._shown:  # clear the progress
            self._write(f"\r{self.head}\x1b[K")
        self._write(result + "\n")
        self.head = None


def human_tests(runner: CaseRunner, tests: list[TestCase]) -> int:
    print(f"{_plural(len(tests), 'test')} on {_machine_line()}, path: {_path_line(runner)}")
    rows, failed, line = [], 0, CaseLine()
    try:
        for i, test in enumerate(tests):
            label = _case_label(test)
            line.start(f"  [{i + 1}/{len(tests)}] {label} ...")
            r = run_case(runner, test, _run_single_test_detailed)
            if isinstance(r, CaseError):
                r = {"ok": False, "message": r.message, "worst": None, "seconds": 0.0}
            line.finish(" pass" if r["ok"] else f" FAIL: {one_line(r['message'])}")
            failed += not r["ok"]
            # A mismatch shows its worst element; a raise (no output to compare) its message.
            shown = _worst_text(r["worst"]) if r["worst"] else one_line(r["message"])[:160]
            result, ms = "pass" if r["ok"] else "FAIL", f"{r['seconds'] * 1e3:.1f}"
            rows.append([str(i), label, result, shown, ms])
    except KeyboardInterrupt:
        _stop_for_interrupt(runner, line)
        _print_test_table(rows, len(tests), failed)
        raise
    _print_test_table(rows, len(tests), failed)
    return 0 if failed == 0 else EXIT_FAIL


def _stop_for_interrupt(runner: CaseRunner, line: CaseLine) -> None:
    """After Ctrl-C: the worker ended, the open case's line closed as interrupted."""
    runner.close()
    line.finish(" interrupted")


def human_profile(runner: CaseRunner, tests: list[TestCase]) -> int:
    failed = 0
    for test in tests:
        print(f"== {_case_label(test)}")
        report = run_case(runner, test, _run_single_profile_torch)
        if isinstance(report, CaseError):
            failed += 1
            print(f"FAIL: {report.message}")
        else:
            print(report)
    return 0 if failed == 0 else EXIT_FAIL


def _benchmark_entry(runner: CaseRunner, test: TestCase, recheck: bool, roof: Roofline) -> dict:
    """One benchmark's row: its time, FLOPs, bytes, roofline and speed of light, or error."""
    entry = {"case": _case_label(test), "spec": test.spec}
    problem = spec_problem(test.args)
    if problem:
        entry["error"] = f"invalid spec: {problem}"
        return entry
    entry.update(flops=flops_of(test.args), bytes=bytes_of(test.args))
    _set_roofline(entry, roof)
    key = (tuple(test.args["m"]), tuple(test.args["n"]), tuple(test.args["k"]))
    entry["sol_us"] = B200_SPEED_OF_LIGHT_US.get(key)
    stats = _benchmark(runner, test, recheck, 100, 10e9)
    if isinstance(stats, Stats):
        entry.update(dataclasses.asdict(stats))
    else:
        entry["error"] = one_line(str(stats))
    return entry


# On a CPU each benchmark case, and its baselines, start in a fresh worker: the same code
# runs 2x faster in a worker whose allocator kept the pages of an earlier case (the exact
# path's temporaries reuse them: 4 page faults against 15 million over one case of
# G=2 M=[192,320] N=3072 K=4096, 165 ms a call against 330-360 ms), so in one worker the
# submission, timed before its baselines, reads twice the "torch exact path" column for
# the same code, and a case's time hangs on the cases run before it.
def _fresh_worker_on_cpu(runner: CaseRunner, device: str | None) -> None:
    if device is None:
        runner.close()  # the next run starts a new worker


def _add_baselines(
    runner: CaseRunner, test: TestCase, entry: dict, line: CaseLine, device: str | None
) -> None:
    """The baselines of a case that ran: beside a failed one they would compare nothing."""
    if "error" in entry:
        return
    line.start("      baselines ...")
    t0 = time.perf_counter()
    _fresh_worker_on_cpu(runner, device)
    baselines = fits_in_memory(runner, test, _run_baselines) or runner.run(_run_baselines, test)
    if isinstance(baselines, CaseError):
        line.finish(f" failed: {baselines.message}")
    else:
        line.finish(f" done ({time.perf_counter() - t0:.0f} s)")
        entry["baselines"] = baselines


def human_benchmarks(runner: CaseRunner, tests: list[TestCase], recheck: bool, args) -> int:
    device = _device_name()
    print(f"{_plural(len(tests), 'benchmark')} on {_machine_line()}, path: {_path_line(runner)}")
    roof = runner.run(measure_roofline, case_gemm_shapes(tests))
    if isinstance(roof, CaseError):
        print(f"error: measuring the roofline failed: {roof.message}")
        return EXIT_FAIL
    print(f"roofline, measured now: {_roofline_text(roof)}")
    if device is None:
        print(cpu_plan(tests, roof, recheck, args.baselines))
    results, failed, start, line = [], 0, time.perf_counter(), CaseLine()
    runner.on_progress = line.progress
    try:
        for i, test in enumerate(tests):
            line.start(f"  [{i + 1}/{len(tests)}] {_case_label(test)} ...")
            t0 = time.perf_counter()
            _fresh_worker_on_cpu(runner, device)
            entry = _benchmark_entry(runner, test, recheck, roof)
            now = time.perf_counter()
            took = f"{now - t0:.0f} s, {now - start:.0f} s elapsed"
            if "error" in entry:
                failed += 1
                line.finish(f" FAIL ({took}): {entry['error']}")
            else:
                runs = _plural(entry["runs"], "run")
                line.finish(f" {entry['mean'] / 1e3:.1f} us ({runs}; {took})")
            if args.baselines:
                _add_baselines(runner, test, entry, line, device)
            results.append(entry)
    except KeyboardInterrupt:
        _stop_for_interrupt(runner, line)
        if results:  # the finished cases' table; no report or JSON of a part of the run
            print()
            roof = peak_with_baselines(results, roof)
            print(benchmark_report(results, roof, sol_mode(device))["text"])
        raise
    sol = sol_mode(device)
    roof = peak_with_baselines(results, roof)
    report = benchmark_report(results, roof, sol)
    print()
    print(report["text"])
    if args.report:
        paths = write_report(
            Path(args.report), results, roof, report, sol=sol, device_name=device
        )
        print(f"report: {', '.join(str(path) for path in paths)}")
    if args.json:
        doc = {"machine": _machine_line(), "ceiling": dataclasses.asdict(roof), "results": results}
        Path(args.json).write_text(json.dumps(doc, indent=2))
    return 0 if failed == 0 else EXIT_FAIL
