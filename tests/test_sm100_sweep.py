"""tools/sm100_sweep.py on the CPU: its cases, --plan, the sweep loop on a stubbed target
(the launch stubbed: a config that falls back, one that computes wrong numbers, the
alternating order, the choice table), and gpu_verify.sh's b200 mode's time budget."""

import math
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
from cases import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import sm100_sweep as sw  # noqa: E402


def test_cases_are_the_benchmarks_tests_and_new_regimes():
    cases = sw.sweep_cases()
    labels = [c.label for c in cases]
    assert labels[:4] == [f"benchmark {i}" for i in range(4)]
    assert labels[4:14] == [f"test {i}" for i in range(10)]
    # tools/regime_specs.txt repeats the four benchmarks first: only its other 7 remain
    assert labels[14:] == [f"regime {i}" for i in range(4, 11)]
    keys = [tuple(map(tuple, (c.spec["m"], c.spec["n"], c.spec["k"]))) for c in cases]
    assert len(set(keys)) == len(keys) == 21
    assert [c.label for c in sw.sweep_cases("benchmarks")] == labels[:4]
    with pytest.raises(ValueError):
        sw.sweep_cases("prefill")


def test_plan_lists_each_cases_legal_configs_and_fits_its_step():
    """--plan: the benchmark shapes get the four 128-token-or-wider configs, a decode case
    (every group at most 32 tokens) the decode config too; the whole sweep is estimated
    within the b200 step's limit."""
    lines, seconds = sw.plan(sw.sweep_cases(), sw.ROUNDS, sw.PlanTarget())
    # 21 cases, then the trial pass's 4 benchmark cases, then the total
    assert len(lines) == 26
    bench0 = lines[0]
    assert "today swap_2cta_m128n256" in bench0 and "speed of light 18.83 us" in bench0
    for name in ("swap_2cta_m128n256", "swap_1cta_m128n128", "plain_1cta_m128n128", "plain_2cta_m256n128"):
        assert name in bench0
    assert "swap_1cta_m32n128" not in bench0
    assert "_direct" not in bench0  # a trial: timed in a pass of its own
    trial3 = lines[24]
    assert trial3.startswith("trial: benchmark 3") and "swap_2cta_m128n256 5.51 us" in trial3
    assert "swap_2cta_m128n256_direct 4.61 us" in trial3 and trial3.count(" us (") == 2
    decode = next(line for line in lines if line.startswith("regime 6"))
    assert "today swap_1cta_m32n128" in decode and "swap_1cta_m32n128 " in decode
    assert 60 < seconds < b200_step_limits()["sweep"]


