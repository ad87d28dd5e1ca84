"""Warm-call host time of two submission files, loaded side by side in one process and
measured in alternating rounds, so that the host's drift (which moves single-file figures
by more than most host-side changes) hits both alike.

    python tools/probes/host_ab.py OLD.py NEW.py [--rounds 8] [--calls 1000]
    python tools/probes/host_ab.py OLD.py NEW.py --first-round [--rounds 3]

Per benchmark shape of task.yml (and small problems of their group counts) and per file, the median over rounds of the host time per
call (tools/probes/host_overhead.py's back_to_back_us: medians of 5 batches) two ways:
  same:    one input called back to back (the call cache's latest-hit shortcut);
  cycle15: the shape's 15 inputs in turn, as the leaderboard's timed loop calls them (a
           full lookup per call).
  launch alone (GPU only): the cached pointer table's launch without the wrapper
           (host_overhead.bound_launch_us).
On a GPU each round also times torch.cuda._sleep and the bare driver launch of an empty
kernel (host_overhead.driver_launch_floor_us), the host's launch floors then; without one
the launches are stubbed (host_overhead.install_stub), which times the wrapper alone.

--first-round (GPU only) times instead the ranked mode's first round, whose 15 calls meet
their inputs for the first time: per shape, round and file, 15 new inputs as eval.py
makes them, a correctness pass on a clone of each (outputs kept), the L2 flushed, then the 15 calls, with
the host time of each call and CUDA events around the round. Every round's inputs stay
allocated until the shape is done, so no call meets addresses an earlier one used.
"""

import argparse
import importlib.util
import statistics
import sys
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="tools/probes/host_ab.py", description=__doc__.split("\n\n")[0],
        epilog="On a machine without a GPU the kernel launch is stubbed; --first-round needs a "
               "CUDA GPU.")
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--first-round", action="store_true", help="time first rounds on new inputs (GPU)")
    return ap


if __name__ == "__main__":
    _parser().parse_args()  # --help and argument errors answer before torch loads

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import reference  # noqa: E402
from harness import specs, timing  # noqa: E402
from tests.cases import task_cases  # noqa: E402
from tools.probes.host_overhead import (  # noqa: E402
    back_to_back_us,
    bound_launch_us,
    driver_launch_floor_us,
    install_stub,
    launch_floor_us,
)

INPUTS_PER_SHAPE = 15  # the leaderboard's timed loop: 15 inputs of one shape, in turn


def load(path: str, name: str, backend: str = "sm90"):
    """Submission file `path` as module `name`; without a GPU with its launches stubbed on
    `backend`'s host side (install_stub)."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up while the class is made
    spec.loader.exec_module(mod)
    if not torch.cuda.is_available():
        install_stub(mod, backend)
    return mod


def shape_inputs(args: dict) -> list:
    return [reference.generate_input(**{**args, "seed": args["seed"] + i}) for i in range(INPUTS_PER_SHAPE)]


def first_round(mod, case_args: dict, kept: list) -> tuple[float, float]:
    """(host us a call, GPU us a call) of one first round of `mod` on new inputs of the case;
    the inputs are appended to `kept`."""
    import time

    inputs = timing._benchmark_inputs(specs.TestCase(dict(case_args), ""))
    kept.append(inputs)
    # the correctness pass as the harness makes it: the outputs kept, the rest of each clone
    # freed after its call
    outputs = [mod.custom_kernel(timing._clone_data(d)) for d in inputs]
    torch.cuda.synchronize()
    del outputs
    timing.clear_l2_cache()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    host = 0.0
    start.record()
    for d in inputs:
        t0 = time.perf_counter()
        mod.custom_kernel(d)
        host += time.perf_counter() - t0
    end.record()
    torch.cuda.synchronize()
    return host * 1e6 / len(inputs), start.elapsed_time(end) * 1e3 / len(inputs)


def first_rounds(mods: dict, rounds: int) -> None:
    for c in task_cases("benchmarks"):
        label = f"G={c.g} N={c.n[0]} K={c.k[0]}"
        kept = []
        out = {name: ([], []) for name in mods}
        for _ in range(rounds):
            for name, mod in mods.items():
                host, gpu = first_round(mod, c.args(), kept)
                out[name][0].append(host)
                out[name][1].append(gpu)
        for name, (host, gpu) in out.items():
            print(f"{label:<20} {name}: first round host median {statistics.median(host):.1f} us a call "
                  f"(rounds {min(host):.1f}-{max(host):.1f}); GPU {statistics.median(gpu):.1f} us a call "
                  f"({min(gpu):.1f}-{max(gpu):.1f})")
        del kept
    print(f"({torch.cuda.get_device_name()}; {rounds} alternating first rounds of 15 calls per file and shape)")


def main() -> int:
    args = _parser().parse_args()
    cuda = torch.cuda.is_available()
    if args.first_round and not cuda:
        print("--first-round needs a GPU: the launches are real", file=sys.stderr)
        return 2
    mods = {"old": load(args.old, "sub_old"), "new": load(args.new, "sub_new")}
    if args.first_round:
        first_rounds(mods, args.rounds)
        return 0
    floors, driver_floors = [], []
    cases = [(f"G={c.g} N={c.n[0]} K={c.k[0]}", c.args()) for c in task_cases("benchmarks")]
    # the same group counts on small problems: kernels shorter than the host work, so
    # that the launch queue never fills and blocks the host (see host_overhead.measure)
    cases += [(f"G={g} small", {"m": [64] * g, "n": [128] * g, "k": [256] * g, "g": g, "seed": 1}) for g in (8, 2)]
    for label, case_args in cases:
        inputs = shape_inputs(case_args)
        for mod in mods.values():
            for _ in range(3):
                for d in inputs:
                    mod.custom_kernel(d)
        if cuda:
            torch.cuda.synchronize()
        out = {name: {"same": [], "cycle15": []} for name in mods}
        if cuda:
            for name in mods:
                out[name]["launch alone"] = []
        for _ in range(args.rounds):
            for name, mod in mods.items():
                kernel = mod.custom_kernel

                def cycle(kernel=kernel, inputs=inputs):
                    for d in inputs:
                        kernel(d)

                first = inputs[0]
                out[name]["same"].append(back_to_back_us(lambda kernel=kernel, d=first: kernel(d), args.calls))
                cycles = max(args.calls // INPUTS_PER_SHAPE, 1)
                out[name]["cycle15"].append(back_to_back_us(cycle, cycles) / INPUTS_PER_SHAPE)
                if cuda:
                    out[name]["launch alone"].append(bound_launch_us(mod, first, args.calls))
            if cuda:
                floors.append(launch_floor_us(args.calls))
                driver_floors.append(driver_launch_floor_us(args.calls))
        for name in mods:
            print(f"{label:<20} {name}: " + "; ".join(
                f"{how} median {statistics.median(v):.2f} us (rounds {min(v):.2f}-{max(v):.2f})"
                for how, v in out[name].items()))
    if floors:
        print(f"launch floor (torch.cuda._sleep) over the rounds: median {statistics.median(floors):.2f} us "
              f"({min(floors):.2f}-{max(floors):.2f})")
        print(f"bare driver launch (cuLaunchKernel of an empty kernel through ctypes): median "
              f"{statistics.median(driver_floors):.2f} us ({min(driver_floors):.2f}-{max(driver_floors):.2f})")
    where = torch.cuda.get_device_name() if cuda else "launch stubbed (no GPU)"
    print(f"({where}; {args.rounds} alternating rounds, {args.calls} calls each way per round)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
