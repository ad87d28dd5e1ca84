"""Evaluation harness for `nvfp4_group_gemm`, compatible with the leaderboard's eval.

Protocol mode (what the leaderboard runs):
    POPCORN_FD=3 python eval.py {test|benchmark|leaderboard|profile} SPECFILE 3>out.txt
writes `key: value` lines to the descriptor, runs each case in one spawned worker process,
times as the leaderboard does and exits 0 when everything passes, 112 otherwise.

Human mode (no POPCORN_FD):
    python eval.py test                      # the 10 task.yml tests, a readable table
    python eval.py benchmark [--baselines] [--report reports/] [SPECFILE | SPEC ...]
    python eval.py test "m: [96]; n: [128]; k: [256]; g: 1; seed: 7"
runs task.yml's cases (or the given spec lines and spec files, options and specs in any
order) and prints tables: pass/fail and the worst mismatch for tests; mean and best time,
TFLOP/s and the ratio to this machine's roofline for benchmarks. It works on a CPU-only
machine, with fewer timing repeats and an estimate of the run's time up front.

This file holds the command line, the modes and the protocol's output; the package
harness/ holds the rest (its __init__ lists the modules). docs/eval.md is the user's guide:
spec format, time limits (EVAL_TIMEOUT_S), exit statuses (0 passed, 112 a case failed, 113
a spec or spec file, 2 a wrong command line, environment variable or output path, 130
interrupted). A bad argument, environment variable or spec file ends the run before any
case runs, with one line on stderr.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import importlib.util
import os
import signal
import sys

from harness import EXIT_BAD_SPEC_FILE, EXIT_FAIL, EXIT_INTERRUPTED, EXIT_USAGE


def _interrupted_at_start(signum, frame):
    """Ctrl-C while eval.py is still importing torch: one line and exit status 130."""
    print("interrupted", file=sys.stderr, flush=True)
    os._exit(EXIT_INTERRUPTED)


if __name__ == "__main__" and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _interrupted_at_start)

# Disable CuTe DSL file caching for more stable benchmarking (as the leaderboard does).
os.environ["CUTE_DSL_DISABLE_FILE_CACHING"] = "1"

from harness.human import human_benchmarks, human_profile, human_tests  # noqa: E402
from harness.report import MATPLOTLIB_MISSING, check_outputs  # noqa: E402
from harness.runs import _run_single_profile_ncu, _run_single_profile_torch, _run_single_test  # noqa: E402
from harness.specs import (  # noqa: E402
    SEED_RANGE,
    InputError,
    SpecFileError,
    TestCase,
    _apply_secret_seed,
    human_cases,
    read_spec_file,
    seed_value,
    spec_problem,
)
from harness.text import one_line  # noqa: E402
from harness.timing import Stats  # noqa: E402
from harness.worker import CaseError, CaseRunner, _benchmark, case_timeout_s, run_case  # noqa: E402
from utils import set_seed  # noqa: E402


class PopcornOutput:
    def __init__(self, fd: int):
        self.file = os.fdopen(fd, "w")
        os.set_inheritable(fd, False)
        self.checked = False
        self.open_case = None  # "test.3" from its spec line until its next line

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        self.file.close()

    def print(self, *args, **kwargs):
        print(*args, **kwargs, file=self.file, flush=True)

    def log(self, key, value):
        self.print(f"{key}: {value}")
        case, _, field = key.rpartition(".")
        if field == "spec":
            self.open_case = case
        elif case == self.open_case:
            self.open_case = None

    def finish(self, passed: bool) -> int:
        """The final `check:` line; the exit status that goes with it."""
        self.log("check", "pass" if passed else "fail")
        self.checked = True
        return 0 if passed else EXIT_FAIL


def _log_failure(logger: PopcornOutput, kind: str, idx: int, test: TestCase, message: str) -> None:
    """A failed case's lines on the descriptor, and one line on stderr for whoever watches."""
    logger.log(f"{kind}.{idx}.status", "fail")
    logger.log(f"{kind}.{idx}.error", one_line(message))
    print(f"{kind} {idx} failed: '{test.spec}': {one_line(message)}", file=sys.stderr)


def run_testing(logger: PopcornOutput, runner: CaseRunner, tests: list[TestCase]) -> int:
    passed = True
    logger.log("test-count", len(tests))
    for idx, test in enumerate(tests):
        logger.log(f"test.{idx}.spec", test.spec)
        result = run_case(runner, test, _run_single_test)
        good, message = (False, result.message) if isinstance(result, CaseError) else result
        if not good:
            _log_failure(logger, "test", idx, test, message)
            passed = False
        else:
            logger.log(f"test.{idx}.status", "pass")
            if message:
                logger.log(f"test.{idx}.message", message)
    return logger.finish(passed)


def _log_benchmark(logger: PopcornOutput, idx: int, test: TestCase, result) -> bool:
    if isinstance(result, Stats):
        for field in dataclasses.fields(Stats):
            logger.log(f"benchmark.{idx}.{field.name}", getattr(result, field.name))
        return True
    _log_failure(logger, "benchmark", idx, test, str(result))
    return False


