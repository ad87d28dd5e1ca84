"""The POPCORN_FD output of a CPU run of specs/example.txt, pinned line by line: the
leaderboard's harness reads these keys, in this order and this format
(/work/shared/leaderboard/README.md, "Protocol"), so moving eval.py's code around must
not change one of them. Values that vary from run to run (times) are matched by pattern."""

import os
import re
import subprocess
import sys

import pytest
from cases import ROOT

EXAMPLE = ROOT / "specs" / "example.txt"
SPECS = EXAMPLE.read_text().splitlines()
# A Stats field as Python prints it: an int for runs, a float's repr for the rest
INT = r"[0-9]+"
FLOAT = r"[0-9]+\.[0-9]+(e[+-][0-9]+)?|[0-9]+(\.[0-9]+)?e[+-][0-9]+"


def _protocol_run(tmp_path, mode):
    out_path = tmp_path / f"{mode}.txt"
    env = {**os.environ, "EVAL_TIMEOUT_S": "0"}
    env.pop("POPCORN_SEED", None)
    with open(out_path, "w") as out:
        env["POPCORN_FD"] = str(out.fileno())
        proc = subprocess.run(
            [sys.executable, "eval.py", mode, str(EXAMPLE)],
            cwd=ROOT, env=env, pass_fds=(out.fileno(),), capture_output=True, text=True,
            timeout=600,
        )
    return proc, out_path.read_text()


def _expected(mode):
    """(key, value pattern) for every line the mode writes, in order."""
    if mode == "test":
        lines = [("test-count", re.escape(str(len(SPECS))))]
        for idx, spec in enumerate(SPECS):
            lines += [(f"test.{idx}.spec", re.escape(spec)), (f"test.{idx}.status", "pass")]
    else:
        lines = [("benchmark-count", re.escape(str(len(SPECS))))]
        for idx, spec in enumerate(SPECS):
            lines.append((f"benchmark.{idx}.spec", re.escape(spec)))
            lines.append((f"benchmark.{idx}.runs", INT))
            for field in ("mean", "std", "err", "best", "worst"):
                lines.append((f"benchmark.{idx}.{field}", FLOAT))
    return lines + [("check", "pass")]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["test", "benchmark"])
def test_protocol_output_keys_order_and_format(tmp_path, mode):
    proc, text = _protocol_run(tmp_path, mode)
    assert proc.returncode == 0, proc.stderr
    assert text.endswith("\n")
    lines = text.splitlines()
    expected = _expected(mode)
    assert [line.split(": ", 1)[0] for line in lines] == [key for key, _ in expected]
    for line, (key, pattern) in zip(lines, expected):
        assert re.fullmatch(f"{re.escape(key)}: (?:{pattern})", line), line
