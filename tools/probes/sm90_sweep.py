"""Times Hopper kernel configs on the four benchmark shapes with the leaderboard's timing
(15 inputs per shape, L2 flushed, one event pair around the 15 calls) and checks each
result against the exact reference once. For config experiments on the H200:

    python tools/probes/sm90_sweep.py "tile_n=256,stages=4" "narrow=96/64" "narrow=" ...
    python tools/probes/sm90_sweep.py --module old/submission.py ""     # another submission.py
    python tools/probes/sm90_sweep.py --kernel-time ""                   # + per-call GPU time
    python tools/probes/sm90_sweep.py --spec-file tools/regime_specs.txt --shapes 6,7,8 "auto" ...

--kernel-time adds, per shape, the GEMM kernel's own duration per call (CUDA activity of
torch.profiler over one round of the 15 calls), so that host-bound shapes show as such.

--no-decode times the kernels with the FP4 decode taken out (decode_e2m1_word passes its
word and scale through as the four f16x2 values): the results are wrong and not checked.
Without weights_early the time was what the kernel costs without its integer-pipe decode;
with it (tile_n 128 and the decode tile since b3f6497) the pass-through ran slower than
the real decode (docs/performance.md, "Regimes"), so there it bounds nothing.

--drain times the memory pipeline alone: the consumers wait for each packed stage and
release it at once (no decode, no wgmma, no epilogue: C is never written, results are
not checked), so the time is what the producer's TMA loads of the config's tiles take.
"""

import argparse
import importlib.util
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def load_submission(path: str | None):
    """The submission module, from `path` when given (registered as `submission`, so that
    the harness files import that one)."""
    if path:
        spec = importlib.util.spec_from_file_location("submission", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["submission"] = mod
        spec.loader.exec_module(mod)
    import submission

    return submission


def parse(S, spec: str):
    kw = {}
    for item in filter(None, spec.split(",")):
        key, value = item.split("=")
        key = key.strip()
        # tuple fields as slash-separated ints: narrow=96/64 (narrow= for none)
        kw[key] = tuple(int(v) for v in value.split("/") if v) if key == "narrow" else int(value)
    make = getattr(S, "make_sm90_config", None)  # absent in older submissions (--module)
    return make(**kw) if make and "stages" not in kw else S.Sm90Config(**kw)


def install_drain(S) -> None:
    """Replaces the Hopper kernel's consume_tile by a drain of the unit's packed stages."""
    cute, cutlass = S.cute, S.cutlass

    @cute.jit
    def drain_tile(self, u, rows: int, tidx, tiled_mma, tCrT, tCrW, tCrW32, tCcC, acc, storage,
                   ab_pipeline, tok_pipeline, states, mSizes, mPtrs, mUnits, tmaps_ptr, split, last_u):
        ahead, tok_w, tok_r = states
        for _kt in cutlass.range(mUnits[4, u] - mUnits[3, u], unroll=1):
            ab_pipeline.consumer_wait(ahead)
            self.release_stage(ab_pipeline, ahead)
            ahead.advance()
        return ahead, tok_w, tok_r

    S.Sm90Fp4GroupedGemm.consume_tile = drain_tile


def kernel_us_per_call(S, data_list) -> float:
    """Sum of the GEMM kernels' CUDA durations over one round of the calls, per call."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for data in data_list:
            S.custom_kernel(data)
        torch.cuda.synchronize()
    total = 0.0
    for e in prof.events():
        if e.device_type.name == "CUDA" and "Sm90" in e.name:
            total += e.device_time
    return total / len(data_list)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="Needs a Hopper (sm_90) GPU with the CuTe DSL.")
    ap.add_argument("specs", nargs="*", default=[""])
    ap.add_argument("--module", default=None, help="path of another submission.py to time")
    ap.add_argument("--kernel-time", action="store_true")
    ap.add_argument("--spec-file", default=None, help="cases from this spec file instead of task.yml's benchmarks")
    ap.add_argument("--shapes", default=None, help="indexes into the cases (default: all)")
    ap.add_argument("--no-decode", action="store_true", help="time without the FP4 decode (wrong results)")
    ap.add_argument("--drain", action="store_true", help="time the packed-stage loads alone (no results)")
    args = ap.parse_args()
    S = load_submission(args.module)
    if args.no_decode:
        S.decode_e2m1_word = lambda word, scale2, **_: [word, scale2, word, scale2]
    if args.drain:
        install_drain(S)

    import torch

    import reference
    from harness import ceilings, specs, timing
    from tests.cases import task_cases

    if args.spec_file:
        cases = [test.args for test in specs.read_spec_file(args.spec_file)]
    else:
        cases = [dict(case.args()) for case in task_cases("benchmarks")]
    if args.shapes:
        cases = [cases[int(i)] for i in args.shapes.split(",")]
    tag = f"[{args.module}] " if args.module else ""
    chooser = S.choose_sm90_config
    for spec in args.specs or [""]:
        cfg = parse(S, spec) if spec != "auto" else None
        if cfg is not None and not S.sm90_config_is_legal(cfg):
            print(f"{tag}{spec or 'default'}: illegal {cfg}")
            continue
        # "auto": the submission's own choice per shape, also after a spec that forced one
        S.choose_sm90_config = chooser if cfg is None else lambda sizes, num_sms=0, cfg=cfg: cfg
        S._runners.clear()
        S._last_runner = None
        times, kernel = [], []
        for i, case in enumerate(cases):
            test = specs.TestCase(case, "")
            data_list = timing._benchmark_inputs(test)
            out = S.custom_kernel(data_list[0])
            ref = reference.ref_kernel(timing._clone_data(data_list[0]))
            for data in data_list[1:]:  # every input seen once before timing, as eval.py does
                S.custom_kernel(data)
            ok = all(torch.allclose(o, r, rtol=1e-3, atol=1e-3) for o, r in zip(out, ref))
            stats = timing.time_calls(S.custom_kernel, data_list, False, None, 30, 2e9)
            times.append(stats.mean / 1e3)
            extra = ""
            if args.kernel_time:
                kernel.append(kernel_us_per_call(S, data_list))
                extra = f" (kernel {kernel[-1]:.2f} us)"
            rate = ceilings.bytes_of(case) / stats.mean  # bytes per ns = GB/s
            verdict = ("not checked (no decode)" if args.no_decode else "not checked (drain)" if args.drain
                       else "ok" if ok else "MISMATCH")
            print(f"  {tag}{spec or 'default'} {i}: {stats.mean / 1e3:.2f} us{extra} ({rate:.0f} GB/s of "
                  f"operand bytes) {verdict}")
        geo = math.exp(sum(map(math.log, times)) / len(times))
        line = f"{tag}{spec or 'default'}: " + " / ".join(f"{t:.1f}" for t in times) + f"  geomean {geo:.2f} us"
        if kernel and min(kernel) > 0:  # 0: no Sm90 kernel ran (a fallback warned)
            kgeo = math.exp(sum(map(math.log, kernel)) / len(kernel))
            line += "  | kernel " + " / ".join(f"{t:.1f}" for t in kernel) + f"  geomean {kgeo:.2f} us"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