def run_benchmarking(logger: PopcornOutput, runner: CaseRunner, tests: list[TestCase]) -> int:
    runnable = [test for test in tests if not spec_problem(test.args)]
    if runnable:  # warm-up, as the leaderboard's; its result is not reported
        _benchmark(runner, runnable[0], False, 100, 10e7)
    passed = True
    logger.log("benchmark-count", len(tests))
    for idx, test in enumerate(tests):
        logger.log(f"benchmark.{idx}.spec", test.spec)
        result = _benchmark(runner, test, False, 100, 10e9)
        passed = _log_benchmark(logger, idx, test, result) and passed
    return logger.finish(passed)


def run_leaderboard(logger: PopcornOutput, runner: CaseRunner, tests: list[TestCase]) -> int:
    for test in tests:  # warm-up
        _benchmark(runner, test, False, 50, 5e8)
    logger.log("benchmark-count", len(tests))
    passed = True
    for idx, test in enumerate(tests):
        result = _benchmark(runner, test, True, 100, 30e9)
        logger.log(f"benchmark.{idx}.spec", test.spec)
        if not _log_benchmark(logger, idx, test, result):
            passed = False
            break  # the leaderboard stops at the first failure
    return logger.finish(passed)


def run_profiling(logger: PopcornOutput, runner: CaseRunner, tests: list[TestCase]) -> int:
    ncu = os.getenv("POPCORN_NCU", "0") == "1"
    worker = _run_single_profile_ncu if ncu else _run_single_profile_torch
    passed = True
    logger.log("benchmark-count", len(tests))
    for idx, test in enumerate(tests):
        logger.log(f"benchmark.{idx}.spec", test.spec)
        report = run_case(runner, test, worker)
        if isinstance(report, CaseError):
            _log_failure(logger, "benchmark", idx, test, report.message)
            passed = False
            continue
        encoded = base64.b64encode(report.encode("utf-8"), b"+*").decode("utf-8")
        logger.log(f"benchmark.{idx}.report", encoded)
    return logger.finish(passed)


PROTOCOL_RUNNERS = {
    "test": run_testing,
    "benchmark": run_benchmarking,
    "leaderboard": run_leaderboard,
    "profile": run_profiling,
}
PROTOCOL_USAGE = (
    "usage: POPCORN_FD=N python eval.py {test|benchmark|leaderboard|profile} SPECFILE [--traceback]"
)


def popcorn_fd(text: str) -> int:
    """POPCORN_FD's descriptor: InputError unless it is the number of an open one."""
    try:
        fd = int(text)
        os.fstat(fd)
    except (ValueError, OSError):
        raise InputError(
            f"POPCORN_FD={text!r}: expected the number of an open file descriptor"
        ) from None
    return fd


def protocol_main(fd: str, argv: list[str]) -> int:
    show_traceback = "--traceback" in argv
    positional = [arg for arg in argv if arg != "--traceback"]
    if len(positional) < 2 or positional[0] not in PROTOCOL_RUNNERS:
        print(PROTOCOL_USAGE, file=sys.stderr)
        return EXIT_USAGE
    mode, spec_file = positional[:2]
    seed = os.getenv("POPCORN_SEED")
    os.unsetenv("POPCORN_SEED")
    try:
        fd = popcorn_fd(fd)
    except InputError as e:  # no descriptor to write `check: fail` to
        print(f"eval.py: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    with PopcornOutput(fd) as logger:
        try:
            seed = seed_value(seed, "POPCORN_SEED") if seed else None
            timeout_s = case_timeout_s(mode, protocol=True)
        except InputError as e:
            print(f"eval.py: error: {e}", file=sys.stderr)
            logger.finish(False)
            return EXIT_USAGE
        set_seed(seed or 42)
        try:
            tests = _apply_secret_seed(read_spec_file(spec_file), seed)
        except SpecFileError as e:
            print(e, file=sys.stderr)
            logger.finish(False)
            return EXIT_BAD_SPEC_FILE
        try:
            with CaseRunner(timeout_s, show_traceback) as runner:
                return PROTOCOL_RUNNERS[mode](logger, runner, tests)
        except KeyboardInterrupt:  # Ctrl-C: the case it stopped gets its lines
            case = logger.open_case
            if case is not None:
                logger.log(f"{case}.status", "fail")
                logger.log(f"{case}.error", "interrupted")
            raise
        finally:
            if not logger.checked:  # eval.py itself failed, or was interrupted
                logger.finish(False)


MODES = {
    "test": "check each case against the reference: pass / fail and the worst element",
    "benchmark": "time each case as the leaderboard does: mean, best, TFLOP/s, x roofline",
    "leaderboard": "benchmark, with every timed repeat checked again",
    "profile": "a torch profiler table for each case",
}
USAGE = (
    "python eval.py {test,benchmark,leaderboard,profile} [SPECFILE | SPEC ...] [--baselines]\n"
    "       [--report DIR] [--json FILE] [--seed N] [--traceback]\n"
    "       POPCORN_FD=N python eval.py MODE SPECFILE [--traceback]"
)
HELP_DESCRIPTION = (
    "Run submission.py's tests or benchmarks for nvfp4_group_gemm and print readable tables;\n"
    "options, spec files and spec lines come in any order.\n\nmodes:\n"
    + "".join(f"  {mode:<12} {text}\n" for mode, text in MODES.items())
)
HELP_EPILOG = """\
spec format: one case a line, `key: value` pairs separated by `;`, lists as [1, 2, 3]:
  m: [96, 128]; n: [128, 256]; k: [256, 512]; g: 2; seed: 1111
In spec files blank lines and lines starting with # are skipped (not with POPCORN_FD).

environment:
  POPCORN_FD=N      the leaderboard's protocol: `key: value` lines on descriptor N, one
                    spec file, its strict format (every line a case)
  POPCORN_SEED=S    with POPCORN_FD, the secret seed combined into each case's seed
                    (0 to 4294967295, as --seed and a spec's seed)
  EVAL_TIMEOUT_S=T  time limit per case in seconds (0: none)

exit status: 0 all passed, 112 a case failed, 113 a spec that does not parse or a spec
file that cannot be read or holds no case, 2 a wrong command line, environment variable or
output path, 130 interrupted (Ctrl-C)"""


class _UsageError(Exception):
    """A command line that eval.py does not take (exit status 2)."""


class _Parser(argparse.ArgumentParser):
    """argparse, with a wrong command line raising _UsageError (one line, not the usage)."""

    def error(self, message):
        raise _UsageError(message)


def _help_formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=32, width=100)


