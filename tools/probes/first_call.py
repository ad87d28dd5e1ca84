"""Where the host time of a first call on new pointers goes, phase by phase, as the
leaderboard's first timed round meets it; and what a small table's upload costs with the
queue busy.

    python tools/probes/first_call.py [--case 3] [--spec-file tools/regime_specs.txt] [--no-gc]
    python tools/probes/first_call.py --uploads

As bench_rounds.py does (eval.py's _run_single_benchmark): 15 inputs, a correctness call on a
clone of each, the L2 flushed, then one round of the 15 calls, each on pointers it has not
seen. Every phase of the call (validation, the fast paths' lookups, planning, the pointer
table with its upload and descriptor init, the GEMM's first launch) is timed by a wrapper
around its function; a phase's time includes the phases it calls. A first launch is split
into its arguments' packed values, the packed array and the executor's C entry point, and
the garbage collector's passes are a phase of their own; --no-gc runs each round again
with the collector off. --uploads times a
384-byte table's copy to the device from pinned and from pageable memory while the queue
is busy for 3 ms, and checks that the pageable copy reads the host buffer at the call.
Needs a GPU.
"""

import argparse
import collections
import functools
import gc
import inspect
import sys
import time
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="tools/probes/first_call.py", description=__doc__.split("\n\n")[0],
        epilog="Needs a CUDA GPU.")
    ap.add_argument("--case", type=int, action="append", help="index into task.yml's benchmarks (or --spec-file's)")
    ap.add_argument("--spec-file", default=None)
    ap.add_argument("--uploads", action="store_true")
    ap.add_argument("--no-gc", action="store_true", help="also time each round with the garbage collector off")
    return ap


if __name__ == "__main__":
    _parser().parse_args()  # --help and argument errors answer before torch loads

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

import submission  # noqa: E402
from harness import specs, timing  # noqa: E402
from tests.cases import task_cases  # noqa: E402

PHASES = {
    submission.GroupedGemmRunner: ("run_cached", "plan", "_run", "_make_table", "_remember_call", "build",
                                   "call_key", "layout_key"),
    # a new table's first launch, split: its arguments' values packed (pack_values), the
    # packed array (ExecutorEntry.launcher), and the executor's C entry point ("capi" below)
    submission: ("validate_inputs", "to_device_async", "group_pointers", "get_runner", "pointer_table_rows",
                 "pack_values"),
    submission.ExecutorEntry: ("launcher",),
}


