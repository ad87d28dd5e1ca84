"""Times every Blackwell config the chooser could pick, case by case, on a B200, and prints
the choice table the measurements imply beside the call model's predictions.

    python tools/sm100_sweep.py --plan            # no GPU: the cases, configs, predictions, time
    python tools/sm100_sweep.py                   # on a B200: benchmarks, task.yml tests, regimes
    python tools/sm100_sweep.py --cases benchmarks --rounds 20 --json out.json
    python tools/sm100_sweep.py --module old/submission.py

The configs of a case are the named ones (SM100_NAMED_CONFIGS, the set choose_sm100_config
picks from) that sm100_can_implement accepts for its sizes. Each runs through the
submission's own custom_kernel with NVFP4_GEMM_PATH=sm100 and NVFP4_GEMM_SELF_CHECK=1, on a
runner of its own (the chooser replaced by that config), so each config's first launch per
size is checked against the exact path, and the fast paths, fallbacks and warnings are the
submission's. Per case:

1. the leaderboard's 15 inputs (eval.py _benchmark_inputs) and the reference's result of
   the first;
2. per config, its first calls on the 15 inputs (compile, self-check), warnings captured;
   its result on the first input checked against the reference (rtol = atol = 1e-3), and
   its launch count (one per call: fewer means a call fell back);
3. rounds: the configs in turn, the order rotated each round; per config the 15 calls once
   untimed, then eval.py time_calls (L2 flushed, one CUDA event pair around the 15 calls),
   the launch count checked again.

A config that fell back, failed its check or raised has no time and is never chosen.
The output: per case and config the mean and best round, x speed of light (the case's
bytes at task.yml's 7.69 TB/s, tools/call_model.py), the model's prediction and the
measured / predicted ratio; then the choice table ready to paste into SM100_CONFIG_TABLE.

Trial configs (SM100_TRIAL_CONFIGS: named, never chosen, new code never run on a B200) are
left out of that pass and timed after it, on the benchmark cases, alternating with today's
config: a fault of theirs, which may end the process, then costs only the trial pass, and
their table gives trial / today per shape.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
import warnings
from pathlib import Path

ROUNDS = 10


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="tools/sm100_sweep.py", description=__doc__.split("\n\n")[0],
        epilog="Needs a B200 (sm_100) with the CuTe DSL, except --plan, which runs anywhere.")
    ap.add_argument("--plan", action="store_true", help="print the cases, configs, predictions and time; no GPU")
    ap.add_argument("--cases", default="all", help="all, or benchmarks, tests, regimes (comma-separated)")
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument("--module", default=None, help="path of another submission.py to time")
    ap.add_argument("--json", default=None, help="write every measurement to this file")
    return ap


if __name__ == "__main__":
    _parser().parse_args()  # --help and argument errors answer before torch loads

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "tools"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import call_model  # noqa: E402

from tools.probes.sm90_sweep import load_submission  # noqa: E402  (the Hopper sweep's, shared)

CALLS = call_model.CALLS_PER_ROUND
RTOL = ATOL = 1e-3  # the leaderboard's tolerance (eval.py)
WARNING_PREFIX = "nvfp4 grouped GEMM:"

# Rough host-side costs for --plan's estimate, seconds (to size the step's timeout, not
# measured on a B200): a config's first compile, two builds with the self-check's watchdog
# build, about 1.1 s each on the H200's host (docs/performance.md, "Host time"); making the
# 15 inputs, whose scales reference.generate_input draws on the CPU, per MB of a call's
# bytes; the reference's and the self-check's exact results per case and config; the
# untimed calls, flush, events and synchronization of one config's round.
COMPILE_S = 2.5
INPUT_S_PER_MB = 0.005
CHECK_S = 0.5
ROUND_OVERHEAD_S = 0.01


@dataclasses.dataclass
class Case:
    label: str
    spec: dict  # m, n, k (lists), g, seed: an eval.py spec

    @property
    def sizes(self) -> list[tuple[int, int, int, int]]:
        return call_model.spec_sizes(self.spec)


def sweep_cases(which: str = "all") -> list[Case]:
    """task.yml's benchmarks, its tests and tools/regime_specs.txt's cases (those that are
    not benchmarks), as `which` names them: all, benchmarks, tests, regimes, or a
    comma-separated list of these."""
    kinds = ["benchmarks", "tests", "regimes"] if which == "all" else which.split(",")
    cases, seen = [], set()
    for kind in kinds:
        if kind in ("benchmarks", "tests"):
            specs = call_model.task_specs(kind)
        elif kind == "regimes":
            specs = call_model.regime_specs()
        else:
            raise ValueError(f"unknown cases {kind!r}: all, benchmarks, tests or regimes")
        for i, spec in enumerate(specs):
            key = (tuple(spec["m"]), tuple(spec["n"]), tuple(spec["k"]))
            if key in seen:
                continue
            seen.add(key)
            spec = {"m": list(spec["m"]), "n": list(spec["n"]), "k": list(spec["k"]),
                    "g": len(spec["m"]), "seed": spec.get("seed", 1111)}
            cases.append(Case(f"{kind[:-1]} {i}", spec))
    return cases


class SubmissionTarget:
    """A submission module's custom_kernel, one runner per config: select(name) makes the
    next calls run that config."""

    def __init__(self, module, device):
        self.S = module
        self.device = device
        self.runners: dict = {}
        self.current = None

    def configs(self, sizes) -> dict:
        S = self.S
        return {name: cfg for name, cfg in S.SM100_NAMED_CONFIGS.items() if S.sm100_can_implement(cfg, sizes)[0]}

    @property
    def trials(self) -> tuple:
        return getattr(self.S, "SM100_TRIAL_CONFIGS", ())

    def chosen(self, sizes) -> str:
        return self.S.sm100_config_name(self.S.choose_sm100_config(sizes))

    def select(self, name: str, cfg) -> None:
        runner = self.runners.get(name)
        if runner is None:
            runner = self.runners[name] = self._make_runner(cfg)
        self.S._runners[(self.device, "sm100")] = runner
        self.S._last_runner = runner
        self.current = runner

    def _make_runner(self, cfg):
        """get_runner's runner, with the backend's chooser replaced by `cfg`."""
        S = self.S
        base = S.sm100_backend()
        # that config alone: a retired one falls back (and shows) instead of handing over
        # to another config (alternatives, in files that have them)
        alone = {"alternatives": None} if "alternatives" in {f.name for f in dataclasses.fields(base)} else {}
        backend = dataclasses.replace(base, choose_config=lambda sizes, num_sms, cfg=cfg: cfg, **alone)
        saved = S._BACKENDS["sm100"]
        S._BACKENDS["sm100"] = lambda: backend
        S._runners.pop((self.device, "sm100"), None)
        try:
            return S.get_runner(self.device, "sm100")
        finally:
            S._BACKENDS["sm100"] = saved

    def call(self, data):
        return self.S.custom_kernel(data)

    def launches(self) -> int:
        return self.current.launches

    def forget_warnings(self) -> None:
        """warn_once says each reason once a process: forgotten, each config's own show."""
        self.S._warned.clear()


