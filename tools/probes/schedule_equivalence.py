"""Do two submission.py files choose the same Hopper configs and build the same work
schedules? For host-side refactors of the chooser and the schedule generators, whose
output decides what the measured kernels run (CPU only, a few seconds per file).

    python tools/probes/schedule_equivalence.py build/old/submission.py submission.py

The corpus: the task.yml benchmarks and tests, then 160 seeded random problems (1 to 64
groups, mixed M, mostly shared N and K), each on 132 and on 11 SMs. Per problem it
compares the chosen config, and for all eight candidates (tile_n 128 / 256, narrow
(96, 64) / (64,), whole / split) the WorkSchedule and its modeled makespan, exactly.
"""

import argparse
import pickle
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def problems() -> list[tuple]:
    sys.path.insert(0, str(ROOT))
    from tests.cases import task_cases

    rng = random.Random(12345)
    out = [tuple((m, n, k, 1) for m, n, k in zip(c.m, c.n, c.k))
           for c in task_cases("benchmarks") + task_cases("tests")]
    for _ in range(160):
        g = rng.choice([1, 2, 3, 4, 8, 16, 64])
        n = rng.choice([256, 512, 2048, 3072, 4096, 7168])
        k = rng.choice([256, 1024, 1536, 2048, 4096, 7168])
        same = rng.random() < 0.7
        out.append(tuple(
            (rng.choice([1, 7, 40, 64, 72, 96, 129, 192, 200, 248, 256, 320, 384, 1000])
             if rng.random() < 0.5 else rng.randint(1, 400),
             n if same else rng.choice([256, 512, 2048, 4096, 7168]),
             k if same else rng.choice([256, 1024, 2048, 7168]), 1)
            for _ in range(g)))
    return out


def plain(ws) -> tuple:
    """A WorkSchedule as plain tuples (units, phase starts, slots), comparable between two
    versions of the class (its units were WorkUnits in a field named ctas in older commits)."""
    return tuple(tuple(map(tuple, cta)) for cta in ws.ctas), ws.starts, ws.num_slots


def record(module: str, out: str) -> None:
    """(sizes, SMs, chosen, {config: schedule}, {config: makespan}) per case, pickled."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("submission", module)
    S = importlib.util.module_from_spec(spec)
    sys.modules["submission"] = S
    spec.loader.exec_module(S)
    rows = []
    for sizes in problems():
        for sms in (132, 11):
            cands = [S.make_sm90_config(n, narrow=w, split_k=sk)
                     for sk in (False, True) for n in (128, 256) for w in ((96, 64), (64,))]
            rows.append((sizes, sms, S.choose_sm90_config(sizes, sms),
                         {c: plain(S.sm90_work_schedule(sizes, c, sms)) for c in cands},
                         {c: S.sm90_makespan_us(sizes, c, sms) for c in cands}))
    Path(out).write_bytes(pickle.dumps(rows))


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="tools/probes/schedule_equivalence.py",
        description="Whether two submission.py files choose the same Hopper configs and build "
                    "the same work schedules on a fixed corpus of problems (CPU).")
    parser.add_argument("old", help="a submission.py file")
    parser.add_argument("new", help="another submission.py file")
    # internal: one file's choices and schedules into a pickle, in a process of its own
    parser.add_argument("--record", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.record:
        record(args.old, args.new)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        outs = []
        for i, module in enumerate((args.old, args.new)):
            outs.append(f"{tmp}/{i}.pkl")
            subprocess.run([sys.executable, __file__, "--record", str(Path(module).resolve()), outs[-1]],
                           check=True, cwd=ROOT)
        # the pickles name the configs' class as submission's: this tree's unpickles them
        sys.path.insert(0, str(ROOT))
        a, b = (pickle.loads(Path(o).read_bytes()) for o in outs)
    diffs = 0
    for (sizes, sms, chosen_a, sched_a, span_a), (_, _, chosen_b, sched_b, span_b) in zip(a, b):
        if chosen_a != chosen_b:
            diffs += 1
            print(f"choice differs on {sms} SMs, sizes {list(sizes)}: {chosen_a} / {chosen_b}")
        for cfg in sched_a:
            if sched_a[cfg] != sched_b[cfg] or span_a[cfg] != span_b[cfg]:
                diffs += 1
                print(f"schedule differs on {sms} SMs, {cfg}, sizes {list(sizes)}: "
                      f"makespan {span_a[cfg]} / {span_b[cfg]}")
    print(f"{len(a)} cases, {diffs} differences")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
