"""submission.py is the build of the nvfp4_gemm package (tools/build_submission.py): the
committed file is a fresh build, and the build refuses what would break one namespace."""

import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import build_submission as build  # noqa: E402


def test_the_committed_submission_is_a_fresh_build():
    fresh = build.build()
    committed = (ROOT / "submission.py").read_text()
    assert committed == fresh, "submission.py differs from the build of nvfp4_gemm/: run python tools/build_submission.py"


def test_the_built_file_starts_with_the_popcorn_lines_and_marks_every_module():
    text = (ROOT / "submission.py").read_text()
    assert text.splitlines()[:2] == list(build.POPCORN_LINES)
    assert "do not edit by hand" in text.splitlines()[2]
    for name in build.MODULES:
        assert text.count(f"# begin nvfp4_gemm/{name}.py") == 1 and text.count(f"# end nvfp4_gemm/{name}.py") == 1
    assert "from ." not in text and "import nvfp4_gemm" not in text and "from nvfp4_gemm" not in text


def test_every_package_module_is_built_or_named_outside():
    on_disk = {p.stem for p in (ROOT / "nvfp4_gemm").glob("*.py")} - {"__init__"}
    assert on_disk == set(build.MODULES) | set(build.OUTSIDE_MODULES)
    assert not set(build.MODULES) & set(build.OUTSIDE_MODULES)


def test_the_built_file_holds_no_outside_module():
    """The modules left out of submission.py (the mixture-of-experts op) leave no trace in it,
    and no built module imports one of them."""
    text = (ROOT / "submission.py").read_text()
    for name in build.OUTSIDE_MODULES:
        assert f"nvfp4_gemm/{name}.py" not in text
        for module in build.MODULES:
            source = (ROOT / "nvfp4_gemm" / f"{module}.py").read_text()
            assert f"from .{name} import" not in source and f"from nvfp4_gemm.{name}" not in source


@pytest.fixture
def package_copy(tmp_path):
    shutil.copytree(ROOT / "nvfp4_gemm", tmp_path / "nvfp4_gemm")
    return tmp_path


def _append(root, module, text):
    path = root / "nvfp4_gemm" / f"{module}.py"
    path.write_text(path.read_text() + text)


def test_a_name_defined_in_two_modules_fails_the_build(package_copy):
    _append(package_copy, "caches", "\n\ndef ceil_div(a, b):\n    return 0\n")
    with pytest.raises(build.BuildError, match="'ceil_div' is defined at top level in both"):
        build.build(package_copy)


def test_a_renamed_or_upward_package_import_fails_the_build(package_copy):
    _append(package_copy, "caches", "\nfrom .common import ceil_div as cd\n")
    with pytest.raises(build.BuildError, match="without renaming"):
        build.build(package_copy)
    shutil.copy(ROOT / "nvfp4_gemm" / "caches.py", package_copy / "nvfp4_gemm" / "caches.py")
    _append(package_copy, "caches", "\nfrom .dispatch import custom_kernel\n")
    with pytest.raises(build.BuildError, match="imports from dispatch, which is not above caches"):
        build.build(package_copy)


IMPORT_EACH_FRESH = """
import importlib, sys
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m == "nvfp4_gemm" or m.startswith("nvfp4_gemm.")]:
        del sys.modules[loaded]
    importlib.import_module("nvfp4_gemm." + name)
    print("imported", name)
"""


def test_the_package_imports_as_itself():
    """Each module imports first, into a process where no module of the package is loaded
    (no cycle through the package's __init__ whichever module a user imports first)."""
    import subprocess

    modules = (*build.MODULES, *build.OUTSIDE_MODULES)
    proc = subprocess.run([sys.executable, "-c", IMPORT_EACH_FRESH, *modules], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == [w for name in modules for w in ("imported", name)]
