"""eval.py at its limits on a CPU: a case too large for the free memory fails at once
without allocating, Ctrl-C stops a run with one line and exit status 130 and leaves no
process behind, and a long CPU benchmark case shows its progress."""

import io
import os
import resource
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch
from cases import ROOT

from harness import ceilings, human, memory, progress, runs, specs, text, timing, worker

# What a CPU-only machine shows ("the CPU has ... free", rounds of CPU_MAX_REPEATS)
cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU's behaviour")

# The two cases: 12.8 GB of A alone (before the fix the OOM killer ended the
# worker after ~24 GB) and 358 GB of A (the allocator's raw text).
TOO_LARGE = [
    "m: [100000000]; n: [256]; k: [256]; g: 1; seed: 1",
    "m: [100000000]; n: [4096]; k: [7168]; g: 1; seed: 1",
]
SMALL = "m: [96, 128]; n: [128, 256]; k: [256, 512]; g: 2; seed: 1111"
# A CPU case that takes seconds (a test: about 3 s; a benchmark: over a minute) in about
# 0.7 GB at its peak
SLOW = "m: [1024]; n: [4096]; k: [4096]; g: 1; seed: 1"
GIB = 1 << 30


def _limit_data():
    """At most 6 GiB of data for eval.py and its worker: a case that did allocate would
    fail with the allocator's text here, not drive a shared machine out of memory."""
    resource.setrlimit(resource.RLIMIT_DATA, (6 * GIB, 6 * GIB))


# --------------------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------------------
def test_bytes_text():
    assert text.bytes_text(512) == "512 B"
    assert text.bytes_text(1536) == "1.5 KiB"
    assert text.bytes_text(21.3 * GIB) == "21.3 GiB"
    assert text.bytes_text(5.4 * 1024 * GIB) == "5.4 TiB"


def test_memory_problem_says_need_and_free():
    assert memory.memory_problem(10 * GIB, "the CPU", 20 * GIB) == ""
    assert memory.memory_problem(10 * GIB, "the CPU", None) == ""  # unknown: not refused
    # within the headroom's margin: refused
    assert memory.memory_problem(19 * GIB, "the CPU", 20 * GIB) != ""
    assert (
        memory.memory_problem(int(5.4 * 1024 * GIB), "the CPU", int(21.3 * GIB))
        == "the case needs about 5.4 TiB; the CPU has 21.3 GiB free, of which a case may "
        "use 90% (19.2 GiB)"
    )
    # the message states the headroom that the check applies
    assert memory.MEMORY_HEADROOM == 0.9
    assert memory.memory_problem(18 * GIB, "the CPU", 20 * GIB) == ""
    assert "may use 90% (18 GiB)" in memory.memory_problem(18 * GIB + 1, "the CPU", 20 * GIB)


def test_estimates_count_every_copy():
    """One input's bytes are exact; a test holds 2 copies, the human test 3 and a benchmark
    31 (15 inputs, their 15 copies for the checks and a call's copy) with 15 outputs."""
    args = specs.parse_spec("m: [128]; n: [256]; k: [512]; g: 1; seed: 1")
    a, b, c = 128 * 256, 256 * 256, 2 * 128 * 256
    blocked = ceilings.scale_bytes(128, 512) + ceilings.scale_bytes(256, 512)
    plain = (128 + 256) * 512 // 16
    assert memory.input_bytes(args, cuda=True) == a + b + c + blocked
    assert memory.input_bytes(args, cuda=False) == a + b + c + blocked + plain
    one = memory.input_bytes(args, cuda=False)
    base = memory.case_memory(args, "_run_single_test", False) - 2 * one
    assert memory.case_memory(args, "_run_single_test_detailed", False) - 3 * one >= base
    bench = memory.case_memory(args, "_run_single_benchmark", False)
    assert bench == 31 * one + 15 * c + base