@dataclasses.dataclass
class ConfigResult:
    name: str
    status: str = "ok"  # ok, MISMATCH, fell back (the warnings), error: ...
    rounds_us: list = dataclasses.field(default_factory=list)
    warnings: list = dataclasses.field(default_factory=list)
    predicted_us: float | None = None

    @property
    def mean_us(self) -> float | None:
        return sum(self.rounds_us) / len(self.rounds_us) if self.rounds_us and self.ok else None

    @property
    def best_us(self) -> float | None:
        return min(self.rounds_us) if self.rounds_us and self.ok else None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _captured(record) -> list[str]:
    return sorted({str(w.message) for w in record if str(w.message).startswith(WARNING_PREFIX)})


def first_calls(target, name: str, cfg, data_list, reference_out, close) -> ConfigResult:
    """A config's first calls on every input (compile and self-check), its result on the
    first input against the reference, its launch count and the warnings."""
    result = ConfigResult(name)
    target.forget_warnings()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        try:
            target.select(name, cfg)
            before = target.launches()
            out = target.call(data_list[0])
            good = close(out, reference_out)
            for data in data_list[1:]:
                target.call(data)
            launched = target.launches() - before
        except Exception as e:  # a build or launch the submission did not catch: reported, not fatal
            result.status = f"error: {type(e).__name__}: {e}"
            return result
    result.warnings = _captured(record)
    if launched != len(data_list):
        result.status = f"fell back ({launched} launches in {len(data_list)} calls)"
    elif not good:
        result.status = "MISMATCH"
    return result


