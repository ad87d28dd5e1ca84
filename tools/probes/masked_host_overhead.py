"""Host time of a warm eager call of the MoE op (nvfp4_gemm.grouped_mm_masked with `out`),
per moe_bench.py case, and its pieces.

On a GPU this times the real path: the device's masked kernel runner and its two launches,
the GPU idle before each call (a synchronize outside the timed region, as moe_bench.py's
host times), beside the floor of two launches from Python measured in the same run
(torch.cuda._sleep, host_overhead.launch_floor_us). Without a GPU the runner's kernel steps
are stubbed (a fake config, launchers that do nothing) on CPU tensors of the case's shapes,
so the figure is the op's Python alone: the entry point, the checks, the runner's lookups.

    python tools/probes/masked_host_overhead.py                 # every case, 2000 calls each
    python tools/probes/masked_host_overhead.py --cases decode64 --calls 500 --json host.json

Columns, microseconds a call, the median over the calls:
  call         grouped_mm_masked(a, sfa, b, sfb, masked_m, out, expected_m=hi)
  torch.ops    the same call through the registered op (torch.ops.nvfp4_gemm.
               grouped_mm_masked_out), as torch.compile, export or a profiler makes it
  checks       moe.check_masked_args on the call's tensors (what a warm call runs)
  full checks  moe._check_masked_args: every check, as a call with new metadata runs them
  direct ok    moe._direct_call_ok: whether the entry point may skip the dispatcher
  runner       the runner's run (entry lookup, capture and queue checks, both launches)
  2 launches   (GPU only) twice the launch floor: the least two launches from Python cost
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
import types
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _parser() -> argparse.ArgumentParser:
    from tools.moe_bench import CASES

    ap = argparse.ArgumentParser(prog="tools/probes/masked_host_overhead.py", description=__doc__.split("\n\n")[0],
                                 epilog="Without a GPU the kernel's compile and launches are stubbed.")
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)} (default: all)")
    ap.add_argument("--calls", type=int, default=2000, help="timed calls per figure (default 2000)")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--k", type=int, default=7168)
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    return ap


def per_call_us(torch, fns: dict, calls: int) -> dict:
    """Median host time of one call of each of fns (key -> callable), taken in turns (one
    call of each a round, so that the host's noise falls on all alike), the GPU (where
    there is one) idle before each."""
    cuda = torch.cuda.is_available()
    for fn in fns.values():
        for _ in range(20):
            fn()
    times = {name: [] for name in fns}
    for _ in range(calls):
        for name, fn in fns.items():
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    if cuda:
        torch.cuda.synchronize()
    return {name: statistics.median(t) * 1e6 for name, t in times.items()}


def stub_operands(torch, groups: int, max_m: int, n: int, k: int):
    """The op's tensors for these sizes on the CPU, uninitialized (only their metadata is
    read): a, sfa, b, sfb in the contract's layouts, masked_m, out."""
    from nvfp4_gemm.moe import stacked_scale_shape, stacked_scale_strides

    def blocked(rows):  # the contract's dense stacked layout
        return torch.empty_strided(stacked_scale_shape(rows, k, groups), stacked_scale_strides(rows, k),
                                   dtype=torch.float8_e4m3fn)

    fp4 = torch.float4_e2m1fn_x2
    a = torch.empty((groups, max_m, k // 2), dtype=torch.uint8).view(fp4)
    b = torch.empty((groups, n, k // 2), dtype=torch.uint8).view(fp4)
    masked_m = torch.zeros(groups, dtype=torch.int32)
    out = torch.empty((groups, max_m, n), dtype=torch.float16)
    return (a, blocked(max_m), b, blocked(n), masked_m), out


def install_stub_runner(torch, moe):
    """A masked_runner.MaskedRunner whose kernel steps do nothing, as the CPU's kernel
    runner of the op: its entry lookup, capture check and queue lookup are the real ones."""
    from nvfp4_gemm import masked_runner

    @dataclasses.dataclass(frozen=True)
    class StubConfig:  # hashable, as a real config: it keys the runner's entries
        name: str = "stub"

    config = StubConfig()
    noop = lambda: None  # noqa: E731

    class StubRunner(masked_runner.MaskedRunner):
        KERNEL = "the stub kernel"

        def choose(self, p, expected_m):
            return config

        def refusal(self, p, *tensors):
            return None

        def launch_shape(self, cfg, p):
            return None

        def allocate(self, shape, cfg, p):
            return {"ptrs": torch.empty((p.groups, 5), dtype=torch.int64),
                    "desc_sizes": torch.empty((p.groups, 4), dtype=torch.int32)}

        def desc_sizes(self, shape):
            return (1, 1, 1, 1)

        def compile(self, cfg):
            return None

        def bind(self, kernels, shape, tables, queue):
            return noop, noop, noop

    runner = StubRunner(torch.device("cpu"), 132)
    # the CPU has no CUDA queue and no capture: what those lookups cost on a GPU is the
    # GPU run's to show
    masked_runner.current_queue = lambda device: 0
    torch.cuda.current_stream = lambda device=None: types.SimpleNamespace(cuda_stream=0)
    torch.cuda.is_current_stream_capturing = lambda: False
    masked_runner.outside_graph_pools = lambda make, device: make()
    moe._kernel_runner = lambda device: runner
    moe._IMPLS["cpu"] = moe._device_into
    return runner


def case_calls(torch, moe, case, n: int, k: int, runner) -> dict:
    """The figures' callables of one case (column name -> callable), after one warm call
    that must take the kernel runner."""
    from tools.moe_bench import build_case

    if torch.cuda.is_available():
        _, _, args, _ = build_case(torch, case, n, k, seed=7)
        out = torch.zeros((case.groups, case.hi, n), dtype=torch.float16, device="cuda")
    else:
        args, out = stub_operands(torch, case.groups, case.hi, n, k)
    a, sfa, b, sfb, masked_m = args

    def call():
        moe.grouped_mm_masked(a, sfa, b, sfb, masked_m, out, expected_m=case.hi)

    with warnings.catch_warnings():  # a kernel that fell back to the torch path is no figure
        warnings.simplefilter("error")
        call()
    p = moe.check_masked_args(a, sfa, b, sfb, masked_m, out, case.hi)
    runner = runner or moe._kernel_runner(p.device)
    ops = torch.ops.nvfp4_gemm
    fns = {"call": call,
           "torch.ops": lambda: ops.grouped_mm_masked_out(a, sfa, b, sfb, masked_m, out, expected_m=case.hi),
           "checks": lambda: moe.check_masked_args(a, sfa, b, sfb, masked_m, out, case.hi),
           "direct ok": lambda: moe._direct_call_ok((a, sfa, b, sfb, masked_m, out))}
    full = getattr(moe, "_check_masked_args", None)  # (absent before the checks' cache)
    if full is not None:
        fns["full checks"] = lambda: full(a, sfa, b, sfb, masked_m, out)
    if runner is not None:
        fns["runner"] = lambda: runner.run(a, sfa, b, sfb, masked_m, out, p, case.hi)
    return fns


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from tools.moe_bench import CASES

    names = [c for c in args.cases.split(",") if c]
    if not names or any(c not in CASES for c in names):
        _parser().error(f"unknown case in {args.cases!r}: choose from {', '.join(CASES)}")
    import torch

    from nvfp4_gemm import moe

    gpu = torch.cuda.is_available()
    runner = None if gpu else install_stub_runner(torch, moe)
    report = {"device": torch.cuda.get_device_name() if gpu else "cpu (kernel steps stubbed)", "rows": []}
    if gpu:
        from tools.probes.host_overhead import launch_floor_us
        report["2 launches"] = 2 * launch_floor_us(args.calls)
    # every case's figures in one set of turns, so that a slow stretch of the host falls
    # on all of them alike
    fns = {(name, col): fn for name in names
           for col, fn in case_calls(torch, moe, CASES[name], args.n, args.k, runner).items()}
    times = per_call_us(torch, fns, args.calls)
    for name in names:
        case = CASES[name]
        report["rows"].append({"case": name, "groups": case.groups, "max_m": case.hi,
                               **{col: us for (row, col), us in times.items() if row == name}})
    cols = ["call", "torch.ops", "checks", "full checks", "direct ok", "runner"]
    print(f"{report['device']}; microseconds a call, median of {args.calls}"
          + (f"; two launches' floor {report['2 launches']:.1f}" if gpu else ""))
    print("| case | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for r in report["rows"]:
        print(f"| {r['case']} | " + " | ".join(f"{r[c]:.1f}" if c in r else "-" for c in cols) + " |")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
