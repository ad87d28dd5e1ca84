"""Helpers of the leaderboard's utils.py (same names and behaviour), usable without CUDA.

`verbose_allclose` fails on any element outside `atol + rtol * |expected|` and on NaN or
inf mismatches, and lists the first mismatched coordinates, as the leaderboard does.
The L2-flush helpers are no-ops without CUDA.
"""

import os
import random

import numpy as np
import torch


def set_seed(seed=42):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed(seed)
        torch.cuda.manual_seed_all(seed)


def get_device(use_cuda: bool = True) -> torch.device:
    """The GPU when there is one, else the CPU."""
    if use_cuda:
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
    return torch.device("cpu")


def _mismatch_report(mismatched: torch.Tensor, received, expected, max_print: int) -> list[str]:
    num_mismatched = int(mismatched.count_nonzero().item())
    if num_mismatched == 0:
        return []
    details = [f"Number of mismatched elements: {num_mismatched}"]
    for index in torch.nonzero(mismatched)[:max_print]:
        i = tuple(index.tolist())
        details.append(f"ERROR AT {i}: {received[i]} {expected[i]}")
    if num_mismatched > max_print:
        details.append(f"... and {num_mismatched - max_print} more mismatched elements.")
    return details


@torch.no_grad()
def verbose_allclose(
    received: torch.Tensor, expected: torch.Tensor, rtol=1e-05, atol=1e-08, max_print=5
) -> list[str]:
    """Element-wise closeness within `atol + rtol*|expected|`; NaN/inf must match exactly.

    Returns an empty list when all elements match, else lines describing the mismatches.
    """
    if received.shape != expected.shape:
        return ["SIZE MISMATCH"]
    received = received.to(expected.device)
    diff = torch.abs(received - expected)
    tolerance = atol + rtol * torch.abs(expected)
    mismatched = (
        (diff > tolerance)
        | torch.logical_xor(torch.isnan(received), torch.isnan(expected))
        | torch.logical_xor(torch.isposinf(received), torch.isposinf(expected))
        | torch.logical_xor(torch.isneginf(received), torch.isneginf(expected))
    )
    return _mismatch_report(mismatched, received, expected, max_print)


@torch.no_grad()
def verbose_allequal(received: torch.Tensor, expected: torch.Tensor, max_print: int = 5):
    """Element-wise equality; returns mismatch lines as verbose_allclose does."""
    received = received.to(expected.device)
    return _mismatch_report(torch.not_equal(received, expected), received, expected, max_print)


def match_reference(data, output, reference: callable, rtol=1e-05, atol=1e-08) -> tuple[bool, str]:
    """The leaderboard's default `check_implementation`."""
    expected = reference(data)
    if len(output) != len(expected):
        return False, f"output length mismatch: got {len(output)}, expected {len(expected)}"
    for i, (output_i, expected_i) in enumerate(zip(output, expected)):
        reasons = verbose_allclose(output_i, expected_i, rtol=rtol, atol=atol)
        if len(reasons) > 0:
            return (
                False,
                f"mismatch found! custom implementation doesn't match reference: {i} {reasons}",
            )
    return True, ""


def make_match_reference(reference: callable, **kwargs):
    def wrapped(data, output):
        return match_reference(data, output, reference=reference, **kwargs)

    return wrapped


class DeterministicContext:
    def __init__(self):
        self.allow_tf32 = None
        self.deterministic = None
        self.cublas = None

    def __enter__(self):
        self.cublas = os.environ.get("CUBLAS_WORKSPACE_CONFIG", "")
        self.allow_tf32 = torch.backends.cudnn.allow_tf32
        self.deterministic = torch.backends.cudnn.deterministic
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.deterministic = True
        torch.use_deterministic_algorithms(True)
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        torch.backends.cudnn.allow_tf32 = self.allow_tf32
        torch.backends.cudnn.deterministic = self.deterministic
        torch.use_deterministic_algorithms(False)
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = self.cublas


def clear_l2_cache():
    """Evict L2 by writing 256 MiB (no-op without CUDA)."""
    if not torch.cuda.is_available():
        return
    dummy = torch.empty((32, 1024, 1024), dtype=torch.int64, device="cuda")
    dummy.fill_(42)
    del dummy


def clear_l2_cache_large():
    """The leaderboard's flush before each timed repeat: a 64 GiB random fill (no-op without
    CUDA). Devices with less free memory get the largest fill that fits, above 1 GiB."""
    if not torch.cuda.is_available():
        return
    free, _ = torch.cuda.mem_get_info()
    rows = min(16000, max(256, (free // 2) // (1024 * 1024 * 4)))
    dummy = torch.randn((rows, 1024, 1024), device="cuda")
    del dummy