def _seed_arg(text: str) -> int:
    try:
        return seed_value(text, "--seed")
    except InputError:
        raise argparse.ArgumentTypeError(f"expected {SEED_RANGE}, got {text!r}") from None


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="eval.py",
        usage=USAGE,
        description=HELP_DESCRIPTION,
        epilog=HELP_EPILOG,
        formatter_class=_help_formatter,
    )
    parser.add_argument(
        "words",
        nargs="*",
        metavar="MODE [SPECFILE | SPEC ...]",
        help="a mode (above), then optional spec files and spec lines; none: task.yml's "
        "tests (test mode) or benchmarks (the other modes)",
    )
    parser.add_argument(
        "--baselines",
        action="store_true",
        help="(benchmark, leaderboard) also time torch._grouped_mm on bf16, cuBLAS fp16 on "
        "the dequantized operands and the exact path",
    )
    parser.add_argument(
        "--report",
        metavar="DIR",
        help="(benchmark, leaderboard) write the table and the chart into DIR, named for the "
        "machine: benchmark-<gpu or cpu>.md and .png (the chart needs matplotlib)",
    )
    parser.add_argument(
        "--json", metavar="FILE", help="(benchmark, leaderboard) write the results as JSON"
    )
    parser.add_argument(
        "--seed", type=_seed_arg, metavar="N", help="secret seed combined into each case's seed"
    )
    parser.add_argument(
        "--traceback", action="store_true", help="print the traceback of a case that raises"
    )
    return parser


def parse_command_line(argv: list[str]) -> argparse.Namespace:
    """The human mode's command line: args.mode, args.specs and the options. _UsageError
    when there is no mode or an unknown one."""
    args = _parser().parse_intermixed_args(argv)
    if not args.words:
        raise _UsageError("a mode is required: test, benchmark, leaderboard or profile")
    args.mode, *args.specs = args.words
    if args.mode not in MODES:
        raise _UsageError(
            f"unknown mode '{args.mode}': choose test, benchmark, leaderboard or profile"
        )
    return args


def human_main(argv: list[str]) -> int:
    try:
        args = parse_command_line(argv)
    except _UsageError as e:
        print(f"eval.py: error: {e} (see python eval.py --help)", file=sys.stderr)
        return EXIT_USAGE
    try:
        timeout_s = case_timeout_s(args.mode, protocol=False)
        tests = human_cases(args.specs, args.mode)
        if args.mode in ("benchmark", "leaderboard"):  # before a run of minutes
            if args.report and importlib.util.find_spec("matplotlib") is None:
                raise InputError(MATPLOTLIB_MISSING)
            check_outputs(args)
    except SpecFileError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_SPEC_FILE
    except InputError as e:
        print(f"eval.py: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    tests = _apply_secret_seed(tests, args.seed)
    set_seed(args.seed or 42)
    with CaseRunner(timeout_s, args.traceback) as runner:
        if args.mode == "test":
            return human_tests(runner, tests)
        if args.mode == "profile":
            return human_profile(runner, tests)
        return human_benchmarks(runner, tests, args.mode == "leaderboard", args)


def _interrupt_once(signum, frame):
    """Ctrl-C: KeyboardInterrupt once; later presses are ignored while eval.py ends its
    worker and prints what finished."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def main() -> int:
    if signal.getsignal(signal.SIGINT) in (signal.default_int_handler, _interrupted_at_start):
        signal.signal(signal.SIGINT, _interrupt_once)
    try:
        fd = os.getenv("POPCORN_FD")
        if fd:
            return protocol_main(fd, sys.argv[1:])
        return human_main(sys.argv[1:])
    except KeyboardInterrupt:
        sys.stdout.flush()
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
