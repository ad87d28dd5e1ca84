"""Shared test setup: the project root on sys.path, hardware markers, the GPU tests' guard
against a silent fallback (every GPU test), and the kernel path a GPU must take."""

import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _capability():
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_capability()


def _this_gpu() -> str:
    cap = _capability()
    return "no CUDA GPU" if cap is None else f"an sm_{cap[0]}{cap[1]} GPU"


def pytest_configure(config):
    for name, doc in [
        ("gpu", "needs a CUDA GPU"),
        ("compile", "compiles a CuTe DSL kernel for a GPU arch on the CPU (no GPU needed)"),
        ("slow", "takes more than a few seconds"),
        ("fallback_expected", "a GPU test whose call falls back on purpose (exempt from the fallback guard)"),
    ]:
        config.addinivalue_line("markers", f"{name}: {doc}")


requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none here")
requires_sm90 = pytest.mark.skipif(
    _capability() != (9, 0), reason=f"needs an sm_90 GPU (H100/H200); this machine has {_this_gpu()}"
)
requires_sm100 = pytest.mark.skipif(
    _capability() is None or _capability()[0] != 10,
    reason=f"needs an sm_100 GPU (B200); this machine has {_this_gpu()}",
)


# The kernel each GPU architecture must run: a GPU of these majors that takes another path
# (a missing or broken CuTe DSL, NVFP4_GEMM_PATH) fails the kernel tests; any other skips.
NATIVE_PATHS = {9: "sm90", 10: "sm100"}


def _fallback_memories() -> list:
    """The one-warning-per-reason memories (warn_once's) of submission.py and the package:
    every fallback, whatever the warnings filter, leaves its reason there."""
    import submission
    from nvfp4_gemm import common

    return [submission._warned, common._warned]


@pytest.fixture(autouse=True)
def _no_silent_fallback(request):
    """Every GPU test fails on any fallback of its own: warn_once's memory is cleared before
    the test (so a reason warned by an earlier test counts again) and must be empty after,
    unless the test is marked fallback_expected. Clearing also lets the test's own
    warnings reach it. On a GPU with a kernel here, every GPU test (those that force a
    config through a runner too) first fails if custom_kernel would not run that kernel."""
    if request.node.get_closest_marker("gpu") is None:
        yield
        return
    if torch.cuda.is_available():
        required_path()  # a GPU with a kernel here that custom_kernel would not run fails now
    memories = _fallback_memories()
    for memory in memories:
        memory.clear()
    yield
    if request.node.get_closest_marker("fallback_expected") is None:
        reasons = sorted(set().union(*memories))
        if reasons:
            pytest.fail("the call fell back instead of running the kernel: " + "; ".join(reasons))


def kernel_launches() -> int:
    """Kernel launches issued so far by submission.py's runners (custom_kernel's)."""
    import submission

    return sum(runner.launches for runner in submission._runners.values())


def required_path() -> str | None:
    """The kernel path custom_kernel must take on this GPU ('sm90' on 9.x, 'sm100' on 10.x;
    None on an architecture without a kernel here, which runs a torch path). Fails the test,
    naming why, where a GPU with a kernel takes another path."""
    import submission

    cap = _capability()
    native = None if cap is None else NATIVE_PATHS.get(cap[0])
    if native is None:
        return None
    path = submission.select_path(torch.device("cuda"))
    if path != native:
        why = [f"{submission.PATH_ENV}={os.environ[submission.PATH_ENV]}"] if os.environ.get(submission.PATH_ENV) else []
        if submission._DSL_IMPORT_ERROR is not None:
            why.append(f"the CuTe DSL does not import: {submission._DSL_IMPORT_ERROR!r}")
        pytest.fail(f"{_this_gpu()} must run the {native} kernel, but custom_kernel takes the {path} path"
                    f" ({'; '.join(why) or 'reason unknown'})")
    return path


@pytest.fixture
def kernel_path() -> str:
    """required_path() for a test of the kernel itself: skips only on an architecture that
    has no kernel here."""
    path = required_path()
    if path is None:
        pytest.skip(f"no CuTe DSL kernel for {_this_gpu()}")
    return path