def timed_round(target, name: str, cfg, data_list, time_calls) -> float | None:
    """One round of one config: the calls once untimed, then time_calls (the harness's
    loop: L2 flushed, an event pair around the calls). us per call, or None when a call
    did not launch the kernel."""
    target.select(name, cfg)
    before = target.launches()
    for data in data_list:
        target.call(data)
    stats = time_calls(target.call, data_list)
    if target.launches() - before != 2 * len(data_list):
        return None
    return stats.mean / 1e3


def stable_configs(target, sizes) -> dict:
    """The configs the main pass times: every named one that takes the sizes, but trials."""
    return {name: cfg for name, cfg in target.configs(sizes).items() if name not in target.trials}


def trial_configs(target, sizes) -> dict:
    """The trial pass's configs of a case: today's and the trials that take the sizes, or
    none where no trial does."""
    configs = target.configs(sizes)
    today = target.chosen(sizes)
    trials = {name: cfg for name, cfg in configs.items() if name in target.trials}
    return {today: configs[today], **trials} if trials and today in configs else {}


def trial_cases(cases: list[Case], target) -> list[Case]:
    """The benchmark cases among `cases` that a trial config takes."""
    return [case for case in cases if case.label.startswith("benchmark") and trial_configs(target, case.sizes)]


def format_trials(cases: list[Case], all_results: list[dict], today: list[str]) -> list[str]:
    """Per benchmark case and trial config: its mean against today's, same process."""
    lines = ["| case | trial | today us | trial us | trial / today | model trial / today |",
             "|---|---|---|---|---|---|"]
    for case, results, now in zip(cases, all_results, today):
        base = results.get(now)
        for name, r in results.items():
            if name == now:
                continue
            ratio = (f"{r.mean_us / base.mean_us:.3f}" if base and base.mean_us and r.mean_us
                     else r.status if not r.ok else "-")
            model = (f"{r.predicted_us / base.predicted_us:.3f}" if base and base.predicted_us and r.predicted_us
                     else "-")
            lines.append(f"| {case.label} | {name} | {'-' if not base or base.mean_us is None else f'{base.mean_us:.2f}'} | "
                         f"{'-' if r.mean_us is None else f'{r.mean_us:.2f}'} | {ratio} | {model} |")
    return lines


def run_case(target, case: Case, data_list, reference_out, close, time_calls, rounds: int,
             configs: dict | None = None) -> dict:
    """Every config of the case (`configs`, else stable_configs'): first calls, then
    `rounds` rounds in rotating order."""
    configs = stable_configs(target, case.sizes) if configs is None else configs
    results = {name: first_calls(target, name, cfg, data_list, reference_out, close)
               for name, cfg in configs.items()}
    names = [name for name in configs if results[name].ok]
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)] if names else []
        for name in order:
            if not results[name].ok:
                continue
            with warnings.catch_warnings(record=True) as record:
                warnings.simplefilter("always")
                us = timed_round(target, name, configs[name], data_list, time_calls)
            if us is None:
                results[name].status = "fell back while timed"
                results[name].warnings += _captured(record)
            else:
                results[name].rounds_us.append(us)
    for name, cfg in configs.items():
        results[name].predicted_us = call_model.predict_sm100(case.sizes, cfg).warm_mean_us
    return results


def choice(results: dict) -> str | None:
    """The config with the lowest mean among those that ran clean."""
    timed = [(r.mean_us, name) for name, r in results.items() if r.mean_us is not None]
    return min(timed)[1] if timed else None


