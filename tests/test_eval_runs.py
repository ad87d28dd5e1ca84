"""eval.py run as the leaderboard runs it (POPCORN_FD naming a file, a spec file argument)
and as a user runs it, on malformed specs and on a stub submission that mismatches, raises
and hangs. Tiny shapes: each run is a few seconds on two cores."""

import os
import shutil
import subprocess
import sys

import pytest
from cases import ROOT
from test_eval_specs import SPEC_CASES

import eval as eval_cli

HARNESS_FILES = ("eval.py", "reference.py", "utils.py", "task.py")

# The stub's behaviour is chosen by group 0's M.
STUB_SUBMISSION = """
import ctypes
import time

import reference


def custom_kernel(data):
    m = data[3][0][0]
    if m == 32:  # wrong numbers
        out = reference.ref_kernel(data)
        out[0].fill_(1.0)
        return out
    if m == 48:
        raise ValueError("group 0: field 'a': rejected by the stub")
    if m == 80:
        time.sleep(600)
    if m == 96:  # a crash in native code: the worker process dies
        ctypes.string_at(0)
    return reference.ref_kernel(data)
"""
STUB_SPECS = [
    ("good", "m: [16]; n: [64]; k: [64]; g: 1; seed: 1", None),
    ("mismatch", "m: [32]; n: [64]; k: [64]; g: 1; seed: 1", "mismatch found!"),
    (
        "raises",
        "m: [48]; n: [64]; k: [64]; g: 1; seed: 1",
        "ValueError: group 0: field 'a': rejected by the stub",
    ),
    ("hangs", "m: [80]; n: [64]; k: [64]; g: 1; seed: 1", "timed out after 2 s"),
    ("good_after_timeout", "m: [16]; n: [16]; k: [128]; g: 1; seed: 2", None),
    ("crashes", "m: [96]; n: [64]; k: [64]; g: 1; seed: 1", "the worker process died (killed by SIGSEGV)"),
    ("good_after_crash", "m: [16]; n: [32]; k: [64]; g: 1; seed: 3", None),
]


def run_eval(cwd, args, tmp_path, popcorn=False, env=None):
    """eval.py ARGS in cwd; with popcorn, POPCORN_FD names a file and its lines come back."""
    env = {**os.environ, **(env or {})}
    env.pop("POPCORN_FD", None)
    out_path = tmp_path / "popcorn.txt"
    with open(out_path, "w") as out:
        fds = ()
        if popcorn:
            env["POPCORN_FD"] = str(out.fileno())
            fds = (out.fileno(),)
        proc = subprocess.run(
            [sys.executable, "eval.py", *args],
            cwd=cwd,
            env=env,
            pass_fds=fds,
            capture_output=True,
            text=True,
            timeout=300,
        )
    return proc, out_path.read_text().splitlines()


def write_specs(tmp_path, specs):
    path = tmp_path / "specs.txt"
    path.write_text("".join(spec + "\n" for _, spec, _ in specs))
    return str(path)


def popcorn_dict(lines):
    return dict(line.split(": ", 1) for line in lines)


def check_protocol_lines(lines, kind, specs):
    """Each case's spec, its status (or stats) and one error line, then `check: fail`."""
    out = popcorn_dict(lines)
    assert out[f"{kind}-count"] == str(len(specs))
    for idx, (name, spec, error) in enumerate(specs):
        assert out[f"{kind}.{idx}.spec"] == spec
        errors = [line for line in lines if line.startswith(f"{kind}.{idx}.error: ")]
        if error is None:
            assert out.get(f"{kind}.{idx}.status", "pass") == "pass", name
            assert errors == [], name
        else:
            assert out[f"{kind}.{idx}.status"] == "fail", name
            assert len(errors) == 1 and error in errors[0], (name, errors)
    assert lines[-1] == "check: fail"


# --------------------------------------------------------------------------------------
# Malformed specs, the real submission: both modes agree
# --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def malformed_protocol(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("protocol")
    return run_eval(ROOT, ["test", write_specs(tmp, SPEC_CASES)], tmp, popcorn=True)


