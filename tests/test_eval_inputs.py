"""eval.py on bad input: every wrong argument, environment variable, output path or spec
file ends the run before any case runs, with a non-zero exit status and one line on stderr
that names what is wrong and what is allowed, never a traceback. Also the inputs that look
wrong but are not (a spec line too long to be a file name)."""

import os
import subprocess
import sys

import pytest
from cases import ROOT

GOOD = "m: [16]; n: [64]; k: [64]; g: 1; seed: 1"
# 20 groups: 269 characters, longer than a file name may be (255), as the MoE lines of
# tools/regime_specs.txt are
LONG = "; ".join(
    [f"{key}: [{', '.join([size] * 20)}]" for key, size in (("m", "16"), ("n", "64"), ("k", "64"))]
    + ["g: 20", "seed: 1"]
)
TOO_LARGE = "m: [100000000]; n: [4096]; k: [7168]; g: 1; seed: 1"  # over a TiB: never runs


def run_eval(args, env=None, popcorn_path=None, timeout=300):
    """eval.py ARGS from the repository root; with popcorn_path, POPCORN_FD names that
    file (env may override POPCORN_FD itself)."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("POPCORN_", "EVAL_"))},
        **(env or {}),
    }
    out = open(popcorn_path, "w") if popcorn_path is not None else None
    try:
        fds = ()
        if out is not None:
            env.setdefault("POPCORN_FD", str(out.fileno()))
            fds = (out.fileno(),)
        return subprocess.run(
            [sys.executable, "eval.py", *args],
            cwd=ROOT,
            env=env,
            pass_fds=fds,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    finally:
        if out is not None:
            out.close()


def assert_one_line(proc, status, *words):
    """Exit status `status`, nothing run (no case's line on stdout) and one line on stderr
    holding every one of words."""
    assert proc.returncode == status, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "[1/" not in proc.stdout and "passed" not in proc.stdout, proc.stdout
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def test_a_spec_line_longer_than_a_file_name_runs():
    assert len(LONG) > 255
    proc = run_eval(["test", LONG])
    assert proc.returncode == 0, proc.stderr
    assert "1 passed, 0 failed" in proc.stdout
    assert proc.stderr == ""


@pytest.mark.parametrize("seed", ["-1", "4294967296", "x"])
def test_seed_option_out_of_range(seed):
    assert_one_line(
        run_eval(["test", "--seed", seed, GOOD]),
        2,
        "argument --seed",
        "an integer from 0 to 4294967295",
        repr(seed),
    )


@pytest.mark.parametrize("seed", ["-1", "4294967296"])
def test_spec_seed_out_of_range_in_both_modes(tmp_path, seed):
    spec = GOOD.replace("seed: 1", f"seed: {seed}")
    assert_one_line(
        run_eval(["test", GOOD, spec]),
        113,
        "field 'seed'",
        "an integer from 0 to 4294967295",
        f"got {seed}",
    )
    spec_file = tmp_path / "specs.txt"
    spec_file.write_text(f"{GOOD}\n{spec}\n")
    out = tmp_path / "popcorn.txt"
    assert_one_line(run_eval(["test", str(spec_file)], popcorn_path=out), 113, "line 2")
    assert out.read_text() == "check: fail\n"


@pytest.mark.parametrize("value", ["abc", "-1", "nan", "inf"])
def test_eval_timeout_must_be_seconds(tmp_path, value):
    env = {"EVAL_TIMEOUT_S": value}
    allowed = "expected a number of seconds >= 0 (0: no limit)"
    assert_one_line(run_eval(["test", GOOD], env=env), 2, f"EVAL_TIMEOUT_S='{value}'", allowed)
    spec_file = tmp_path / "specs.txt"
    spec_file.write_text(GOOD + "\n")
    out = tmp_path / "popcorn.txt"
    proc = run_eval(["test", str(spec_file)], env=env, popcorn_path=out)
    assert_one_line(proc, 2, "EVAL_TIMEOUT_S", allowed)
    assert out.read_text() == "check: fail\n"


@pytest.mark.parametrize("value", ["abc", "-1", "987"])
def test_popcorn_fd_must_be_an_open_descriptor(tmp_path, value):
    spec_file = tmp_path / "specs.txt"
    spec_file.write_text(GOOD + "\n")
    proc = run_eval(["test", str(spec_file)], env={"POPCORN_FD": value})
    assert_one_line(proc, 2, f"POPCORN_FD='{value}'", "an open file descriptor")


@pytest.mark.parametrize("value", ["abc", "-1", "4294967296"])
def test_popcorn_seed_out_of_range_fails_the_protocol_output(tmp_path, value):
    """The descriptor is not left empty: it gets `check: fail`."""
    spec_file = tmp_path / "specs.txt"
    spec_file.write_text(GOOD + "\n")
    out = tmp_path / "popcorn.txt"
    proc = run_eval(["test", str(spec_file)], env={"POPCORN_SEED": value}, popcorn_path=out)
    assert_one_line(proc, 2, f"POPCORN_SEED='{value}'", "an integer from 0 to 4294967295")
    assert out.read_text() == "check: fail\n"


def test_report_and_json_paths_are_checked_before_any_case(tmp_path):
    """A path through a regular file cannot be made, for root too."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    cases = [
        (["--report", str(blocker / "reports")], "--report", "cannot make this directory"),
        (["--report", str(blocker)], "--report", "cannot make this directory"),
        (["--json", str(blocker / "out.json")], "--json", "cannot write this file"),
        (["--json", str(tmp_path / "missing" / "out.json")], "--json", "must exist"),
        (["--json", str(tmp_path)], "--json", "cannot write this file"),
    ]
    for option, name, words in cases:
        line = assert_one_line(run_eval(["benchmark", *option, GOOD]), 2, name, words)
        assert option[1] in line
    assert not (tmp_path / "missing").exists()


def test_key_given_twice_does_not_parse(tmp_path):
    spec = "m: [16]; m: [32]; n: [64]; k: [64]; g: 1; seed: 1"
    assert_one_line(run_eval(["test", spec]), 113, "key 'm' is given twice")
    spec_file = tmp_path / "specs.txt"
    spec_file.write_text(f"{GOOD}\n{spec}\n")
    out = tmp_path / "popcorn.txt"
    assert_one_line(run_eval(["test", str(spec_file)], popcorn_path=out), 113, "line 2", "twice")
    assert out.read_text() == "check: fail\n"


@pytest.mark.parametrize("content", ["", "# only a comment\n\n"])
def test_spec_file_without_cases_is_an_error(tmp_path, content):
    spec_file = tmp_path / "specs.txt"
    spec_file.write_text(content)
    assert_one_line(run_eval(["test", str(spec_file)]), 113, str(spec_file), "no cases")
    if not content:  # the strict format: a blank or comment line is an error of its own
        out = tmp_path / "popcorn.txt"
        proc = run_eval(["test", str(spec_file)], popcorn_path=out)
        assert_one_line(proc, 113, "no cases")
        assert out.read_text() == "check: fail\n"


def test_no_baselines_for_a_failed_case():
    """A case refused by the memory check gets no baselines line; the next case does."""
    proc = run_eval(["benchmark", "--baselines", TOO_LARGE, GOOD])
    assert proc.returncode == 112, proc.stderr
    lines = proc.stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("  [1/2] "))
    assert "FAIL" in lines[first] and "of which a case may use 90%" in lines[first]
    assert lines[first + 1].startswith("  [2/2] "), lines[first + 1]
    assert [line for line in lines if line.strip().startswith("baselines")] == [lines[first + 2]]
    assert "done" in lines[first + 2]