def format_case(case: Case, results: dict, chosen_today: str) -> list[str]:
    sol = call_model.sol_us(case.sizes)
    lines = [f"{case.label}: G = {case.spec['g']}, M {case.spec['m']}, N {sorted(set(case.spec['n']))}, "
             f"K {sorted(set(case.spec['k']))}; speed of light {sol:.2f} us; today {chosen_today}"]
    for name, r in results.items():
        pred = f"model {r.predicted_us:.2f} us" if r.predicted_us is not None else "model -"
        if r.mean_us is None:
            lines.append(f"  {name}: {r.status}; {pred}")
        else:
            lines.append(f"  {name}: mean {r.mean_us:.2f} us, best {r.best_us:.2f} ({len(r.rounds_us)} rounds), "
                         f"{r.mean_us / sol:.2f}x speed of light; {pred}, measured / model "
                         f"{r.mean_us / r.predicted_us:.2f}")
        for w in r.warnings:
            lines.append(f"    {w}")
    return lines


def format_choices(cases: list[Case], all_results: list[dict], today: list[str], S) -> list[str]:
    """The choice table: per case the best config against today's, and the benchmark
    entries of SM100_CONFIG_TABLE as Python, ready to paste into nvfp4_gemm/sm100.py."""
    lines = ["| case | today | measured best | today us | best us |", "|---|---|---|---|---|"]
    table = []
    for case, results, now in zip(cases, all_results, today):
        best = choice(results)
        now_us = results[now].mean_us if now in results else None
        best_us = results[best].mean_us if best else None
        lines.append(f"| {case.label} | {now} | {best or 'none ran'} | "
                     f"{'-' if now_us is None else f'{now_us:.2f}'} | {'-' if best_us is None else f'{best_us:.2f}'} |")
        if best and case.label.startswith("benchmark"):
            cfg = S.SM100_NAMED_CONFIGS[best]
            table.append(f"    _SM100_BENCH_{int(case.label.split()[1]) + 1}: make_sm100_config("
                         f"{cfg.tile_m}, {cfg.tile_n}, swap_ab={cfg.swap_ab}, cta_group={cfg.cta_group}),")
    times = [r[choice(r)].mean_us for r, c in zip(all_results, cases) if c.label.startswith("benchmark") and choice(r)]
    if len(times) == 4:
        geo = math.exp(sum(map(math.log, times)) / 4)
        lines.append(f"\nbenchmark geomean with the best configs: {geo:.2f} us "
                     f"(speed of light {call_model.geomean(call_model.TASK_SOL_US):.2f})")
    if table:
        lines += ["", "SM100_CONFIG_TABLE: dict = {", *table, "}"]
    return lines


# --plan
def plan_seconds(case: Case, configs: dict, predictions: dict, rounds: int) -> float:
    """About how long the case takes: inputs, checks, and per config its rounds (the
    compiles are counted once per process, by plan)."""
    mb = call_model.call_bytes(case.sizes) / 1e6
    calls_us = sum(predictions.values()) * 2 * CALLS * rounds  # untimed + timed calls
    return (CALLS * mb * INPUT_S_PER_MB + CHECK_S * (1 + len(configs))
            + calls_us / 1e6 + rounds * len(configs) * ROUND_OVERHEAD_S)


def plan(cases: list[Case], rounds: int, target) -> tuple[list[str], float]:
    """What the sweep would time and about how long it would take, without a GPU."""
    lines, total, compiled = [], 0.0, set()
    trials = [(f"trial: {case.label}", case, trial_configs(target, case.sizes)) for case in trial_cases(cases, target)]
    for label, case, configs in [(c.label, c, stable_configs(target, c.sizes)) for c in cases] + trials:
        predictions = {name: call_model.predict_sm100(case.sizes, cfg).warm_mean_us for name, cfg in configs.items()}
        seconds = plan_seconds(case, configs, predictions, rounds) + COMPILE_S * len(set(configs) - compiled)
        compiled |= set(configs)
        total += seconds
        sol = call_model.sol_us(case.sizes)
        cells = ", ".join(f"{name} {us:.2f} us ({us / sol:.2f}x)" for name, us in predictions.items())
        lines.append(f"{label} (G = {case.spec['g']}; today {target.chosen(case.sizes)}; "
                     f"speed of light {sol:.2f} us; about {seconds:.0f} s): {cells or 'no config takes it'}")
    lines.append(f"{len(cases)} cases and {len(trials)} trial cases, {rounds} rounds each, about {total / 60:.1f} min")
    return lines, total


