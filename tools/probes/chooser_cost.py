"""What the Hopper config choice costs the host for problem sizes never seen (CPU only):
per submission.py given, the CPU time of choose_sm90_config per problem (schedule memo
cleared, best of 5 rounds) and how many candidates it models, on seeded problems of the
four benchmark shapes' N and K with random M (1 .. 400) at 2, 8 and 16 groups, on
tools/probes/host_overhead.py's --new-sizes set (G = 8, M 16 .. 256, N 4096, K 512), and on
decode steps (the regime cases' G = 8 / 32 / 64, N and K, M 1 .. 8), and on
mixture-of-experts projections (the regime cases' G = 32, N and K, M 16 .. 200).

    python tools/probes/chooser_cost.py build/old/submission.py submission.py

CPU time on a shared 2-core machine varies by 2x between rounds; the count of modeled
candidates does not.
"""

import argparse
import importlib.util
import random
import sys
import time


def load(path: str):
    spec = importlib.util.spec_from_file_location("submission", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["submission"] = mod
    spec.loader.exec_module(mod)
    return mod


def problem_sets() -> dict:
    rng = random.Random(5)
    shapes = [(4096, 7168), (7168, 2048), (3072, 4096), (4096, 1536)]
    sets = {f"G={g}": [[(rng.randint(1, 400), n, k, 1) for _ in range(g)] for n, k in shapes for _ in range(8)]
            for g in (2, 8, 16)}
    rng = random.Random(0)
    sets["G=8 K=512"] = [[(rng.randint(16, 256), 4096, 512, 1) for _ in range(8)] for _ in range(32)]
    # decode steps: tools/regime_specs.txt's three decode cases' G, N and K, M random in 1..8
    for g, n, k in ((8, 4096, 7168), (32, 2048, 7168), (64, 2048, 2048)):
        sets[f"decode G={g}"] = [[(rng.randint(1, 8), n, k, 1) for _ in range(g)] for _ in range(8)]
    for n, k in ((4096, 7168), (7168, 2048)):
        sets[f"MoE N={n}"] = [[(rng.randint(16, 200), n, k, 1) for _ in range(32)] for _ in range(8)]
    return sets


def measure(S) -> dict:
    real, count = S.sm90_makespan_us, [0]

    def counted(*args):
        count[0] += 1
        return real(*args)

    S.sm90_makespan_us = counted
    out = {}
    for name, problems in problem_sets().items():
        best = float("inf")
        for _ in range(5):
            count[0] = 0
            t0 = time.process_time()
            for sizes in problems:
                S._sm90_work_schedule.cache_clear()
                if hasattr(S, "_sm90_tiles"):  # files that cache the tile lists
                    S._sm90_tiles.cache_clear()
                S.choose_sm90_config(sizes, 132)
            best = min(best, (time.process_time() - t0) / len(problems) * 1e3)
        out[name] = (best, count[0] / len(problems))
    S.sm90_makespan_us = real
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="tools/probes/chooser_cost.py",
        description="The host's CPU time of the Hopper config choice on problem sizes never "
                    "seen, per submission.py file, and how many candidates it models (CPU).")
    parser.add_argument("files", nargs="*", default=["submission.py"], metavar="FILE",
                        help="submission.py files to measure (default: submission.py)")
    for path in parser.parse_args().files:
        res = measure(load(path))
        print(path + ": " + ", ".join(f"{k} {ms:.2f} ms ({n:.1f} modeled)" for k, (ms, n) in res.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
