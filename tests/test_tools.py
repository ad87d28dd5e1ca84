"""tools/: what each tool needs to run, and where it lives."""

import os
import subprocess
import sys

import pytest
from cases import ROOT


def test_gpu_verify_says_what_it_lacks_and_stops(tmp_path):
    """tools/gpu_verify.sh without a CUDA GPU visible to torch and without the CuTe DSL:
    one line on stderr naming both, exit status 2, nothing run and nothing written."""
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['cutlass'] = None\n")
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": str(hide), "OUT": str(out)}
    proc = subprocess.run(["bash", "tools/gpu_verify.sh", "checks"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("tools/gpu_verify.sh needs CUDA torch and the CuTe DSL")
    assert "sees no CUDA GPU" in lines[0] and "no CuTe DSL" in lines[0]
    assert not out.exists()


def test_tools_readme_lists_every_tool_and_probe():
    """tools/README.md has one row per file of tools/ and of tools/probes/, and no row for
    a file that is not there."""
    import re

    readme = (ROOT / "tools" / "README.md").read_text()
    listed = set(re.findall(r"^\| `([\w.]+)` \|", readme, flags=re.M))
    present = {p.name for d in (ROOT / "tools", ROOT / "tools" / "probes") for p in d.iterdir()
               if p.is_file() and p.name not in ("__init__.py", "README.md")}
    assert listed == present


def test_fallback_guard_check_needs_a_kernel_gpu():
    """Without an sm_90 or sm_100 GPU the check runs nothing and exits 2, saying why."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the check would run the GPU suite twice")
    proc = subprocess.run([sys.executable, "tools/fallback_guard_check.py"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "needs an sm_90 or sm_100 GPU" in proc.stderr, proc.stderr


SCRIPTS = sorted(p.relative_to(ROOT).as_posix()
                 for d in (ROOT / "tools", ROOT / "tools" / "probes") for p in d.iterdir()
                 if p.suffix in (".py", ".sh") and p.name != "__init__.py")


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_tool_answers_help(script):
    """Every script of tools/ and tools/probes/ prints its usage for --help and exits 0, on a
    machine without a GPU too: argparse answers before torch or the DSL is imported."""
    command = ["bash", script] if script.endswith(".sh") else [sys.executable, script]
    proc = subprocess.run([*command, "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("usage: "), proc.stdout[:200]


def test_check_submission_names_a_missing_file():
    """tools/check_submission.py (./dev check) on a file that is not there: one line on stderr
    naming it, exit status 2, no traceback."""
    proc = subprocess.run([sys.executable, "tools/check_submission.py", "/no/such/file.py"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "tools/check_submission.py: /no/such/file.py: cannot read it (No such file or directory)"]


def test_the_tools_load_task_cases_of_a_kind_task_yml_has():
    """Every load_task_cases call in the tools names `tests` or `benchmarks` (a wrong kind,
    which an unguarded tool meets only on a GPU, after its other work, is a ValueError)."""
    import re

    from harness import specs

    with pytest.raises(ValueError, match="'benchmark'"):
        specs.load_task_cases("benchmark")
    for path in sorted((ROOT / "tools").rglob("*.py")):
        for kind in re.findall(r"load_task_cases\(\"([a-z]+)\"", path.read_text()):
            assert kind in ("tests", "benchmarks"), (path, kind)
            assert specs.load_task_cases(kind), (path, kind)


def test_the_masked_host_probe_runs_on_the_cpu(tmp_path):
    """tools/probes/masked_host_overhead.py times the op's Python on the CPU with the
    kernel's steps stubbed (its first call turns a fallback warning into an error, so a
    figure of the torch path instead of the runner cannot come out), every column given."""
    import json

    report = tmp_path / "host.json"
    done = subprocess.run([sys.executable, "tools/probes/masked_host_overhead.py", "--cases", "decode8,decode64",
                           "--calls", "50", "--json", str(report)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(report.read_text())["rows"]
    assert [r["case"] for r in rows] == ["decode8", "decode64"]
    for r in rows:
        assert all(r[c] > 0 for c in ("call", "torch.ops", "checks", "full checks", "direct ok", "runner")), r