class PlanTarget:
    """The package's chooser and legality, for --plan on a machine without a GPU."""

    trials = call_model.SM100_TRIAL_CONFIGS

    def configs(self, sizes) -> dict:
        return call_model.sm100_candidates(sizes)

    def chosen(self, sizes) -> str:
        return call_model.sm100_config_name(call_model.choose_sm100_config(sizes))


def _close(out, ref) -> bool:
    import torch

    return len(out) == len(ref) and all(torch.allclose(o, r, rtol=RTOL, atol=ATOL) for o, r in zip(out, ref))


def run_on_gpu(cases: list[Case], rounds: int, module: str | None, json_path: str | None) -> int:
    import torch

    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 10:
        found = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA GPU"
        print(f"tools/sm100_sweep.py times the Blackwell kernel: it needs an sm_100 GPU ({found}); "
              f"--plan runs without one", file=sys.stderr)
        return 2
    # read by the submission at its first call (its path) and runner (the self-check)
    os.environ["NVFP4_GEMM_PATH"] = "sm100"
    os.environ["NVFP4_GEMM_SELF_CHECK"] = "1"
    import reference
    from harness import specs, timing

    S = load_submission(module)
    device = torch.device("cuda", torch.cuda.current_device())
    target = SubmissionTarget(S, device)
    print(f"== {torch.cuda.get_device_name()}, {torch.cuda.get_device_properties(device).multi_processor_count} SMs; "
          f"{len(cases)} cases, {rounds} rounds", flush=True)

    def time_calls(fn, data_list):
        return timing.time_calls(fn, data_list, False, None, 1, math.inf)

    start = time.monotonic()
    report = []

    def sweep(pass_cases, configs_of, prefix: str):
        """Time each case's configs (configs_of(case)); its results and today's configs."""
        all_results, today = [], []
        for case in pass_cases:
            data_list = timing._benchmark_inputs(specs.TestCase(dict(case.spec), ""))
            reference_out = reference.ref_kernel(timing._clone_data(data_list[0]))
            results = run_case(target, case, data_list, reference_out, _close, time_calls, rounds,
                               configs_of(case))
            now = target.chosen(case.sizes)
            all_results.append(results)
            today.append(now)
            print(prefix + "\n".join(format_case(case, results, now)), f"[{time.monotonic() - start:.0f} s]",
                  flush=True)
            report.append({"case": case.label, "trial": bool(prefix), "spec": case.spec, "today": now,
                           "best": choice(results),
                           "configs": {n: dataclasses.asdict(r) | {"mean_us": r.mean_us, "best_us": r.best_us}
                                       for n, r in results.items()}})
            if json_path:  # after every case: what ran is kept if a later case ends the process
                Path(json_path).write_text(json.dumps(report, indent=1))
            del data_list, reference_out
            torch.cuda.empty_cache()
        return all_results, today

    all_results, today = sweep(cases, lambda case: stable_configs(target, case.sizes), "")
    print("\n" + "\n".join(format_choices(cases, all_results, today, S)), flush=True)
    trials = trial_cases(cases, target)
    trial_results = []
    if trials:
        print(f"\n== trial configs {', '.join(target.trials)}, beside today's", flush=True)
        trial_results, trial_today = sweep(trials, lambda case: trial_configs(target, case.sizes), "trial: ")
        print("\n" + "\n".join(format_trials(trials, trial_results, trial_today)))
    clean = all(r.ok for results in all_results + trial_results for r in results.values())
    return 0 if clean else 1


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    cases = sweep_cases(args.cases)
    if args.plan:
        lines, _ = plan(cases, args.rounds, PlanTarget())
        print("\n".join(lines))
        return 0
    return run_on_gpu(cases, args.rounds, args.module, args.json)


if __name__ == "__main__":
    sys.exit(main())
