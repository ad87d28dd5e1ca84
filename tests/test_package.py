"""The wheel: it installs the nvfp4_gemm package and nothing with a generic top-level name
(the harness files stay at the repository root, where the leaderboard expects them)."""

import email.parser
import shutil
import subprocess
import sys
import zipfile

import pytest
from cases import ROOT

HARNESS = (
    "eval.py", "harness/__init__.py", "task.py", "utils.py", "reference.py", "submission.py",
    "task.yml",
)


def test_wheel_holds_the_package_alone(tmp_path):
    pytest.importorskip("setuptools", reason="the dev extra installs setuptools (./dev)")
    # a copy of the tree, so that the build's own files (build/, *.egg-info) stay out of it;
    # the harness, tests and tools come along, to show the build leaves them out
    src = tmp_path / "src"
    src.mkdir()
    for entry in ROOT.iterdir():
        if entry.name.startswith(".") or entry.name in ("build", "dist", "dump") or entry.name.endswith(".egg-info"):
            continue
        if entry.is_dir():
            shutil.copytree(entry, src / entry.name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(entry, src / entry.name)
    assert all((src / name).exists() for name in HARNESS)
    out = tmp_path / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "--no-cache-dir", "-q", "-w", str(out), str(src)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = out.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    dist_info = {t for t in top if t.endswith(".dist-info")}
    assert top - dist_info == {"nvfp4_gemm"}, sorted(top)
    modules = {p.name for p in (ROOT / "nvfp4_gemm").glob("*.py")}
    assert {n.split("/", 1)[1] for n in names if n.startswith("nvfp4_gemm/")} == modules

    (info,) = dist_info
    meta = email.parser.Parser().parsestr(zipfile.ZipFile(wheel).read(f"{info}/METADATA").decode())
    requires = meta.get_all("Requires-Dist")
    assert [r for r in requires if "extra ==" not in r] == ["torch<2.15,>=2.9"]
    assert any(r.startswith("matplotlib") and 'extra == "report"' in r for r in requires)
    assert {"gpu", "harness", "report", "dev"} <= set(meta.get_all("Provides-Extra"))
    assert meta.get_payload().startswith("# nvfp4-group-gemm")  # the README