def _peak_rss_of(worker: str, spec: str) -> int:
    """The peak resident bytes that `worker` adds in a fresh process, after a warm-up."""
    code = f"""
import gc, sys
sys.path.insert(0, {str(ROOT)!r})
from harness import runs, specs
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
fn = getattr(runs, {worker!r})
extra = (False, 2, 1e9) if {worker!r} == "_run_single_benchmark" else ()
fn(specs.TestCase(specs.parse_spec("m: [64]; n: [64]; k: [256]; g: 1; seed: 3"), ""), *extra)
gc.collect()
base = status("VmRSS")
open("/proc/self/clear_refs", "w").write("5")
fn(specs.TestCase(specs.parse_spec({spec!r}), ""), *extra)
print(status("VmHWM") - base)
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
        preexec_fn=_limit_data,
    )
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.split()[-1])


@cpu_only
@pytest.mark.skipif(
    not os.access("/proc/self/clear_refs", os.W_OK), reason="needs Linux's /proc peak RSS reset"
)
@pytest.mark.parametrize(
    ("worker", "spec"),
    [
        ("_run_single_test", "m: [8192]; n: [256]; k: [4096]; g: 1; seed: 1"),
        ("_run_single_test_detailed", "m: [4096]; n: [4096]; k: [256]; g: 1; seed: 1"),
        ("_run_single_benchmark", "m: [2048]; n: [1024]; k: [1024]; g: 1; seed: 1"),
    ],
)
def test_estimate_covers_the_measured_peak(worker, spec):
    """The estimate is at least the worker's measured peak on a CPU, and not far above it
    (a guess of the whole free memory would refuse cases that run)."""
    peak = _peak_rss_of(worker, spec)
    estimate = memory.case_memory(specs.parse_spec(spec), worker, cuda=False)
    assert peak <= estimate <= 2 * peak + memory.ALLOCATOR_SLACK_BYTES, (peak, estimate)


def test_host_free_bytes_is_plausible():
    free = memory.host_free_bytes()
    assert free is not None and 0 < free
    if os.path.exists("/proc/meminfo"):
        total = int(open("/proc/meminfo").read().split("MemTotal:")[1].split()[0]) * 1024
        assert free <= total


@cpu_only
def test_fit_check_answers_within_a_second():
    """The check asks the worker what is free and does the arithmetic: nothing of the case
    is allocated, and with the worker started it answers in well under a second."""
    with worker.CaseRunner(None) as runner:
        assert runner.run(worker._ping) is True  # the worker started
        for spec in TOO_LARGE:
            test = specs.TestCase(specs.parse_spec(spec), spec)
            for worker_fn in (runs._run_single_test, runs._run_single_benchmark):
                start = time.monotonic()
                error = worker.fits_in_memory(runner, test, worker_fn)
                assert time.monotonic() - start < 1.0
                assert isinstance(error, worker.CaseError)
                assert error.message.startswith("the case needs about ")
                assert "; the CPU has " in error.message
                assert " free, of which a case may use 90% (" in error.message
        small = specs.TestCase(specs.parse_spec(SMALL), SMALL)
        assert worker.fits_in_memory(runner, small, runs._run_single_benchmark) is None


def _run(args, popcorn_path=None, timeout=120):
    env = {k: v for k, v in os.environ.items() if k != "POPCORN_FD"}
    fds = ()
    out = None
    if popcorn_path is not None:
        out = open(popcorn_path, "w")
        env["POPCORN_FD"] = str(out.fileno())
        fds = (out.fileno(),)
    try:
        start = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "eval.py", *args], cwd=ROOT, env=env, pass_fds=fds,
            capture_output=True, text=True, timeout=timeout, preexec_fn=_limit_data,
        )
        return proc, time.monotonic() - start
    finally:
        if out is not None:
            out.close()


@cpu_only
def test_too_large_cases_fail_fast_in_human_mode():
    proc, seconds = _run(["test", *TOO_LARGE, SMALL])
    assert proc.returncode == 112, proc.stderr
    lines = proc.stdout.splitlines()
    for i, spec in enumerate(TOO_LARGE, 1):
        needed = memory.case_memory(specs.parse_spec(spec), "_run_single_test_detailed", False)
        assert needed > 1024 * GIB  # over a TiB each
        (line,) = [x for x in lines if x.startswith(f"  [{i}/3] ")]
        assert f"FAIL: the case needs about {text.bytes_text(needed)}; the CPU has " in line
        assert " free, of which a case may use 90% (" in line
    assert "1 passed, 2 failed" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    assert seconds < 60  # start-up and one small case; the large ones allocate nothing


@cpu_only
def test_too_large_cases_fail_fast_in_protocol_mode(tmp_path):
    """Every case still gets its lines; the benchmark fails the same way (the warm-up on
    the first case is refused too)."""
    spec_file = tmp_path / "specs.txt"
    spec_file.write_text("".join(spec + "\n" for spec in TOO_LARGE))
    for mode, kind in (("test", "test"), ("benchmark", "benchmark")):
        out_path = tmp_path / f"{mode}.txt"
        proc, seconds = _run([mode, str(spec_file)], popcorn_path=out_path)
        assert proc.returncode == 112, proc.stderr
        lines = dict(line.split(": ", 1) for line in out_path.read_text().splitlines())
        assert lines[f"{kind}-count"] == "2" and lines["check"] == "fail"
        for idx in (0, 1):
            assert lines[f"{kind}.{idx}.spec"] == TOO_LARGE[idx]
            assert lines[f"{kind}.{idx}.status"] == "fail"
            assert lines[f"{kind}.{idx}.error"].startswith("the case needs about ")
        assert "Traceback" not in proc.stderr
        assert seconds < 60


# --------------------------------------------------------------------------------------
# Ctrl-C
# --------------------------------------------------------------------------------------
def _children(pid: int) -> list[int]:
    """The processes whose parent is pid (/proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


class _Reader(threading.Thread):
    """Collects a pipe's text as it comes (a case's line has no newline until it ends)."""

    def __init__(self, pipe):
        super().__init__(daemon=True)
        self.pipe, self.text = pipe, ""

    def run(self):
        for chunk in iter(lambda: self.pipe.read(1), ""):
            self.text += chunk

    def wait_for(self, text: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.text:
            assert time.monotonic() < deadline, f"no {text!r} in {self.text!r}"
            time.sleep(0.05)


def _interrupt(args, wait_for, popcorn_path=None):
    """Start eval.py in its own process group, wait for `wait_for` in its output, then
    press Ctrl-C (SIGINT to the group, as a terminal sends it). Returns (exit status,
    stdout, stderr, seconds to stop, children seen before the interrupt)."""
    env = {k: v for k, v in os.environ.items() if k != "POPCORN_FD"}
    fds, out = (), None
    if popcorn_path is not None:
        out = open(popcorn_path, "w")
        env["POPCORN_FD"], fds = str(out.fileno()), (out.fileno(),)
    proc = subprocess.Popen(
        [sys.executable, "eval.py", *args], cwd=ROOT, env=env, pass_fds=fds, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        preexec_fn=_as_from_a_terminal,
    )
    if out is not None:
        out.close()
    stdout, stderr = _Reader(proc.stdout), _Reader(proc.stderr)
    stdout.start()
    stderr.start()
    try:
        if popcorn_path is None:
            stdout.wait_for(wait_for)
        else:
            deadline = time.monotonic() + 120
            while wait_for not in popcorn_path.read_text():
                assert time.monotonic() < deadline and proc.poll() is None, stderr.text
                time.sleep(0.05)
        time.sleep(0.5)  # into the case
        children = _children(proc.pid)
        assert children, "the worker should be running"
        start = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=30)
        seconds = time.monotonic() - start
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    stdout.join(5)
    stderr.join(5)
    return proc.returncode, stdout.text, stderr.text, seconds, children


def _as_from_a_terminal():
    """eval.py as a shell's foreground job starts it: SIGINT at its default, also where
    these tests run in a background job (which starts with SIGINT ignored, and Python then
    keeps it ignored), and its data limited (_limit_data)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    _limit_data()


def _sleep_then_answer():
    time.sleep(1.0)
    return signal.getsignal(signal.SIGINT) == signal.SIG_IGN


def test_the_worker_leaves_ctrl_c_to_eval_py():
    """A terminal's Ctrl-C reaches the worker too: it ignores SIGINT (eval.py ends it), so
    no KeyboardInterrupt traceback comes from it, whatever the race with eval.py."""
    with worker.CaseRunner(None) as runner:
        assert runner.run(worker._ping) is True
        timer = threading.Timer(0.3, os.kill, (runner._proc.pid, signal.SIGINT))
        timer.start()
        assert runner.run(_sleep_then_answer) is True
        timer.join()


def _assert_clean_stop(code, stdout, stderr, seconds, children):
    assert code == 130, stderr
    assert stderr.splitlines()[-1] == "interrupted", stderr
    assert "Traceback" not in stdout + stderr and "KeyboardInterrupt" not in stderr
    assert seconds < 5, seconds  # a second or two on an idle machine
    deadline = time.monotonic() + 5  # the resource tracker leaves once eval.py has gone
    while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in children if _alive(pid)], "a child process survived"


@cpu_only
def test_ctrl_c_at_the_first_output_of_a_cpu_benchmark():
    """At its first line the benchmark is measuring the roofline in the worker."""
    code, stdout, stderr, seconds, children = _interrupt(["benchmark", SLOW], "\n")
    _assert_clean_stop(code, stdout, stderr, seconds, children)
    assert stdout.startswith("1 benchmark on CPU only")


@cpu_only
def test_ctrl_c_inside_a_benchmark_case_prints_what_finished():
    code, stdout, stderr, seconds, children = _interrupt(
        ["benchmark", SMALL, SLOW], "[2/2] G=1 M=[1024]"
    )
    _assert_clean_stop(code, stdout, stderr, seconds, children)
    assert "[2/2] G=1 M=[1024] N=4096 K=4096 ..." in stdout and " interrupted\n" in stdout
    # the finished case's row in the table, no report of a part of the run
    assert "G=2 M=[96,128] N=128/256 K=256/512  " in stdout and "x roofline" in stdout
    assert "G=1 M=[1024] N=4096 K=4096  " not in stdout


@cpu_only
def test_ctrl_c_inside_a_test_case():
    code, stdout, stderr, seconds, children = _interrupt(["test", SMALL, SLOW], "[2/2] ")
    _assert_clean_stop(code, stdout, stderr, seconds, children)
    assert "[1/2] G=2 M=[96,128] N=128/256 K=256/512 ... pass" in stdout
    assert "[2/2] G=1 M=[1024] N=4096 K=4096 ... interrupted" in stdout
    assert "1 passed, 0 failed, 1 not run" in stdout


@cpu_only
def test_ctrl_c_in_protocol_mode(tmp_path):
    """The finished case keeps its lines, the interrupted one fails with `interrupted`,
    and `check: fail` comes last."""
    spec_file = tmp_path / "specs.txt"
    spec_file.write_text(f"{SMALL}\n{SLOW}\n")
    out_path = tmp_path / "popcorn.txt"
    code, stdout, stderr, seconds, children = _interrupt(
        ["test", str(spec_file)], "test.1.spec", popcorn_path=out_path
    )
    _assert_clean_stop(code, stdout, stderr, seconds, children)
    assert out_path.read_text().splitlines() == [
        "test-count: 2",
        f"test.0.spec: {SMALL}",
        "test.0.status: pass",
        f"test.1.spec: {SLOW}",
        "test.1.status: fail",
        "test.1.error: interrupted",
        "check: fail",
    ]


# --------------------------------------------------------------------------------------
# Progress
# --------------------------------------------------------------------------------------
class _Pipe:
    def __init__(self):
        self.sent = []

    def send(self, message):
        self.sent.append(message.text)


@cpu_only
def test_cpu_benchmark_reports_rounds_and_time_left(monkeypatch):
    """The worker's progress through a CPU benchmark: inputs made, calls made, checks with
    the time left, each timed round of CPU_MAX_REPEATS with the time left (none after the
    last)."""
    pipe = _Pipe()
    monkeypatch.setattr(progress, "_progress_conn", pipe)
    monkeypatch.setattr(progress, "PROGRESS_EVERY_S", 0.0)
    test = specs.TestCase(specs.parse_spec(SMALL), SMALL)
    stats = runs._run_single_benchmark(test, False, 100, 1e9)
    assert isinstance(stats, timing.Stats) and stats.runs == timing.CPU_MAX_REPEATS == 2
    sent = pipe.sent
    assert "inputs 15/15 made" in sent and "calls 15/15 made" in sent
    checked = [s for s in sent if s.startswith("checked 15/15, ")]
    assert checked and checked[0].endswith(" left")
    first = [s for s in sent if s.startswith("round 1 of 2 timed, ")]
    assert first and first[0].endswith(" left")
    assert "round 2 of 2 timed" in sent
    assert "round 1 of 2: call 15/15" in sent


def test_progress_is_throttled_and_off_unless_asked(monkeypatch):
    pipe = _Pipe()
    monkeypatch.setattr(progress, "_progress_conn", pipe)
    monkeypatch.setattr(progress, "_progress_sent", time.monotonic())
    progress.report_progress("too soon")
    assert pipe.sent == []
    monkeypatch.setattr(progress, "_progress_sent", time.monotonic() - 2)
    progress.report_progress("now")
    progress.report_progress("too soon again")
    assert pipe.sent == ["now"]
    monkeypatch.setattr(progress, "_progress_conn", None)
    progress.report_progress("nobody asked")  # outside a request that wants progress


def _slow_progress():
    time.sleep(1.2)
    progress.report_progress("halfway")
    return "done"


def test_progress_travels_from_the_worker_ahead_of_the_result():
    seen = []
    with worker.CaseRunner(None, on_progress=seen.append) as runner:
        assert runner.run(_slow_progress) == "done"
    assert seen == ["halfway"]
    with worker.CaseRunner(None) as runner:  # no on_progress: none is sent
        assert runner.run(_slow_progress) == "done"


class _Stream(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self):
        return self.tty


def test_case_line_on_a_terminal_replaces_its_progress():
    stream = _Stream(tty=True)
    line = human.CaseLine(stream)
    line.start("  [1/1] case ...")
    line.progress("round 1 of 2 timed, about 40 s left")
    line.progress("round 2 of 2 timed")
    line.finish(" 12.3 us")
    text = stream.getvalue()
    assert text.endswith("\r  [1/1] case ...\x1b[K 12.3 us\n")
    assert "\r  [1/1] case ... round 1 of 2 timed, about 40 s left\x1b[K" in text
    assert text.split("\r")[-1] == "  [1/1] case ...\x1b[K 12.3 us\n"


def test_case_line_in_a_log_appends_progress_sparingly():
    stream = _Stream(tty=False)
    line = human.CaseLine(stream, log_every_s=0.0)
    line.start("  [1/1] case ...")
    line.progress("checked 3/15")
    line.finish(" 12.3 us")
    assert stream.getvalue() == "  [1/1] case ... [checked 3/15] 12.3 us\n"
    stream = _Stream(tty=False)
    line = human.CaseLine(stream, log_every_s=3600.0)
    line.start("  [1/1] case ...")
    line.progress("checked 3/15")
    line.finish(" 12.3 us")
    line.finish(" twice")  # no line open: nothing
    line.progress("late")
    assert stream.getvalue() == "  [1/1] case ... 12.3 us\n"