def test_plan_runs_from_the_command_line_without_a_gpu():
    proc = subprocess.run([sys.executable, "tools/sm100_sweep.py", "--plan", "--cases", "benchmarks"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("\n") == 9 and "4 cases and 4 trial cases, 10 rounds each" in proc.stdout


class FakeTarget:
    """Three configs: "fast" and "slow" launch once per call and compute the right result,
    "falls_back" never launches (as a fallback), "wrong" launches and returns wrong
    numbers. The time of a call is the config's cost, read by the stub timer."""

    cost_us = {"fast": 2.0, "slow": 3.0, "falls_back": 1.0, "wrong": 1.5}
    trials = ()

    def __init__(self):
        self.name = None
        self.count = 0
        self.selects = []

    def configs(self, sizes):
        return {name: SimpleNamespace(name=name) for name in self.cost_us}

    def chosen(self, sizes):
        return "slow"

    def select(self, name, cfg):
        self.name = name
        self.selects.append(name)

    def call(self, data):
        import warnings

        if self.name == "falls_back":
            warnings.warn("nvfp4 grouped GEMM: sm100 kernel cannot take this call (test)", RuntimeWarning,
                          stacklevel=2)
            return ["right"]
        self.count += 1
        return ["wrong" if self.name == "wrong" else "right"]

    def launches(self):
        return self.count

    def forget_warnings(self):
        pass


def _stub_timer(target):
    def time_calls(fn, data_list):
        for data in data_list:
            fn(data)
        return SimpleNamespace(mean=target.cost_us[target.name] * 1e3)
    return time_calls


@pytest.fixture
def swept(monkeypatch):
    monkeypatch.setattr(sw.call_model, "predict_sm100",
                        lambda sizes, cfg: SimpleNamespace(warm_mean_us=2.5))
    target = FakeTarget()
    case = sw.sweep_cases("benchmarks")[3]
    results = sw.run_case(target, case, list(range(15)), ["right"], lambda out, ref: out == ref,
                          _stub_timer(target), rounds=4)
    return target, case, results


def test_sweep_times_clean_configs_in_turn_and_reports_the_rest(swept):
    target, case, results = swept
    assert results["fast"].status == "ok" and results["fast"].rounds_us == [2.0] * 4
    assert results["slow"].mean_us == 3.0 and results["slow"].best_us == 3.0
    assert results["falls_back"].status.startswith("fell back (0 launches in 15 calls)")
    assert results["falls_back"].warnings == ["nvfp4 grouped GEMM: sm100 kernel cannot take this call (test)"]
    assert results["falls_back"].mean_us is None
    assert results["wrong"].status == "MISMATCH" and results["wrong"].rounds_us == []
    # first calls of every config, then 4 rounds alternating the two clean ones
    timed = target.selects[4:]
    assert timed == ["fast", "slow", "slow", "fast", "fast", "slow", "slow", "fast"]
    assert sw.choice(results) == "fast"
    assert results["fast"].predicted_us == 2.5


def test_sweep_reports_a_config_that_falls_back_while_timed(monkeypatch):
    monkeypatch.setattr(sw.call_model, "predict_sm100", lambda sizes, cfg: SimpleNamespace(warm_mean_us=2.5))
    target = FakeTarget()
    calls = {"n": 0}
    real_call = target.call

    def call(data):  # "fast" stops launching after its first calls
        calls["n"] += 1
        if target.name == "fast" and calls["n"] > 60:
            return ["right"]
        return real_call(data)

    target.call = call
    results = sw.run_case(target, sw.sweep_cases("benchmarks")[3], list(range(15)), ["right"],
                          lambda out, ref: out == ref, _stub_timer(target), rounds=2)
    assert results["fast"].status == "fell back while timed"
    assert sw.choice(results) == "slow"


def test_choice_table_is_ready_to_paste(swept):
    target, case, results = swept
    S = SimpleNamespace(SM100_NAMED_CONFIGS={"fast": SimpleNamespace(tile_m=128, tile_n=128, swap_ab=True, cta_group=1)})
    lines = sw.format_choices([case], [results], ["slow"], S)
    assert "| benchmark 3 | slow | fast | 3.00 | 2.00 |" in lines
    assert lines[-3:] == ["SM100_CONFIG_TABLE: dict = {",
                          "    _SM100_BENCH_4: make_sm100_config(128, 128, swap_ab=True, cta_group=1),", "}"]
    text = "\n".join(sw.format_case(case, results, "slow"))
    assert "fast: mean 2.00 us, best 2.00 (4 rounds), 1.31x speed of light; model 2.50 us" in text
    assert "wrong: MISMATCH" in text


def test_sweep_with_the_harness_timer_on_the_cpu(monkeypatch):
    """The loop through the harness's own time_calls (the host clock without a GPU)."""
    from harness import timing

    monkeypatch.setattr(sw.call_model, "predict_sm100", lambda sizes, cfg: SimpleNamespace(warm_mean_us=2.5))
    target = FakeTarget()
    results = sw.run_case(target, sw.sweep_cases("benchmarks")[3], list(range(15)), ["right"],
                          lambda out, ref: out == ref,
                          lambda fn, dl: timing.time_calls(fn, dl, False, None, 1, math.inf), rounds=2)
    assert len(results["fast"].rounds_us) == 2 and results["fast"].mean_us > 0


def test_submission_target_runs_each_config_on_its_own_runner(monkeypatch):
    """SubmissionTarget on the package (the submission's names) with the launch stubbed:
    select(name) installs a runner whose chooser returns that config."""
    import nvfp4_gemm.dispatch as dispatch
    import nvfp4_gemm.sm100 as sm100
    from nvfp4_gemm import common

    module = SimpleNamespace(**{name: getattr(sm100, name) for name in dir(sm100) if not name.startswith("__")})
    module._BACKENDS = dict(dispatch._BACKENDS)
    module._runners = {}
    module._last_runner = None
    module._warned = common._warned
    module.sm100_backend = sm100.sm100_backend
    made = []

    def get_runner(device, path):
        backend = module._BACKENDS[path]()
        made.append(backend)
        return module._runners.setdefault((device, path), SimpleNamespace(backend=backend, launches=0))

    module.get_runner = get_runner
    target = sw.SubmissionTarget(module, "cuda:0")
    sizes = [(192, 3072, 4096, 1), (320, 3072, 4096, 1)]
    configs = sw.stable_configs(target, sizes)
    assert set(configs) == {"swap_2cta_m128n256", "swap_1cta_m128n128", "plain_1cta_m128n128", "plain_2cta_m256n128"}
    assert list(sw.trial_configs(target, sizes)) == ["swap_2cta_m128n256", "swap_2cta_m128n256_direct"]
    for name, cfg in configs.items():
        target.select(name, cfg)
        assert module._last_runner is target.current is module._runners[("cuda:0", "sm100")]
        assert target.current.backend.choose_config(sizes, 148) is cfg
        # a retired config must show as a fallback, not hand over to another config
        assert target.current.backend.alternatives is None
    assert module._BACKENDS["sm100"] is dispatch._BACKENDS["sm100"]  # restored
    target.select("swap_2cta_m128n256", configs["swap_2cta_m128n256"])
    assert len(made) == 4  # one runner per config, reused
    assert target.chosen(sizes) == "swap_2cta_m128n256"


def test_sweep_needs_an_sm100_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    import os

    before = {k: os.environ.get(k) for k in ("NVFP4_GEMM_PATH", "NVFP4_GEMM_SELF_CHECK")}
    assert sw.main(["--cases", "benchmarks"]) == 2
    # nothing of the sweep's set-up leaks into the process that asked (the tests' own)
    assert {k: os.environ.get(k) for k in before} == before


def b200_step_limits() -> dict:
    """The b200 mode's steps in tools/gpu_verify.sh: label -> timeout in seconds."""
    text = (ROOT / "tools" / "gpu_verify.sh").read_text()
    block = text.split('elif [ "$part" = b200 ]; then', 1)[1].split("\nelif ", 1)[0].split("\nfi", 1)[0]
    limits = {}
    for limit, label in re.findall(r'step (\d+) "([^"]+)"', block):
        limits["sweep" if "sweep" in label else label] = int(limit)
    return limits


def test_gpu_verify_b200_mode_fits_25_minutes():
    text = (ROOT / "tools" / "gpu_verify.sh").read_text()
    limits = b200_step_limits()
    assert "sweep" in limits and any("benchmark" in k for k in limits) and len(limits) >= 5
    budget = int(re.search(r"B200_BUDGET_S:-(\d+)", text).group(1))
    assert sum(limits.values()) <= budget <= 25 * 60
    assert "b200-summary.txt" in text
    assert "tools/sm100_sweep.py" in text


class TrialTarget(FakeTarget):
    """FakeTarget with "fast" a trial config."""

    trials = ("fast",)


def test_trials_are_timed_in_their_own_pass_beside_todays_config(monkeypatch):
    """A trial config is not in a case's main pass; its pass times it beside today's, on
    the benchmark cases only, and its table gives trial / today and the model's ratio."""
    monkeypatch.setattr(sw.call_model, "predict_sm100",
                        lambda sizes, cfg: SimpleNamespace(warm_mean_us={"fast": 2.4, "slow": 3.2}.get(cfg.name, 2.5)))
    target = TrialTarget()
    cases = sw.sweep_cases("benchmarks,tests")
    assert "fast" not in sw.stable_configs(target, cases[0].sizes)
    assert set(sw.trial_configs(target, cases[0].sizes)) == {"slow", "fast"}
    trials = sw.trial_cases(cases, target)
    assert [c.label for c in trials] == [f"benchmark {i}" for i in range(4)]
    assert sw.trial_cases(cases, FakeTarget()) == []
    results = sw.run_case(target, trials[3], list(range(15)), ["right"], lambda out, ref: out == ref,
                          _stub_timer(target), rounds=2, configs=sw.trial_configs(target, trials[3].sizes))
    assert set(results) == {"slow", "fast"}
    assert target.selects[2:] == ["slow", "fast", "fast", "slow"]
    lines = sw.format_trials([trials[3]], [results], ["slow"])
    assert lines[2] == "| benchmark 3 | fast | 3.00 | 2.00 | 0.667 | 0.750 |"