@pytest.fixture(scope="module")
def malformed_human(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("human")
    return run_eval(ROOT, ["test", *(spec for _, spec, _ in SPEC_CASES)], tmp)


def test_malformed_specs_exit_112_without_traceback(malformed_protocol, malformed_human):
    for proc, _ in (malformed_protocol, malformed_human):
        assert proc.returncode == 112, proc.stderr
        assert "Traceback" not in proc.stderr + proc.stdout


@pytest.mark.parametrize(
    ("spec", "error"), [c[1:] for c in SPEC_CASES], ids=[c[0] for c in SPEC_CASES]
)
def test_malformed_spec_protocol_mode(malformed_protocol, spec, error):
    proc, lines = malformed_protocol
    idx = [c[1] for c in SPEC_CASES].index(spec)
    out = popcorn_dict(lines)
    assert out[f"test.{idx}.spec"] == spec
    if error is None:
        assert out[f"test.{idx}.status"] == "pass"
    else:
        assert out[f"test.{idx}.status"] == "fail"
        assert out[f"test.{idx}.error"].startswith(f"invalid spec: {error}")
        stderr_lines = [
            line for line in proc.stderr.splitlines() if line.startswith(f"test {idx} failed")
        ]
        assert len(stderr_lines) == 1 and spec in stderr_lines[0] and error in stderr_lines[0]
    assert lines[-1] == "check: fail"


@pytest.mark.parametrize(
    ("spec", "error"), [c[1:] for c in SPEC_CASES], ids=[c[0] for c in SPEC_CASES]
)
def test_malformed_spec_human_mode(malformed_human, spec, error):
    proc, _ = malformed_human
    idx = [c[1] for c in SPEC_CASES].index(spec)
    assert proc.stdout.startswith(f"{len(SPEC_CASES)} tests on")
    progress = [
        line
        for line in proc.stdout.splitlines()
        if line.startswith(f"  [{idx + 1}/{len(SPEC_CASES)}] ")
    ]
    assert len(progress) == 1
    if error is None:
        assert progress[0].endswith(" ... pass")
    else:
        assert f"{spec} ... FAIL: invalid spec: {error}" in progress[0]


def test_unparsable_spec_exits_113_in_both_modes(tmp_path, capsys):
    """As the leaderboard's eval: one line on stderr and 113, before any case runs (in this
    process: nothing is spawned); the descriptor still gets `check: fail`."""
    spec_file = write_specs(tmp_path, [("good", STUB_SPECS[0][1], None), ("bad", "garbage", "")])
    out_path = tmp_path / "popcorn.txt"
    with open(out_path, "w") as out:
        fd = os.dup(out.fileno())
    assert eval_cli.protocol_main(str(fd), ["test", spec_file]) == 113
    assert out_path.read_text().splitlines() == ["check: fail"]
    stderr = capsys.readouterr().err
    assert stderr.splitlines() == [
        f"{spec_file}, line 2: invalid test case: 'garbage': 'garbage' is not `key: value`"
    ]
    assert eval_cli.human_main(["test", "garbage"]) == 113
    stderr = capsys.readouterr().err
    assert stderr.splitlines() == [
        "error: 'garbage' is neither a spec file nor a spec line `key: value; ...`"
    ]


# --------------------------------------------------------------------------------------
# A stub submission in the leaderboard's layout: eval.py (with its package harness/),
# reference.py, utils.py, task.py and submission.py in one folder
# --------------------------------------------------------------------------------------
@pytest.fixture
def stub_dir(tmp_path):
    for name in HARNESS_FILES:
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "harness", tmp_path / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "submission.py").write_text(STUB_SUBMISSION)
    return tmp_path


@pytest.mark.parametrize("mode", ["test", "benchmark"])
def test_protocol_every_case_gets_its_lines(stub_dir, mode):
    """A mismatch, a raise and a hang each fail their case with one error line, the cases
    after them still run, `check: fail` comes last and the exit status is 112."""
    spec_file = write_specs(stub_dir, STUB_SPECS)
    proc, lines = run_eval(
        stub_dir, [mode, spec_file], stub_dir, popcorn=True, env={"EVAL_TIMEOUT_S": "2"}
    )
    assert proc.returncode == 112, proc.stderr
    check_protocol_lines(lines, mode, STUB_SPECS)
    if mode == "benchmark":
        out = popcorn_dict(lines)
        for idx in (0, 4, 6):
            assert (
                int(out[f"benchmark.{idx}.runs"]) >= 1 and float(out[f"benchmark.{idx}.mean"]) > 0
            )
    assert "Traceback" not in proc.stderr


def test_human_mode_reports_a_crashed_worker_at_once(stub_dir):
    """Without a time limit (human mode's default) a worker that dies in native code fails
    its case with the signal's name, at once rather than never, and the next case runs in
    a new worker."""
    specs = STUB_SPECS[-2:]
    proc, _ = run_eval(stub_dir, ["test", *(spec for _, spec, _ in specs)], stub_dir)
    assert proc.returncode == 112, proc.stderr
    assert "FAIL: the worker process died (killed by SIGSEGV)" in proc.stdout
    assert "1 passed, 1 failed" in proc.stdout


def test_protocol_fails_a_case_with_112(stub_dir):
    """The leaderboard's conventions, one failing case: its lines and exit status 112."""
    spec_file = write_specs(stub_dir, STUB_SPECS[1:2])
    proc, lines = run_eval(stub_dir, ["test", spec_file], stub_dir, popcorn=True)
    assert proc.returncode == 112
    assert lines[:3] == ["test-count: 1", f"test.0.spec: {STUB_SPECS[1][1]}", "test.0.status: fail"]
    assert lines[3].startswith(
        "test.0.error: mismatch found! custom implementation doesn't match reference"
    )
    assert lines[4:] == ["check: fail"]


def test_human_mode_stub_failures_and_traceback(stub_dir):
    specs = [spec for _, spec, _ in STUB_SPECS[:3]]
    proc, _ = run_eval(stub_dir, ["test", *specs], stub_dir)
    assert proc.returncode == 112
    out = proc.stdout
    assert "path: unknown (submission.py has no select_path)" in out
    assert "[2/3] G=1 M=[32] N=64 K=64 ... FAIL: mismatch found!" in out
    assert (
        "[3/3] G=1 M=[48] N=64 K=64 ... FAIL: ValueError: group 0: field 'a': rejected by the stub"
        in out
    )
    assert "x tol at g0[" in out  # the mismatch's worst element in the table
    assert "1 passed, 2 failed" in out
    assert "Traceback" not in proc.stderr
    proc, _ = run_eval(stub_dir, ["test", "--traceback", specs[2]], stub_dir)
    assert proc.returncode == 112
    assert "Traceback" in proc.stderr and "rejected by the stub" in proc.stderr
    assert proc.stdout.startswith("1 test on")


def test_bench_rounds_logs_each_collection_with_its_generation():
    """tools/probes/bench_rounds.py names the garbage collections that ran in a timed round (a
    full one over torch's and the DSL's import-time objects is what stalls a round):
    GcLog must record a forced full collection as generation 2 with its duration, once."""
    import gc

    from tools.probes import bench_rounds

    log = bench_rounds.GcLog()
    gc.callbacks.append(log)
    try:
        log.take()
        gc.collect()
    finally:
        gc.callbacks.remove(log)
    events = log.take()
    assert [g for g, _ in events] == [2] and events[0][1] >= 0
    assert log.take() == []
