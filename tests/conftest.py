"""Shared test setup: the project root on sys.path, hardware markers, small cases."""

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
