"""Seventeenth session: host time of the layout-keyed path (new tensor objects over known
memory) and of first calls on new pointers, two submission files loaded side by side in one
process and measured in alternation (6 rounds), so that the host's drift during a call
hits both alike. Without CUDA the launches are stubbed, as in tools/host_overhead.py.

    python notes/h200/2026-12-02/ab_paths.py OLD.py NEW.py
"""
import importlib.util
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import reference  # noqa: E402
from tests.cases import task_cases  # noqa: E402


def load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up while the class is made
    spec.loader.exec_module(mod)
    if not torch.cuda.is_available():  # the stub of tools/host_overhead.py, per module
        def compile_stub(config, *_older):
            return mod.CompiledKernels(init=lambda *a: None, prepare=lambda *a, **k: lambda: None)
        backend = mod.dataclasses.replace(mod.sm90_backend(), name="stub", compile=compile_stub)
        mod._BACKENDS["stub"] = lambda: backend
        mod._device_paths[torch.device("cpu")] = "stub"
        mod.get_runner = lambda device, path: mod._runners.setdefault(
            (device, path), mod.GroupedGemmRunner(backend, num_sms=132))
    return mod


def views(data):
    return ([tuple(t[:] for t in g) for g in data[0]], data[1], [tuple(t[:] for t in g) for g in data[2]], data[3])


def clones(data):
    return ([tuple(t.clone() for t in g) for g in data[0]], data[1], [tuple(t.clone() for t in g) for g in data[2]], data[3])


def median_us(mod, inputs) -> float:
    samples = []
    for d in inputs:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        mod.custom_kernel(d)
        samples.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(samples)


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
                out[name]["views"].append(median_us(mod, [views(data) for _ in range(200)]))
                fresh = [clones(data) for _ in range(20)]
                out[name]["new pointers"].append(median_us(mod, fresh))
                del fresh
        for name in mods:
            print(f"G={case.g} N={case.n[0]} K={case.k[0]} {name}: " + "; ".join(
                f"{what} " + " ".join(f"{v:.1f}" for v in vals) + f" (median {statistics.median(vals):.1f} us)"
                for what, vals in out[name].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