class PhaseClock:
    """Host time per wrapped function, summed over calls, while installed."""

    def __init__(self):
        self.totals = collections.defaultdict(lambda: [0.0, 0])
        self._saved = []
        self._gc_start = 0.0

    def _on_gc(self, phase, info) -> None:
        """The garbage collector's passes, as a phase of their own."""
        if phase == "start":
            self._gc_start = time.perf_counter()
        else:
            entry = self.totals[f"gc generation {info['generation']}"]
            entry[0] += (time.perf_counter() - self._gc_start) * 1e6
            entry[1] += 1

    def wrap(self, name, fn):
        totals = self.totals

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                entry = totals[name]
                entry[0] += (time.perf_counter() - t0) * 1e6
                entry[1] += 1
        return timed

    def first_call_timed(self, name: str, launch):
        """`launch` with its first call timed as phase `name` (its attributes kept)."""
        state = {"first": True}

        def timed_launch():
            if state["first"]:
                state["first"] = False
                return self.wrap(name, launch)()
            return launch()
        for attr in ("how", "keep"):
            if hasattr(launch, attr):
                setattr(timed_launch, attr, getattr(launch, attr))
        return timed_launch

    def install(self) -> None:
        for owner, names in PHASES.items():
            for name in names:
                raw = inspect.getattr_static(owner, name)
                fn = getattr(owner, name)
                self._saved.append((owner, name, raw))
                timed = self.wrap(name, fn)
                setattr(owner, name, staticmethod(timed) if isinstance(raw, staticmethod) else timed)
        bind = submission.bind_launch
        self._saved.append((submission, "bind_launch", bind))

        def bind_launch(fn, args):
            return self.first_call_timed(f"first launch of {getattr(fn, '__name__', 'kernel')}", bind(fn, args))
        submission.bind_launch = bind_launch
        # the first call of each packed array's entry point, alone
        packed = submission.ExecutorEntry.launcher

        def launcher(entry, addresses, keep):
            return self.first_call_timed(f"capi of {entry.name}, first call", packed(entry, addresses, keep))
        self._saved.append((submission.ExecutorEntry, "launcher", packed))
        submission.ExecutorEntry.launcher = launcher
        gc.callbacks.append(self._on_gc)

    def uninstall(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        for owner, name, fn in reversed(self._saved):
            setattr(owner, name, fn)
        self._saved.clear()


def first_round(test, no_gc: bool = False) -> None:
    data_list = timing._benchmark_inputs(test)
    # the correctness pass as the harness makes it: the outputs kept, the rest of each clone
    # freed after its call
    outputs = [submission.custom_kernel(timing._clone_data(data)) for data in data_list]
    torch.cuda.synchronize()
    del outputs
    clock = PhaseClock()
    clock.install()
    if no_gc:
        gc.disable()
    try:
        timing.clear_l2_cache()
        host = []
        for data in data_list:
            t0 = time.perf_counter()
            submission.custom_kernel(data)
            host.append((time.perf_counter() - t0) * 1e6)
        torch.cuda.synchronize()
    finally:
        gc.enable()
        clock.uninstall()
    n = len(data_list)
    print(f"{specs.spec_line(test.args)}{' (gc off)' if no_gc else ''}: first round host {sum(host) / n:.0f} us a call "
          f"(median {sorted(host)[n // 2]:.0f}, max {max(host):.0f})")
    for name, (total, count) in sorted(clock.totals.items(), key=lambda kv: -kv[1][0]):
        print(f"   {name:<36} {total / n:8.1f} us a call ({count} calls)")


def uploads(reps: int = 40) -> None:
    device = torch.device("cuda")
    values = list(range(10**9, 10**9 + 48))  # 384 bytes: a pointer table of G = 8
    kept = []
    ways = {
        "pinned, then copied": lambda h: h.pin_memory().to(device, non_blocking=True),
        "pageable, copied": lambda h: h.to(device, non_blocking=True),
        "to_device_async": lambda h: submission.to_device_async(h, device),
    }
    for name, copy in ways.items():
        times = []
        for _ in range(reps):
            torch.cuda._sleep(3_000_000)  # ~1.5-3 ms of queue ahead of the copy
            host = torch.tensor(values, dtype=torch.int64)
            t0 = time.perf_counter()
            kept.append(copy(host))
            times.append((time.perf_counter() - t0) * 1e6)
        torch.cuda.synchronize()
        times.sort()
        print(f"   {name:<22} queue busy: median {times[reps // 2]:.1f} us, max {times[-1]:.1f} us")
    same = True
    for _ in range(10):
        torch.cuda._sleep(3_000_000)
        host = torch.tensor(values, dtype=torch.int64)
        copied = submission.to_device_async(host, device)
        host.fill_(-1)
        torch.cuda.synchronize()
        same &= copied.tolist() == values
    print(f"   the pageable copy read the host buffer at the call: {same}")


def main() -> int:
    args = _parser().parse_args()
    if not torch.cuda.is_available():
        print("needs a GPU: a first round's host time is the real launch path's", file=sys.stderr)
        return 2
    if args.uploads:
        uploads()
        return 0
    if args.spec_file:
        cases = specs.read_spec_file(args.spec_file)
        tests = [cases[i] for i in (args.case or range(len(cases)))]
    else:
        benchmarks = task_cases("benchmarks")
        tests = [specs.TestCase(dict(benchmarks[i].args()), "")
                 for i in (args.case or range(len(benchmarks)))]
    for test in tests:
        first_round(test)
        if args.no_gc:
            first_round(test, no_gc=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
