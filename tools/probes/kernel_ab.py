"""Two submission files timed against each other in one process on a GPU, alternating
(new, old, old, new, ...), so that the machine's drift hits both alike.

    python tools/probes/kernel_ab.py OLD.py NEW.py                        # task.yml's benchmarks
    python tools/probes/kernel_ab.py OLD.py NEW.py --spec-file tools/regime_specs.txt --shapes 4,5,6
    python tools/probes/kernel_ab.py OLD.py NEW.py --steps 32,2048,7168,1,8 --shapes none
    python tools/probes/kernel_ab.py submission.py submission.py --env-old NVFP4_GEMM_WATCHDOG_MS=0

Per case: both files' results are checked once against the exact reference, then each
round times the leaderboard's loop (harness.timing.time_calls: the case's 15 inputs, L2 flushed, one
event pair around the 15 calls) for each file in turn; the table gives the median over
rounds per file and new / old. --env-old KEY=VALUE sets an environment variable while
OLD makes its first call (where the path's runner reads its switches): the same file with
and without the watchdog, for one.

--steps G,N,K,LO,HI adds a mixture-of-experts decode sequence: 24 steps of G groups whose
token counts (M random in LO..HI) change every step while the expert weights (B and its
scales) stay, called back to back with one event pair around them (DecodeSteps; a fresh
sequence for every timing). The figure per step is what a model's layer waits for: the
host's work for sizes it may never have seen plus the kernel. Without a GPU the launches
are stubbed (tools/host_ab.load, tools/host_overhead.install_stub), the results are not
checked, and the steps time the host's work alone (device = host); --stub-backend sm100
runs them through the Blackwell backend's host side (self-check off) instead of Hopper's.
"""

import argparse
import gc
import math
import random
import statistics
import sys
import time
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="tools/probes/kernel_ab.py", description=__doc__.split("\n\n")[0],
        epilog="Needs a CUDA GPU for kernel times; without one, the decode steps (--steps) run "
               "with the launch stubbed.")
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument(
        "--spec-file",
        default=None,
        help="cases from this spec file instead of task.yml's benchmarks",
    )
    ap.add_argument(
        "--shapes", default=None, help="indexes into the cases (default: all; none: no cases)"
    )
    ap.add_argument("--rounds", type=int, default=2, help="(new, old, old, new) blocks per case")
    ap.add_argument("--steps", action="append", default=[], metavar="G,N,K,LO,HI")
    ap.add_argument("--stub-backend", choices=("sm90", "sm100"), default="sm90",
                    help="without a GPU: whose host side the stubbed steps run")
    ap.add_argument("--env-old", action="append", default=[], metavar="KEY=VALUE",
                    help="set while OLD makes its first call (its runner's switches)")
    return ap


if __name__ == "__main__":
    _parser().parse_args()  # --help and argument errors answer before torch loads

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import reference  # noqa: E402
from harness import specs, timing  # noqa: E402
from tests.cases import task_cases  # noqa: E402
from tools.probes.host_ab import load  # noqa: E402

STEPS = 24


def checked(mod, data) -> bool:
    out = mod.custom_kernel(data)
    ref = reference.ref_kernel(timing._clone_data(data))
    return all(torch.allclose(o, r, rtol=1e-3, atol=1e-3) for o, r in zip(out, ref))


class DecodeSteps:
    """Inputs of decode steps that share one set of expert weights: per group a pool of
    activations (A, its scales, C) for up to 8 token counts in LO..HI, from which each
    step draws every group's count at random, so that a sequence's sizes are new to both
    files' caches (G groups of 8 counts: 8**G combinations)."""

    def __init__(self, g: int, n: int, k: int, lo: int, hi: int, seed: int = 7):
        self.rng = random.Random(seed)
        counts = sorted(self.rng.sample(range(lo, hi + 1), min(8, hi - lo + 1)))
        make = lambda m, s: reference.generate_input(m=[m] * g, n=[n] * g, k=[k] * g, g=g, seed=s)  # noqa: E731
        weights = make(counts[0], seed)
        self.g = g
        self.b = [(b, sfb, sfb_r) for (_, b, _), (_, sfb), (_, sfb_r) in zip(*weights[:3])]
        self.pool = {}  # count -> per group (a, c, sfa, sfa_reordered)
        for i, m in enumerate(counts):
            abc, sfs, sfr, _ = make(m, seed + 1 + i)
            self.pool[m] = [
                (a, c, sfa, sfa_r) for (a, _, c), (sfa, _), (sfa_r, _) in zip(abc, sfs, sfr)
            ]

    def step(self):
        abc, sfs, sfr, sizes = [], [], [], []
        for j, (b, sfb, sfb_r) in enumerate(self.b):
            m = self.rng.choice(list(self.pool))
            a, c, sfa, sfa_r = self.pool[m][j]
            abc.append((a, b, c))
            sfs.append((sfa, sfb))
            sfr.append((sfa_r, sfb_r))
            sizes.append((m, b.shape[0], a.shape[1] * 2, 1))
        return abc, sfs, sfr, sizes

    def sequence(self) -> list:
        return [self.step() for _ in range(STEPS)]


