"""The leaderboard's timing loop on one case, round by round: which rounds are slow, and
what the host did in them.

    python tools/probes/bench_rounds.py --spec-file tools/regime_specs.txt 7 [--rounds 6]
    python tools/probes/bench_rounds.py 0                      # task.yml's benchmark 0

As the harness does (eval.py's _run_single_benchmark): 15 inputs, one correctness call on a
clone of each (outputs kept), then rounds of the 15 calls with the L2 flushed, CUDA events around each
round. So round 0 is the first call on each input's own pointers (validation, layout key,
pointer table, descriptors), as in the leaderboard's first timed round. Per round: GPU us
per call, the host's time per call (max and mean of custom_kernel's wall time), and every
collection of Python's garbage collector that ran in the round (generation, ms).
Needs a GPU (CUDA events).
"""

import argparse
import gc
import sys
import time
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="tools/probes/bench_rounds.py", description=__doc__.split("\n\n")[0],
        epilog="Needs a CUDA GPU.")
    ap.add_argument("case", type=int, help="index into task.yml's benchmarks, or into --spec-file's cases")
    ap.add_argument("--spec-file", default=None)
    ap.add_argument("--rounds", type=int, default=6)
    return ap


if __name__ == "__main__":
    _parser().parse_args()  # --help and argument errors answer before torch loads

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from harness import specs, timing  # noqa: E402
from tests.cases import task_cases  # noqa: E402


class GcLog:
    """Collections of Python's garbage collector, with their durations, while attached."""

    def __init__(self):
        self.events: list[tuple[int, float]] = []
        self._t0 = None

    def __call__(self, phase, info):
        if phase == "start":
            self._t0 = time.perf_counter()
        elif self._t0 is not None:
            self.events.append((info["generation"], (time.perf_counter() - self._t0) * 1e3))
            self._t0 = None

    def take(self) -> list[tuple[int, float]]:
        events, self.events = self.events, []
        return events


def main() -> int:
    args = _parser().parse_args()
    if not torch.cuda.is_available():
        print("needs a GPU: the rounds are timed with CUDA events", file=sys.stderr)
        return 2
    from submission import custom_kernel

    if args.spec_file:
        test = specs.read_spec_file(args.spec_file)[args.case]
    else:
        test = specs.TestCase(dict(task_cases("benchmarks")[args.case].args()), "")
    data_list = timing._benchmark_inputs(test)
    # the correctness pass as the harness makes it: the outputs kept, the rest of each clone
    # freed after its call
    outputs = [custom_kernel(timing._clone_data(data)) for data in data_list]
    torch.cuda.synchronize()
    del outputs
    log = GcLog()
    gc.callbacks.append(log)
    try:
        for r in range(args.rounds):
            torch.cuda.synchronize()
            timing.clear_l2_cache()
            log.take()
            host = []
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for data in data_list:
                t0 = time.perf_counter()
                custom_kernel(data)
                host.append((time.perf_counter() - t0) * 1e6)
            end.record()
            torch.cuda.synchronize()
            gpu = start.elapsed_time(end) * 1e3 / len(data_list)
            collections = ", ".join(f"gen {g} {ms:.1f} ms" for g, ms in log.take()) or "none"
            print(f"round {r}: {gpu:.1f} us/call on the GPU; host max {max(host):.0f} mean "
                  f"{sum(host) / len(host):.0f} us/call; collections: {collections}")
    finally:
        gc.callbacks.remove(log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
