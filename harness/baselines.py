"""torch baselines for a benchmark case (--baselines), timed like the submission by
timing.time_calls, and what they say about the measured ceilings: a dense GEMM baseline
faster than the peak raises it, and a baseline under its roofline is noted."""

from __future__ import annotations

import dataclasses

import torch

from harness.ceilings import Roofline, _set_roofline
from harness.specs import TestCase
from harness.timing import Stats, _benchmark_inputs, time_calls


def _dequantized(data, dtype=torch.bfloat16):
    """Per group (A, B) as bf16 or fp16 (both exact: every FP4 x E4M3 value has at most 6
    significant bits and lies within fp16's normal range), for the pre-dequantized
    baselines."""
    from submission import _dequantize_rows

    abc, _, sfr, sizes = data
    out = []
    for (a, b, _), (sfa, sfb), (_, _, k, _) in zip(abc, sfr, sizes):
        out.append(
            (
                _dequantize_rows(a[:, :, 0], sfa, k).to(dtype),
                _dequantize_rows(b[:, :, 0], sfb, k).to(dtype),
            )
        )
    return out


# Names of the baselines that peak_with_baselines and the notes treat apart
PER_GROUP_BASELINE = "fp16 mm per group"
STACKED_BASELINE = "fp16 mm stacked"  # reads one group's weights
GROUPED_MM_BASELINE = "torch._grouped_mm bf16 (pre-dequantized)"
EXACT_PATH_BASELINE = "torch exact path"  # on a CPU, the code the submission runs


def _dense_fp16_baselines(data_list) -> dict:
    """cuBLAS fp16 on the pre-dequantized operands, timed like the submission: one torch.mm
    per group, and, where every group has the same N and K, one torch.mm of the groups'
    stacked A against group 0's B (the same FLOPs in one dense GEMM that reads 1/G of the
    weights: a best case for a dense GEMM of this size, not a grouped GEMM)."""
    results = {}
    per_group = [_dequantized(data, torch.float16) for data in data_list]
    stats = time_calls(lambda pairs: [a @ b.T for a, b in pairs], per_group, False, None, 50, 2e9)
    results[PER_GROUP_BASELINE] = stats.mean if isinstance(stats, Stats) else None
    if len({(n, k) for _, n, k, _ in data_list[0][3]}) == 1:
        stacked = [(torch.cat([a for a, _ in pairs]), pairs[0][1].T) for pairs in per_group]
        stats = time_calls(lambda x: x[0] @ x[1], stacked, False, None, 50, 2e9)
        results[STACKED_BASELINE] = stats.mean if isinstance(stats, Stats) else None
    return results


def _run_baselines(test: TestCase) -> dict:
    """torch._grouped_mm on pre-dequantized bf16 (dequantization untimed), the exact torch
    path and, on CUDA, cuBLAS fp16 on pre-dequantized operands and our own fp16 fallback
    (the FP4 decode, then cuBLAS, both timed), timed like the submission."""
    from submission import run_torch_exact, run_torch_fp16, validate_inputs

    data_list = _benchmark_inputs(test)
    results = {}

    def exact(data):
        return run_torch_exact(data, validate_inputs(data))

    stats = time_calls(exact, data_list, False, None, 10, 2e9)
    results[EXACT_PATH_BASELINE] = stats.mean if isinstance(stats, Stats) else None

    if torch.cuda.is_available() and hasattr(torch, "_grouped_mm"):
        grouped = []
        for data in data_list:
            pairs = _dequantized(data)
            a_cat = torch.cat([a for a, _ in pairs])
            b_stack = torch.stack([b for _, b in pairs]).transpose(1, 2)  # (G, K, N) column-major
            ms = torch.tensor([a.shape[0] for a, _ in pairs], device="cuda")
            grouped.append((a_cat, b_stack, torch.cumsum(ms, 0).to(torch.int32)))
        try:
            stats = time_calls(
                lambda x: torch._grouped_mm(x[0], x[1], offs=x[2], out_dtype=torch.bfloat16),
                grouped,
                False,
                None,
                50,
                2e9,
            )
            results[GROUPED_MM_BASELINE] = stats.mean
        except RuntimeError as e:
            results[GROUPED_MM_BASELINE] = f"unavailable: {e}"
    if torch.cuda.is_available():
        results.update(_dense_fp16_baselines(data_list))

        def fallback(data):
            return run_torch_fp16(data, validate_inputs(data))

        stats = time_calls(fallback, data_list, False, None, 20, 2e9)
        results["our fp16 fallback (decode + cuBLAS)"] = stats.mean if isinstance(stats, Stats) else None
    return results


# Baselines that do less than the case: their roofline is the FLOPs bound alone
FLOPS_ONLY_BASELINES = (STACKED_BASELINE,)  # reads group 0's B only (_dense_fp16_baselines)


# Baselines that are one dense tensor-core GEMM per call or per group: the peak is at least
# their rate (peak_with_baselines)
DENSE_GEMM_BASELINES = (PER_GROUP_BASELINE, STACKED_BASELINE, GROUPED_MM_BASELINE)


def peak_with_baselines(results: list[dict], roof: Roofline) -> Roofline:
    """The roofline with its peak raised to the fastest dense-GEMM baseline of the run where
    one beat the ceiling's GEMMs, and every result's roofline and bound recomputed with it:
    the peak is the best dense GEMM rate measured in the run, so no cuBLAS call beats it.
    (With the cases' own stacked GEMMs among the ceiling's, cuBLAS stacked still read up
    to 0.3 % over it: python eval.py benchmark --baselines tools/regime_specs.txt on
    2d27def's kernels.)"""
    best, where = roof.tflops, None
    for r in results:
        for name in DENSE_GEMM_BASELINES:
            ns = r.get("baselines", {}).get(name)
            if isinstance(ns, (int, float)) and ns > 0 and r.get("flops"):
                rate = r["flops"] / ns / 1e3  # FLOPs per ns / 1e3 = TFLOP/s
                if rate > best:
                    best, where = rate, f"{name} on {r['case']}"
    if where is None:
        return roof
    roof = dataclasses.replace(roof, tflops=best, label=f"{roof.label}; raised to the rate of {where}")
    for r in results:
        if "flops" in r:
            _set_roofline(r, roof)
    return roof


def _below_roofline_notes(results: list[dict], roof: Roofline) -> list[str]:
    """A baseline faster than the roofline means a measured ceiling is too low: a baseline
    does the case's FLOPs and moves at least its bytes (the stacked GEMM, which reads 1/G of
    the weights, is held to the FLOPs bound only)."""
    notes = []
    for r in results:
        for name, ns in r.get("baselines", {}).items():
            if not isinstance(ns, (int, float)):
                continue
            bound_us = r["roofline_us"]
            if name in FLOPS_ONLY_BASELINES:
                bound_us = r["flops"] / (roof.tflops * 1e6)
            if ns / 1e3 < bound_us:
                notes.append(
                    f"note: {name} took {ns / 1e3:.2f} us on {r['case']}, under its roofline "
                    f"of {bound_us:.2f} us: the measured ceiling is too low"
                )
    return notes
