"""Do the kernel GPU tests fail when the kernel cannot run? On a GPU with a kernel here
(sm_90 or sm_100), runs the kernel GPU tests twice with the kernel path sabotaged, as a user's
machine could have it:

    torch-path   NVFP4_GEMM_PATH=torch set in the environment
    no-dsl       the CuTe DSL unimportable (sys.modules["cutlass"] = None before the tests)

Each kernel test must then fail (not pass, not skip). Prints each sabotage's outcome counts
and the tests that did not fail; exits 0 when every selected test failed under both, 1
otherwise, 2 without such a GPU.

    python tools/fallback_guard_check.py [-- PYTEST_ARGS]   (default: KERNEL_TESTS)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tools.mutation_check import outcomes  # noqa: E402

# The kernel tests: every test of custom_kernel or a forced config in these files, but those
# that test the torch paths or fall back on purpose.
KERNEL_TESTS = ["tests/test_gpu.py", "tests/test_sm90_gpu.py", "-m", "gpu",
                "-k", "not fp16_fallback and not fp4_decoder and not cublas and not unaligned_weights"]

SABOTAGES = {
    "torch-path": ({"NVFP4_GEMM_PATH": "torch"}, []),
    "no-dsl": ({}, ["-c", "import sys; sys.modules['cutlass'] = None; import pytest; "
                    "sys.exit(pytest.main(sys.argv[1:]))"]),
}


def run(sabotage: str, pytest_args: list[str]) -> dict[str, str]:
    env_extra, runner = SABOTAGES[sabotage]
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        command = [sys.executable, *(runner or ["-m", "pytest"]), "-q", "-p", "no:cacheprovider",
                   f"--junitxml={junit}", *pytest_args]
        subprocess.run(command, cwd=ROOT, env={**os.environ, **env_extra}, capture_output=True, text=True)
        return outcomes(junit) if junit.exists() else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tools/fallback_guard_check.py",
        usage="%(prog)s [-h] [-- PYTEST_ARGS ...]",
        description="Runs the kernel GPU tests with the kernel path sabotaged (NVFP4_GEMM_PATH="
                    "torch; the CuTe DSL unimportable): each must fail, not pass or skip.",
        epilog="Needs an sm_90 or sm_100 GPU; elsewhere it runs nothing and exits 2. "
               f"PYTEST_ARGS default: {' '.join(KERNEL_TESTS)}")
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--"]:
        args = args[1:]
    else:
        parser.parse_args(args)  # only -h is an option of its own; anything else is an error
    import torch

    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] not in (9, 10):
        print("fallback_guard_check: needs an sm_90 or sm_100 GPU", file=sys.stderr)
        return 2
    ok = True
    for sabotage in SABOTAGES:
        result = run(sabotage, args or KERNEL_TESTS)
        counts = {s: sum(v == s for v in result.values()) for s in ("failed", "error", "passed", "skipped")}
        escaped = sorted(n for n, s in result.items() if s in ("passed", "skipped"))
        print(f"{sabotage}: {counts}")
        for name in escaped:
            print(f"  did not fail: {result[name]} {name}")
        ok = ok and bool(result) and not escaped
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
