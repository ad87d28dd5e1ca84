"""Reliability: soak with bounded memory, clear fallbacks, forced paths."""

import subprocess
import sys
import warnings

import pytest
import torch
from cases import ROOT

from nvfp4_gemm import common, dispatch


@pytest.fixture
def stubbed_runner(monkeypatch):
    """submission.py with the stubbed kernel (install_stub changes that module: its path
    table, backends, runners and get_runner), every change undone after the test. Yields
    a function giving the stub runner's launches so far."""
    import submission
    from tools.probes.host_overhead import install_stub

    monkeypatch.setattr(submission, "_BACKENDS", dict(submission._BACKENDS))
    monkeypatch.setattr(submission, "_device_paths", {})
    monkeypatch.setattr(submission, "_runners", {})
    monkeypatch.setattr(submission, "_last_runner", None)
    monkeypatch.setattr(submission, "get_runner", submission.get_runner)
    install_stub(submission)
    yield lambda: sum(runner.launches for runner in submission._runners.values())


@pytest.mark.slow
def test_soak_10000_calls_keeps_memory_bounded(stubbed_runner):
    from soak import soak

    result = soak(10_000, check_every=0)
    caches = result["cache_sizes"][0]
    assert caches["calls"] <= 64 and caches["pointers"] <= 64 and caches["schedules"] <= 64
    assert caches["compiled"] <= 16
    # Python-level host memory: no per-call growth (10,000 calls, well under 100 bytes each).
    assert result["host_python_bytes_growth"] < 1_000_000, result


def test_new_sizes_sequence_reports_the_collectors_share(stubbed_runner):
    """tools/probes/host_overhead.py --new-sizes-sequence on the stubbed kernel: every call counted,
    the order statistics in order, and collections reported per generation with their
    time (some must run: 20 calls with new inputs each allocate past gen 0's threshold)."""
    from tools.probes.host_overhead import new_sizes_sequence

    r = new_sizes_sequence(20, n=256, k=512)
    assert stubbed_runner() == 1 + 20
    assert 0 < r["median_us"] <= r["p99_us"] <= r["max_us"] and r["mean_us"] <= r["max_us"]
    assert r["gc"] and all(v["collections"] > 0 and v["ms"] >= 0 for v in r["gc"].values())
    assert set(r["gc"]) <= {"gen0", "gen1", "gen2"}


def test_new_sizes_sequence_at_decode_sizes(stubbed_runner):
    """The decode-step sequence (G = 64, M 1..8) runs on the stubbed kernel and reports its
    order statistics in order."""
    from tools.probes.host_overhead import new_sizes_sequence

    r = new_sizes_sequence(10, n=256, k=512, g=64, m_range=(1, 8))
    assert 0 < r["median_us"] <= r["p99_us"] <= r["max_us"]
    assert stubbed_runner() == 1 + 10  # the set-up call and each timed one launched the kernel


def test_import_without_the_dsl_and_compute_exactly():
    code = (
        "import sys; sys.modules['cutlass'] = None\n"
        "import submission, reference\n"
        "assert submission._DSL_IMPORT_ERROR is not None\n"
        "d = reference.generate_input(m=(5,), n=(128,), k=(256,), g=1, seed=1)\n"
        "out = submission.custom_kernel(d)[0].clone()\n"
        "ref = reference.ref_kernel(d)[0]\n"
        "assert torch.equal(out, ref)\n".replace("torch.equal", "__import__('torch').equal")
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def _decide(monkeypatch, capability, requested, dsl_error=None):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(dispatch, "_DSL_IMPORT_ERROR", dsl_error)
    common._warned.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        path = dispatch._decide_path(torch.device("cuda", 0), requested)
    return path, [str(w.message) for w in caught]


@pytest.mark.parametrize(
    "capability,requested,expected,warns",
    [
        ((10, 0), "auto", "sm100", False),
        ((9, 0), "auto", "sm90", False),
        ((8, 0), "auto", "torch", False),
        ((12, 0), "auto", "torch", False),
        ((9, 0), "sm100", "torch", True),
        ((10, 0), "sm90", "torch", True),
        ((9, 0), "torch", "torch", False),
        ((10, 0), "sm100", "sm100", False),
    ],
)
def test_path_decision(monkeypatch, capability, requested, expected, warns):
    path, messages = _decide(monkeypatch, capability, requested)
    assert path == expected
    assert bool(messages) == warns and len(messages) <= 1


def test_missing_dsl_on_a_hopper_gpu_warns_and_runs_exact(monkeypatch):
    path, messages = _decide(monkeypatch, (9, 0), "auto", ImportError("No module named 'cutlass'"))
    assert path == "torch"
    assert len(messages) == 1 and "CuTe DSL (nvidia-cutlass-dsl) is missing" in messages[0]
