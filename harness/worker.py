"""The spawned worker process that runs every case, as the leaderboard runs each case in a
worker, and the checks made before a case runs (its spec, its memory).

A case that raises, runs past its time limit (EVAL_TIMEOUT_S, else the leaderboard's
limit for the mode in protocol mode) or kills the worker (a crash in native code) fails
with one line; the worker is replaced and the other cases run."""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import os
import signal
import threading
import time
import traceback

from harness import progress
from harness.memory import _free_memory, case_memory, memory_problem
from harness.progress import Progress
from harness.runs import _run_single_benchmark
from harness.specs import InputError, TestCase, spec_problem
from harness.text import one_line
from harness.timing import Stats

# The leaderboard's time limit for each mode, in seconds: the default limit per case here.
MODE_TIME_LIMIT_S = {"test": 180, "benchmark": 180, "leaderboard": 300}


def _init_worker():
    os.environ["CUTE_DSL_DISABLE_FILE_CACHING"] = "1"
    # Ctrl-C reaches the whole process group: the parent ends the worker (CaseRunner.close)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@dataclasses.dataclass
class CaseError:
    """A case that raised, or ran past its time limit, instead of giving a result."""

    message: str


def _guarded(fn, args: tuple, show_traceback: bool):
    """fn(*args) in the worker; an exception becomes a CaseError with its type and message
    (some exceptions, the CuTe DSL's among them, do not survive the trip back)."""
    try:
        return fn(*args)
    except (Exception, SystemExit) as e:
        if show_traceback:
            traceback.print_exc()
        return CaseError(one_line(f"{type(e).__name__}: {e}"))


def _ping() -> bool:
    return True


def _serve(conn) -> None:
    """The worker process: runs (fn, args, wants_progress) requests from the pipe and sends
    back results (after any Progress lines) until the pipe closes."""
    _init_worker()
    while True:
        try:
            fn, args, wants_progress = conn.recv()
        except EOFError:
            return
        progress.attach(conn if wants_progress else None)
        result = fn(*args)
        progress.attach(None)
        conn.send(result)


def _exit_text(code: int | None) -> str:
    """A worker's exit code in words: a signal by name (a crash in native code), or the
    code."""
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class CaseRunner:
    """Runs worker functions in one spawned process, as the leaderboard does. run() gives
    the function's result, or a CaseError when it raised, ran past timeout_s or the worker
    died (a crash in native code): the worker is then ended, and the next run starts a new
    one. A dead worker is seen within WORKER_POLL_S, with or without a time limit."""

    WORKER_POLL_S = 0.2

    def __init__(self, timeout_s: float | None, show_traceback: bool = False, on_progress=None):
        self.timeout_s = timeout_s
        self.show_traceback = show_traceback
        self.on_progress = on_progress  # called with each Progress text; None: no progress
        self._context = multiprocessing.get_context("spawn")
        self._proc = None
        self._conn = None

    def _start(self):
        """A worker, started and answering (its start-up, imports included, is not counted
        against a case); a CaseError if it died on the way. It starts with SIGINT ignored
        (kept across exec, and by Python), so that Ctrl-C during its imports leaves it to
        the parent to end it."""
        if self._proc is None:
            parent, child = self._context.Pipe()
            self._conn = parent
            self._proc = self._context.Process(target=_serve, args=(child,), daemon=True)
            handler = signal.getsignal(signal.SIGINT)
            in_main_thread = threading.current_thread() is threading.main_thread()
            if in_main_thread:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
            try:
                self._proc.start()
            finally:
                if in_main_thread:
                    signal.signal(signal.SIGINT, handler)
                child.close()
            answer = self._call(_ping, (), None)
            if isinstance(answer, CaseError):
                return answer
        return None

    def run(self, fn, *args):
        failed = self._start()
        if failed is not None:
            return failed
        return self._call(_guarded, (fn, args, self.show_traceback), self.timeout_s)

    def _call(self, fn, args: tuple, timeout_s: float | None):
        self._conn.send((fn, args, self.on_progress is not None))
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            wait = self.WORKER_POLL_S
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
                if wait <= 0:
                    self.close()
                    return CaseError(f"timed out after {timeout_s:g} s (EVAL_TIMEOUT_S)")
            try:
                if self._conn.poll(wait):
                    answer = self._conn.recv()
                    if not isinstance(answer, Progress):
                        return answer
                    if self.on_progress is not None:
                        self.on_progress(answer.text)
                    continue
            except (EOFError, OSError):  # the worker closed the pipe as it died
                pass
            if not self._proc.is_alive():
                self._proc.join()
                code = self._proc.exitcode
                self.close()
                return CaseError(f"the worker process died ({_exit_text(code)})")

    def close(self):
        """End the worker (SIGTERM, then SIGKILL after 5 s) and wait for it."""
        if self._proc is not None and self._proc.pid is not None:
            if self._proc.is_alive():
                self._proc.terminate()
                self._proc.join(5)
                if self._proc.is_alive():  # stuck where SIGTERM is not handled
                    self._proc.kill()
            self._proc.join()
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        self.close()


def case_timeout_s(mode: str, protocol: bool) -> float | None:
    """EVAL_TIMEOUT_S (0: none); unset, the leaderboard's limit for the mode in protocol
    mode (none for profile, whose limit is not known here) and none in human mode.
    InputError when it is not a finite number of seconds >= 0."""
    value = os.getenv("EVAL_TIMEOUT_S")
    if value:
        try:
            seconds = float(value)
        except ValueError:
            seconds = math.nan
        if not (math.isfinite(seconds) and seconds >= 0):
            raise InputError(
                f"EVAL_TIMEOUT_S={value!r}: expected a number of seconds >= 0 (0: no limit)"
            )
        return seconds or None
    return MODE_TIME_LIMIT_S.get(mode) if protocol else None


def fits_in_memory(runner: CaseRunner, test: TestCase, worker) -> CaseError | None:
    """A CaseError when the case (a valid spec) needs more memory than is free on the
    worker's device (case_memory, memory_problem), else None. Nothing is allocated."""
    answer = runner.run(_free_memory)
    if isinstance(answer, CaseError):
        return answer
    where, free, cuda = answer
    problem = memory_problem(case_memory(test.args, worker.__name__, cuda), where, free)
    return CaseError(problem) if problem else None


def run_case(runner: CaseRunner, test: TestCase, worker, *args):
    """worker(test, *args) in the worker process, or a CaseError: a raise, a timeout, a
    spec that generate_input cannot build or a case that needs more memory than is free
    (neither is run)."""
    problem = spec_problem(test.args)
    if problem:
        return CaseError(f"invalid spec: {problem}")
    return fits_in_memory(runner, test, worker) or runner.run(worker, test, *args)


def _benchmark(runner: CaseRunner, test: TestCase, *settings) -> Stats | str:
    """Stats, or why the benchmark failed."""
    result = run_case(runner, test, _run_single_benchmark, *settings)
    return result.message if isinstance(result, CaseError) else result
