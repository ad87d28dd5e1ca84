"""Do the correctness tests catch a kernel path that computes nothing? Runs tests against a
mutant of the package in which the runner never launches its kernel (every launch call on
the fast paths and the slow path removed; the launch count, caches and self-check stay), so
each call returns its c tensors untouched. Every test run must then fail: one that passes
would pass on a broken kernel too.

    python tools/mutation_check.py              the CPU tests of custom_kernel's results
                                                through the stubbed kernel (CPU_TESTS)
    python tools/mutation_check.py --gpu        the GPU tests of the kernel's results
                                                (GPU_TESTS; needs an sm_90 or sm_100 GPU)
    python tools/mutation_check.py -- ARGS      pytest ARGS instead (ids, -k, files)

The tracked tree is copied to a temporary directory, kernel_runner.py mutated there and
submission.py rebuilt from it; pytest runs in the copy. Prints each selected test's outcome
and exits 0 when none passed, 1 when any passed, 2 when the mutation or the run failed.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The runner's launch calls: the fast paths' and the slow path's (table.launch()) and the
# self-checked launch (self._checked_launch(config, table)()).
LAUNCH_CALLS = (
    (re.compile(r"\btable\.launch\(\)"), "None"),
    (re.compile(r"self\._checked_launch\(config, table\)\(\)"), "self._checked_launch(config, table)"),
)

# Stubbed-kernel tests whose calls run the kernel path and compare its results with the
# reference (tests/test_runner.py): the stub computes exactly, so the mutant's untouched C
# must fail each.
CPU_TESTS = [
    "tests/test_runner.py::" + name for name in (
        "test_repeat_call_hits_every_cache",
        "test_a_call_repeated_back_to_back_is_recognized_by_identity",
        "test_a_repeat_with_other_contents_is_not_taken_for_it",
        "test_one_compile_serves_every_group_count",
        "test_new_values_in_same_tensors_give_new_results",
        "test_new_tensor_objects_same_pointers_reuse_descriptors",
        "test_changed_pointers_build_new_descriptors",
        "test_same_addresses_other_shapes",
        "test_self_check_runs_once_per_config_and_sizes",
        "test_sizes_of_one_class_share_the_choice_and_schedule_not_the_sizes",
        "test_many_threads_share_one_runner_through_evictions",
    )
]

# The GPU tests of the kernel's results (custom_kernel and forced configs).
GPU_TESTS = ["tests/test_gpu.py", "tests/test_sm90_gpu.py", "-m", "gpu",
             "-k", "not fp16_fallback and not fp4_decoder and not cublas and not unaligned_weights"]


def mutate(source: str) -> str:
    """kernel_runner.py's source with every launch call removed; raises ValueError where a
    pattern no longer matches (the mutant would not be the one this tool promises)."""
    for pattern, replacement in LAUNCH_CALLS:
        source, count = pattern.subn(replacement, source)
        if count == 0:
            raise ValueError(f"no launch call matches {pattern.pattern} in kernel_runner.py")
    return source


def make_mutant(into: Path) -> None:
    """The tracked tree (with uncommitted changes) copied into `into`, mutated and rebuilt."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split()
    for name in files:
        src = ROOT / name
        if src.is_file():
            dst = into / name
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(src.read_bytes())
    runner = into / "nvfp4_gemm" / "kernel_runner.py"
    runner.write_text(mutate(runner.read_text()))
    subprocess.run([sys.executable, "tools/build_submission.py"], cwd=into, check=True, capture_output=True)


def outcomes(junit: Path) -> dict[str, str]:
    """test id -> passed / failed / error / skipped, from pytest's JUnit XML."""
    result = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        state = "passed"
        for tag in ("failure", "error", "skipped"):
            if case.find(tag) is not None:
                state = {"failure": "failed"}.get(tag, tag)
        result[name] = state
    return result


def run(pytest_args: list[str]) -> dict[str, str]:
    with tempfile.TemporaryDirectory(prefix="nvfp4-mutant-") as tmp:
        tree = Path(tmp)
        make_mutant(tree)
        junit = tree / "junit.xml"
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
                        *pytest_args], cwd=tree, capture_output=True, text=True)
        if not junit.exists():
            raise RuntimeError("pytest wrote no report")
        return outcomes(junit)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog="The CPU tests run anywhere; --gpu needs a CUDA GPU.")
    parser.add_argument("--gpu", action="store_true", help="the GPU tests (GPU_TESTS)")
    parser.add_argument("pytest_args", nargs="*", help="pytest arguments after --")
    args = parser.parse_args(argv)
    selected = args.pytest_args or (GPU_TESTS if args.gpu else CPU_TESTS)
    try:
        result = run(selected)
    except (ValueError, RuntimeError, subprocess.CalledProcessError) as e:
        print(f"mutation_check: {e}", file=sys.stderr)
        return 2
    for name, state in sorted(result.items()):
        print(f"{state:8s} {name}")
    passed = [n for n, s in result.items() if s == "passed"]
    ran = [n for n, s in result.items() if s != "skipped"]
    print(f"{len(ran)} run on the mutant, {len(passed)} passed (each should fail), "
          f"{len(result) - len(ran)} skipped")
    if not ran:
        print("mutation_check: no selected test ran", file=sys.stderr)
        return 2
    return 1 if passed else 0


if __name__ == "__main__":
    sys.exit(main())
