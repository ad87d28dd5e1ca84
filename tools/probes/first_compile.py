"""What the guarded first launch costs a new process: the first call of each benchmark
shape of task.yml, which compiles its config, with the watchdog build of the first launch
(the default) and without it (NVFP4_GEMM_WATCHDOG_MS=0: one build), in fresh processes.

    python tools/probes/first_compile.py              # 2 processes a setting, alternating
    python tools/probes/first_compile.py --rounds 3

Each process imports the shipped submission.py, then for each benchmark shape in turn times
its first custom_kernel call (compile, module load, first launch, up to the device's
completion) and a second one (warm), and checks both results against the reference. The
DSL's file cache is off (CUTE_DSL_DISABLE_FILE_CACHING=1), so every compile is a real one.
Prints one JSON line per process, then the median first-call seconds per shape and setting
and their ratio. Needs a GPU with the CuTe DSL.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = {"guarded": {}, "unguarded": {"NVFP4_GEMM_WATCHDOG_MS": "0"}}


def one_process() -> dict:
    """In this process: every benchmark shape's first and second call."""
    import torch

    sys.path.insert(0, str(ROOT))
    import reference
    import submission
    from harness.specs import load_task_cases

    rows = []
    for test in load_task_cases("benchmarks"):
        data = reference.generate_input(**test.args)
        want = reference.ref_kernel(([tuple(t.clone() for t in g) for g in data[0]], *data[1:]))
        times, exact = [], True
        for _ in range(2):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = submission.custom_kernel(data)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            exact = exact and all(torch.equal(o, w) for o, w in zip(out, want))
        rows.append({"case": test.args, "first_s": round(times[0], 3), "second_s": round(times[1], 5),
                     "exact": exact})
    return {"rows": rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2, help="processes per setting, alternating (default 2)")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one_process()))
        return 0
    firsts = {name: [] for name in SETTINGS}
    ok = True
    for r in range(args.rounds):
        order = list(SETTINGS) if r % 2 == 0 else list(reversed(SETTINGS))
        for name in order:
            env = dict(os.environ, CUTE_DSL_DISABLE_FILE_CACHING="1", PYTHONUNBUFFERED="1", **SETTINGS[name])
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, __file__, "--one"], env=env, cwd=ROOT,
                                  capture_output=True, text=True)
            lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
            if proc.returncode or not lines:
                print(f"first_compile: {name} process failed:\n{proc.stderr[-2000:]}")
                return 1
            result = json.loads(lines[-1])
            result.update(setting=name, process_s=round(time.perf_counter() - t0, 1))
            print(json.dumps(result))
            ok = ok and all(row["exact"] for row in result["rows"])
            firsts[name].append([row["first_s"] for row in result["rows"]])
    print("shape  first call, guarded (s)  unguarded (s)  guarded / unguarded")
    for i in range(len(firsts["guarded"][0])):
        g = statistics.median(run[i] for run in firsts["guarded"])
        u = statistics.median(run[i] for run in firsts["unguarded"])
        print(f"{i:5d}  {g:24.2f}  {u:13.2f}  {g / u:19.2f}")
    print("every result exact" if ok else "SOME RESULT NOT EXACT")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