def first_call_with_env(mod, env: dict) -> None:
    """mod's first call (its runners read their switches then) with env set, then restored."""
    import os

    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        mod.custom_kernel(reference.generate_input(m=[128], n=[4096], k=[7168], g=1, seed=1))
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def time_steps(mod, steps) -> tuple[float, float, float]:
    """(device us per step, the steps called back to back between one event pair; host us
    per step, the loop on the host clock; us per step the garbage collector ran inside it)."""
    collecting = []

    def on_gc(phase, _info):
        collecting.append((phase, time.perf_counter()))

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    gc.callbacks.append(on_gc)
    t0 = time.perf_counter()
    if cuda:
        start.record()
    for data in steps:
        mod.custom_kernel(data)
    if cuda:
        end.record()
    host = time.perf_counter() - t0
    gc.callbacks.remove(on_gc)
    device = host
    if cuda:
        torch.cuda.synchronize()
        device = start.elapsed_time(end) / 1e3
    gc_s = sum(t1 - t0 for (_, t0), (_, t1) in zip(collecting[::2], collecting[1::2]))
    return tuple(x * 1e6 / len(steps) for x in (device, host, gc_s))


def main() -> int:
    ap = _parser()
    args = ap.parse_args()
    mods = {"old": load(args.old, "old_submission", args.stub_backend),
            "new": load(args.new, "new_submission", args.stub_backend)}
    if args.env_old:
        first_call_with_env(mods["old"], dict(item.split("=", 1) for item in args.env_old))
    if not torch.cuda.is_available() and args.shapes != "none":  # load stubbed the launches
        ap.error("without a GPU only --steps can be timed (launches stubbed): pass --shapes none")
    order = ["new", "old", "old", "new"] * args.rounds

    if args.spec_file:
        cases = [test.args for test in specs.read_spec_file(args.spec_file)]
    else:
        cases = [dict(case.args()) for case in task_cases("benchmarks")]
    if args.shapes == "none":
        cases = []
    elif args.shapes:
        cases = [cases[int(i)] for i in args.shapes.split(",")]

    ratios = []
    where = (
        torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU, launches stubbed"
    )
    print(f"{where}; old {args.old}, new {args.new}")
    for i, case in enumerate(cases):
        data_list = timing._benchmark_inputs(specs.TestCase(dict(case), ""))
        ok = {name: checked(mod, data_list[0]) for name, mod in mods.items()}
        for mod in mods.values():  # every input seen once before timing, as eval.py does
            for data in data_list[1:]:
                mod.custom_kernel(data)
        times = {name: [] for name in mods}
        for name in order:
            stats = timing.time_calls(mods[name].custom_kernel, data_list, False, None, 30, 2e9)
            times[name].append(stats.mean / 1e3)
        old, new = (statistics.median(times[s]) for s in ("old", "new"))
        ratios.append(new / old)
        verdict = "ok" if all(ok.values()) else f"MISMATCH {ok}"
        print(
            f"case {i} (G={len(case['m'])}, M {min(case['m'])}-{max(case['m'])}, N {case['n'][0]}, "
            f"K {case['k'][0]}): old {old:.2f} us, new {new:.2f} us, new/old {new / old:.3f}  "
            f"[old {' '.join(f'{t:.1f}' for t in times['old'])}; "
            f"new {' '.join(f'{t:.1f}' for t in times['new'])}] {verdict}"
        )
    if ratios:
        print(
            f"geomean new/old over {len(ratios)} cases: "
            f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}"
        )

    for spec in args.steps:
        g, n, k, lo, hi = map(int, spec.split(","))
        steps = DecodeSteps(g, n, k, lo, hi)
        checks = torch.cuda.is_available()  # a stubbed launch computes nothing
        ok = {
            name: checked(mod, steps.step()) if checks else mod.custom_kernel(steps.step()) and True
            for name, mod in mods.items()
        }
        for mod in mods.values():  # configs compiled, first-use costs paid, outside the figures
            time_steps(mod, steps.sequence())
        times = {name: [] for name in mods}
        for name in order:  # a sequence of new sizes for every timing
            times[name].append(time_steps(mods[name], steps.sequence()))
        verdict = (
            ("ok" if all(ok.values()) else f"MISMATCH {ok}") if checks else "not checked (stubbed)"
        )
        med = {
            name: [statistics.median(t[i] for t in times[name]) for i in range(3)] for name in mods
        }
        print(
            f"decode steps G={g} N={n} K={k} M {lo}-{hi}, new sizes every step, us per step "
            f"(device / host / gc in host): old {' / '.join(f'{x:.0f}' for x in med['old'])}, "
            f"new {' / '.join(f'{x:.0f}' for x in med['new'])}, device new/old "
            f"{med['new'][0] / med['old'][0]:.3f}  [device: old "
            f"{' '.join(f'{t[0]:.0f}' for t in times['old'])}; new "
            f"{' '.join(f'{t[0]:.0f}' for t in times['new'])}] {verdict}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
