"""Seventeenth session: host time of the layout-keyed path (new tensor objects over known
memory) and of first calls on new pointers, two submission files loaded side by side in one
process and measured in alternation (6 rounds), so that the host's drift during a call
hits both alike. Without CUDA the launches are stubbed (tools/host_overhead.py's install_stub, per module).

    python notes/h200/2026-12-02/ab_paths.py OLD.py NEW.py
"""
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))


import reference  # noqa: E402
from tests.cases import task_cases  # noqa: E402
from tools.host_ab import load  # noqa: E402
from tools.host_overhead import first_calls_us  # noqa: E402


def views(data):
    return ([tuple(t[:] for t in g) for g in data[0]], data[1], [tuple(t[:] for t in g) for g in data[2]], data[3])


def clones(data):
    return ([tuple(t.clone() for t in g) for g in data[0]], data[1], [tuple(t.clone() for t in g) for g in data[2]], data[3])


def main() -> int:
    mods = {"old": load(sys.argv[1], "sub_old"), "new": load(sys.argv[2], "sub_new")}
    cases = task_cases("benchmarks")
    for case in (cases[0], cases[3]):
        data = reference.generate_input(**case.args())
        for mod in mods.values():
            for _ in range(3):
                mod.custom_kernel(data)
        out = {name: {"views": [], "new pointers": []} for name in mods}
        for _ in range(6):
            for name, mod in mods.items():
                out[name]["views"].append(first_calls_us([views(data) for _ in range(200)], mod))
                fresh = [clones(data) for _ in range(20)]
                out[name]["new pointers"].append(first_calls_us(fresh, mod))
                del fresh
        for name in mods:
            print(f"G={case.g} N={case.n[0]} K={case.k[0]} {name}: " + "; ".join(
                f"{what} " + " ".join(f"{v:.1f}" for v in vals) + f" (median {statistics.median(vals):.1f} us)"
                for what, vals in out[name].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
