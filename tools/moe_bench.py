"""The mixture-of-experts op (nvfp4_gemm.grouped_mm_masked) timed on a GPU against the
leaderboard path and the peers a user would pick, in one process, beside the case's bytes at
the bandwidth measured in the same run. Needs a CUDA GPU: without one it says so and exits 2.

    python tools/moe_bench.py                                  # every case, 20 rounds
    python tools/moe_bench.py --cases decode64,prefill8 --rounds 50 --json moe.json

Cases (N = 4096, K = 7168 unless --n / --k): decode8, decode32, decode64 (G groups of 1-8
tokens, max_m = 8) and prefill8 (8 groups of 64-512 tokens, max_m = 512). Each group's token
count is drawn at random in the case's range (--seed); the operands are
reference.generate_input's for those counts (the leaderboard's data), and the op gets the same
values stacked: a [G, max_m, K/2] (rows past a group's count zero), b [G, N, K/2], the scales
in the blocked layout with L = G, masked_m the counts.

Columns, in microseconds, the median over rounds (every variant once a round, the order
rotated each round):
  op             grouped_mm_masked(..., out=out), called eagerly: GPU time of one call
  graph          the same call captured once in a torch.cuda.CUDAGraph: GPU time of a replay
  op torch path  the op's torch path (moe._cuda_into: decode to fp16, cuBLAS bmm), which
                 runs where no kernel takes the call
  leaderboard    nvfp4_gemm.custom_kernel on the per-group lists, the same tensors each call
                 (its warm path; the CuTe DSL kernel on sm_90 and sm_100)
  grouped_mm     torch._grouped_mm on operands decoded to bf16 beforehand (exact: 6
                 significant bits a value), the tokens stacked, offs on the GPU; bf16 out
  decode+cuBLAS  the kit's fp16 fallback on the per-group lists (torch_paths.run_torch_fp16:
                 the FP4 row decoder, then a cuBLAS fp16 GEMM per group)
  fp16 bmm       cuBLAS fp16 bmm on [G, max_m, K] x [G, K, N] operands decoded beforehand
  bytes bound    the case's bytes (A and B in FP4 with their blocked scales, C in fp16,
                 eval.bytes_of) at the bandwidth of eval.measure_bandwidth, this run
and the host's time per call: of the op, of a graph replay, and of the leaderboard path.

GPU times: L2 flushed before every timed call (utils.clear_l2_cache writes 256 MiB), then a
spin kernel holds the GPU while the host queues the call, so the CUDA events around the call
time the GPU's work rather than the host's launches. Host times: perf_counter around one
call with the GPU idle, the median of 20. Before timing, the op's result is checked against
the leaderboard path's (rtol = atol = 1e-3) and the graph's against the op's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@dataclasses.dataclass(frozen=True)
class MoeCase:
    """G groups whose token counts are drawn in lo .. hi; max_m = hi."""

    name: str
    groups: int
    lo: int
    hi: int


CASES = {c.name: c for c in (
    MoeCase("decode8", 8, 1, 8),
    MoeCase("decode32", 32, 1, 8),
    MoeCase("decode64", 64, 1, 8),
    MoeCase("prefill8", 8, 64, 512),
)}
HOST_REPS = 20
RTOL = ATOL = 1e-3


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Needs a CUDA GPU (and the CuTe DSL for the leaderboard path's kernel).",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=",".join(CASES),
                        help=f"comma-separated case names, of {', '.join(CASES)} (default: all)")
    parser.add_argument("--rounds", type=int, default=20, help="timed rounds per case (default 20)")
    parser.add_argument("--n", type=int, default=4096, help="N, the experts' output width (default 4096)")
    parser.add_argument("--k", type=int, default=7168, help="K, the depth (default 7168)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the token counts and values")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    names = [c for c in args.cases.split(",") if c]
    unknown = [c for c in names if c not in CASES]
    if unknown or not names:
        parser.error(f"unknown case {unknown}: choose from {', '.join(CASES)}")
    args.cases = [CASES[c] for c in names]
    return args


class GpuTimer:
    """GPU time of one call: L2 flushed, a spin kernel long enough for the host to queue the
    whole call behind it, CUDA events around the call."""

    def __init__(self, torch, clear_l2_cache):
        self.torch, self.clear_l2_cache = torch, clear_l2_cache
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cycles = 20_000_000
        torch.cuda._sleep(cycles)  # the clocks up before the calibration
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        self.cycles_per_us = cycles / (start.elapsed_time(end) * 1e3)

    def time_us(self, fn, host_us: float) -> float:
        torch = self.torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        self.clear_l2_cache()
        torch.cuda._sleep(int((2 * host_us + 200) * self.cycles_per_us))
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3


def host_us(torch, fn, reps: int = HOST_REPS) -> float:
    """Median host time of one call, the GPU idle before each."""
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return statistics.median(times) * 1e6


def build_case(torch, case: MoeCase, n: int, k: int, seed: int, device: str = "cuda"):
    """(counts, the leaderboard's per-group data, the op's stacked operands (a, sfa, b, sfb,
    masked_m), the same values decoded to fp16 as (a16 [G, max_m, K], b16 [G, N, K])), all on
    `device`, where reference.generate_input makes its tensors (the GPU when there is one)."""
    import reference
    from nvfp4_gemm import moe

    rng = random.Random(seed)
    counts = [rng.randint(case.lo, case.hi) for _ in range(case.groups)]
    g_count, max_m = case.groups, case.hi
    data = reference.generate_input(m=tuple(counts), n=(n,) * g_count, k=(k,) * g_count, g=g_count, seed=seed)
    abc, sfs, _, _ = data
    a = torch.zeros((g_count, max_m, k // 2), dtype=torch.uint8, device=device)
    sfa_rows = torch.ones((max_m, k // 16, g_count), dtype=torch.int8).to(torch.float8_e4m3fn)
    for g, m in enumerate(counts):
        a[g, :m] = abc[g][0][:, :, 0].view(torch.uint8)
        sfa_rows[:m, :, g] = sfs[g][0][:, :, 0]
    b = torch.stack([t[1][:, :, 0].view(torch.uint8) for t in abc])
    sfb_rows = torch.stack([s[1][:, :, 0] for s in sfs], dim=2)
    sfa = reference.create_reordered_scale_factor_tensor(g_count, max_m, k, sfa_rows, device)
    sfb = reference.create_reordered_scale_factor_tensor(g_count, n, k, sfb_rows, device)
    fp4 = torch.float4_e2m1fn_x2
    masked_m = torch.tensor(counts, dtype=torch.int32, device=device)
    op_args = (a.view(fp4), sfa, b.view(fp4), sfb, masked_m)
    table = moe._pair_table(a.device)
    a16 = moe._decode_f16(op_args[0], sfa, k, table)
    b16 = torch.cat([moe._decode_f16(op_args[2][i:i + 8], sfb[..., i:i + 8], k, table)
                     for i in range(0, g_count, 8)])
    return counts, data, op_args, (a16, b16)


def run_case(torch, ceilings, timer: GpuTimer, case: MoeCase, n: int, k: int, seed: int, rounds: int,
             gbps: float) -> dict:
    import nvfp4_gemm
    from nvfp4_gemm import inputs, torch_paths

    counts, data, op_args, (a16, b16) = build_case(torch, case, n, k, seed)
    g_count, max_m = case.groups, case.hi
    out = torch.zeros((g_count, max_m, n), dtype=torch.float16, device="cuda")
    row = {"case": case.name, "groups": g_count, "tokens": sum(counts), "counts": counts, "n": n, "k": k}

    def op():
        nvfp4_gemm.grouped_mm_masked(*op_args, out, expected_m=case.hi)

    def leaderboard():
        nvfp4_gemm.custom_kernel(data)

    fallback_data = ([(a, b, torch.empty_like(c)) for a, b, c in data[0]], data[1], data[2], data[3])
    fallback_problem = inputs.validate_inputs(fallback_data)

    def decode_cublas():
        torch_paths.run_torch_fp16(fallback_data, fallback_problem)

    b16_t = b16.transpose(1, 2)  # [G, K, N], column-major: cuBLAS reads it transposed

    def fp16_bmm():
        torch.bmm(a16, b16_t)

    from nvfp4_gemm import moe
    problem = moe.check_masked_args(*op_args, out)

    def op_torch():
        moe._cuda_into(*op_args, out, problem)

    variants = {"op": op, "op torch path": op_torch, "leaderboard": leaderboard, "decode+cuBLAS": decode_cublas,
                "fp16 bmm": fp16_bmm}
    notes = []
    try:  # torch's grouped GEMM: bf16 operands, the tokens stacked and offs on the GPU
        a_tokens = torch.cat([a16[g, :m] for g, m in enumerate(counts)]).to(torch.bfloat16)
        b_bf16_t = b16.to(torch.bfloat16).transpose(1, 2)
        offs = torch.tensor(counts, dtype=torch.int32, device="cuda").cumsum(0, dtype=torch.int32)
        torch._grouped_mm(a_tokens, b_bf16_t, offs=offs, out_dtype=torch.bfloat16)

        def grouped_mm():
            torch._grouped_mm(a_tokens, b_bf16_t, offs=offs, out_dtype=torch.bfloat16)

        variants["grouped_mm"] = grouped_mm
    except (AttributeError, RuntimeError, TypeError, ValueError) as e:
        notes.append(f"torch._grouped_mm: {type(e).__name__}: {str(e).splitlines()[0][:160]}")

    # first calls (compiles, caches, tables) and the checks, outside the timed region
    for fn in variants.values():
        fn()
    torch.cuda.synchronize()
    runner = moe._RUNNERS.get(torch.cuda.current_device())
    mine = [e for e in (runner.entries.values() if runner is not None else ())
            if (e.grid.groups, e.grid.max_m, e.grid.n, e.grid.k) == (g_count, max_m, n, k)]
    row["op_path"] = "sm90 kernel" if mine else "torch"
    if mine:
        row["op_config"] = mine[-1].config.name
    op()
    torch.cuda.synchronize()
    leaderboard_out = nvfp4_gemm.custom_kernel(data)
    worst = 0.0
    for g, m in enumerate(counts):
        got, want = out[g, :m].float(), leaderboard_out[g][:, :, 0].float()
        if not torch.allclose(got, want, rtol=RTOL, atol=ATOL):
            notes.append(f"op differs from the leaderboard path in group {g}")
        worst = max(worst, float((got - want).abs().max()) if m else 0.0)
    row["max_abs_diff_vs_leaderboard"] = worst

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        op()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    expected = out.clone()
    out.zero_()
    with torch.cuda.graph(graph):
        op()
    graph.replay()
    torch.cuda.synchronize()
    if not torch.equal(out.view(torch.int16), expected.view(torch.int16)):
        notes.append("the graph's replay differs from the eager call")
    variants["graph"] = graph.replay

    hosts = {name: host_us(torch, fn) for name, fn in variants.items()}
    times: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            times[name].append(timer.time_us(variants[name], hosts[name]))
    row["gpu_us"] = {name: statistics.median(t) for name, t in times.items()}
    row["host_us"] = hosts
    args = {"m": counts, "n": [n] * g_count, "k": [k] * g_count}
    row["bytes"] = ceilings.bytes_of(args)
    row["bytes_bound_us"] = row["bytes"] / (gbps * 1e9) * 1e6
    row["flops"] = ceilings.flops_of(args)
    row["notes"] = notes
    del graph
    return row


def _us(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.1f}"


def tables(rows: list[dict], device: str, bandwidth: str) -> str:
    gpu_cols = ["op", "graph", "op torch path", "leaderboard", "grouped_mm", "decode+cuBLAS", "fp16 bmm"]
    lines = [f"GPU time per call, us (median; {device}; bandwidth: {bandwidth})", "",
             "| case | G | tokens | " + " | ".join(gpu_cols) + " | bytes bound | op / leaderboard | "
             "op / bound | leaderboard / bound | op TFLOP/s |",
             "|---|---:|---:|" + "---:|" * (len(gpu_cols) + 5)]
    for r in rows:
        t = r["gpu_us"]
        bound = r["bytes_bound_us"]
        lines.append(f"| {r['case']} | {r['groups']} | {r['tokens']} | "
                     + " | ".join(_us(t.get(c)) for c in gpu_cols)
                     + f" | {bound:,.1f} | {t['op'] / t['leaderboard']:.2f}x | {t['op'] / bound:.2f}x | "
                     f"{t['leaderboard'] / bound:.2f}x | {r['flops'] / t['op'] / 1e6:.1f} |")
    lines += ["", "Host time per call, us (median of 20, the GPU idle)", "",
              "| case | op | graph replay | leaderboard |", "|---|---:|---:|---:|"]
    for r in rows:
        h = r["host_us"]
        lines.append(f"| {r['case']} | {_us(h['op'])} | {_us(h['graph'])} | {_us(h['leaderboard'])} |")
    lines += ["", "The op's path: " + "; ".join(f"{r['case']} {r['op_path']} {r.get('op_config', '')}".rstrip()
                                             for r in rows)]
    notes = [f"- {r['case']}: {note}" for r in rows for note in r["notes"]]
    if notes:
        lines += ["", "Notes:", *notes]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("tools/moe_bench.py needs a CUDA GPU; torch sees none", file=sys.stderr)
        return 2
    from harness import ceilings
    from nvfp4_gemm import dispatch
    from utils import clear_l2_cache

    device = torch.cuda.get_device_name()
    path = dispatch.select_path(torch.device("cuda"))
    gbps, bandwidth = ceilings.measure_bandwidth()
    torch.cuda.empty_cache()
    timer = GpuTimer(torch, clear_l2_cache)
    print(f"{device}; the leaderboard path takes the {path} path; {args.rounds} rounds a case", flush=True)
    rows = []
    for case in args.cases:
        rows.append(run_case(torch, ceilings, timer, case, args.n, args.k, args.seed, args.rounds, gbps))
        print(f"{case.name}: done", flush=True)
        torch.cuda.empty_cache()
    print()
    print(tables(rows, f"{device}, leaderboard path {path}", f"{gbps:,.0f} GB/s, {bandwidth}"))
    if args.json:
        args.json.write_text(json.dumps({"device": device, "path": path, "gbps": gbps, "bandwidth": bandwidth,
                                         "rounds": args.rounds, "cases": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
