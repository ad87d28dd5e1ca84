"""eval.py: the POPCORN protocol round trip and the human-mode output."""

import os
import subprocess
import sys

import pytest
from cases import ROOT

import eval as eval_cli
from harness import baselines, report, specs, timing
from nvfp4_gemm import sm100

SMALL_SPECS = [
    "m: [96, 128]; n: [128, 256]; k: [256, 512]; g: 2; seed: 1111",
    "m: [40, 7]; n: [128, 384]; k: [256, 256]; g: 2; seed: 5",
]


def _run_protocol(tmp_path, mode, specs, env_extra=None):
    spec_file = tmp_path / "specs.txt"
    spec_file.write_text("\n".join(specs) + "\n")
    read_fd, write_fd = os.pipe()
    env = {**os.environ, "POPCORN_FD": str(write_fd), **(env_extra or {})}
    proc = subprocess.Popen(
        [sys.executable, "eval.py", mode, str(spec_file)],
        cwd=ROOT,
        env=env,
        pass_fds=(write_fd,),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    os.close(write_fd)
    with os.fdopen(read_fd) as reader:
        lines = reader.read().splitlines()
    _, stderr = proc.communicate(timeout=600)
    return proc.returncode, dict(line.split(": ", 1) for line in lines), stderr.decode()


def test_protocol_test_mode_round_trip(tmp_path):
    rc, out, stderr = _run_protocol(tmp_path, "test", SMALL_SPECS)
    assert rc == 0, stderr
    assert out["test-count"] == "2"
    assert out["test.0.spec"] == SMALL_SPECS[0] and out["test.1.spec"] == SMALL_SPECS[1]
    assert out["test.0.status"] == out["test.1.status"] == "pass"
    assert out["check"] == "pass"


def test_protocol_reports_failure_with_112(tmp_path):
    """A case the task does not define (K not a multiple of 16) fails with the leaderboard's
    code and one error line naming the field."""
    rc, out, stderr = _run_protocol(
        tmp_path, "test", ["m: [64]; n: [128]; k: [200]; g: 1; seed: 1"]
    )
    assert rc == 112, stderr
    assert out["test.0.status"] == "fail" and out["check"] == "fail"
    assert (
        out["test.0.error"]
        == "invalid spec: group 0: field 'k': K = 200 is not a positive multiple of 16"
    )


@pytest.mark.slow
def test_protocol_benchmark_mode_keys(tmp_path):
    rc, out, stderr = _run_protocol(tmp_path, "benchmark", [SMALL_SPECS[0]], {"POPCORN_SEED": "7"})
    assert rc == 0, stderr
    assert out["benchmark-count"] == "1"
    for key in ("runs", "mean", "std", "err", "best", "worst"):
        assert float(out[f"benchmark.0.{key}"]) >= 0
    assert out["check"] == "pass"


def test_spec_parsing_round_trip():
    args = specs.parse_spec(SMALL_SPECS[0])
    assert args == {"m": (96, 128), "n": (128, 256), "k": (256, 512), "g": 2, "seed": 1111}
    assert specs.parse_spec(specs.spec_line(args)) == args
    with pytest.raises(ValueError, match="invalid test case"):
        specs.parse_spec("m: [1, 2]; n = 3")


def test_secret_seed_is_combined():
    tests = specs._apply_secret_seed([specs.TestCase({"seed": 1111}, "")], 99)
    # the leaderboard's Cantor pairing of 1111 and 99, by hand: 1111 + 1210 * 1211 / 2
    assert tests[0].args["seed"] == 733766


def test_stats():
    stats = timing.calculate_stats([10.0, 12.0, 14.0])
    assert stats.runs == 3 and stats.mean == 12.0 and stats.best == 10.0 and stats.worst == 14.0
    assert abs(stats.std - 2.0) < 1e-12
    assert timing.calculate_stats([5.0]).std == 0.0


def test_human_mode_test_table():
    proc = subprocess.run(
        [sys.executable, "eval.py", "test", *SMALL_SPECS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("2 tests on") and "path: torch" in out
    assert "worst |out-ref|" in out and "pass" in out
    assert "2 passed, 0 failed" in out


def test_human_mode_benchmark_table_and_report(tmp_path):
    """On a CPU: the plan and estimate up front, the ceiling named for what it is, progress
    per shape, no B200 speed of light; options after the spec file work."""
    spec_file = tmp_path / "specs.txt"
    spec_file.write_text(SMALL_SPECS[0] + "\n")
    proc = subprocess.run(
        [
            sys.executable,
            "eval.py",
            "benchmark",
            "--baselines",
            str(spec_file),
            "--report",
            str(tmp_path),
            "--json",
            str(tmp_path / "r.json"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("1 benchmark on CPU only")
    assert "no GPU: each benchmark makes 15 inputs" in out and "estimate: " in out
    assert "the CPU's fp32 torch.mm" in out and "of 0.25 GiB on the CPU" in out and "a copy" in out and "a sum" in out
    assert "s elapsed)" in out
    assert "TFLOP/s" in out and "x roofline" in out and "bound" in out and "geometric mean" in out
    assert "torch exact path us" in out
    assert "SOL" not in out and "speed-of-light" not in out
    # the report is named for the machine, and says which it is
    md = (tmp_path / "benchmark-cpu.md").read_text()
    assert md.startswith("# nvfp4_group_gemm benchmark on the CPU\n\nMachine: CPU only (")
    assert (tmp_path / "benchmark-cpu.png").read_bytes()[:4] == b"\x89PNG"
    assert f"report: {tmp_path / 'benchmark-cpu.md'}, {tmp_path / 'benchmark-cpu.png'}" in out
    assert not (tmp_path / "benchmark.md").exists()


def test_report_names_the_device():
    assert report.report_stem("NVIDIA H200") == "benchmark-nvidia-h200"
    assert report.report_stem("NVIDIA B200") == "benchmark-nvidia-b200"
    assert report.report_stem(None) == "benchmark-cpu"


def test_report_without_matplotlib_names_the_extra(monkeypatch, capsys, tmp_path):
    """Before anything runs: one line naming the extra to install, exit status 2."""
    real = eval_cli.importlib.util.find_spec
    monkeypatch.setattr(
        eval_cli.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "matplotlib" else real(name, *a),
    )
    assert eval_cli.human_main(["benchmark", "--report", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [f"eval.py: error: {report.MATPLOTLIB_MISSING}"]
    assert 'pip install -e ".[report]"' in captured.err
    assert list(tmp_path.iterdir()) == []


def test_plot_labels_are_one_field_a_line():
    """The report's bar labels: G, N, K on lines of their own (a long M list or range
    stays in the table), so that eleven cases side by side do not overlap."""
    args = {"m": list(range(1, 33)), "n": [7168] * 32, "k": [2048] * 32, "g": 32}
    assert report._plot_label(report._short_spec(args)) == "G=32\nN=7168\nK=2048"
    args = {"m": [40, 200], "n": [512, 256], "k": [512, 768], "g": 2}
    assert report._plot_label(report._short_spec(args)) == "G=2\nN=256/512\nK=512/768"


def test_dense_fp16_baselines_time_exact_operands():
    """The cuBLAS fp16 baselines (run here on the CPU): per group always, stacked only where
    every group has the same N and K; their operands are the exact dequantized values."""
    import torch

    import reference

    same = [
        reference.generate_input(m=[40, 72], n=[256, 256], k=[256, 256], g=2, seed=s)
        for s in (1, 2)
    ]
    other = [reference.generate_input(m=[40, 72], n=[128, 256], k=[256, 256], g=2, seed=3)]
    assert set(baselines._dense_fp16_baselines(same)) == {"fp16 mm per group", "fp16 mm stacked"}
    assert set(baselines._dense_fp16_baselines(other)) == {"fp16 mm per group"}
    a, b = baselines._dequantized(same[0], torch.float16)[1]
    ref = reference.ref_kernel(([tuple(t.clone() for t in g) for g in same[0][0]], *same[0][1:]))[1]
    got = (a.float() @ b.float().T).half()[:, :, None]
    assert torch.equal(got, ref)


def test_b200_first_run_specs_cover_the_edges():
    """tools/gpu_verify.sh's edge shapes (tools/b200_edge_specs.txt) are valid specs, and
    cover the M, N and K edges the README asks a first B200 run to cover (and groups of
    different K in one call)."""
    lines = (ROOT / "tools" / "b200_edge_specs.txt").read_text().split("\n")
    cases = [specs.parse_spec(line) for line in lines if line.strip()]
    assert [specs.spec_problem(c) for c in cases] == [""] * len(cases)
    ms = {m for c in cases for m in c["m"]}
    assert {1, 40, 64, 65, 128, 129, 384} <= ms
    assert {128, 384, 3072, 7168} <= {n for c in cases for n in c["n"]}
    assert {256, 2048, 7168} <= {k for c in cases for k in c["k"]}
    assert any(len(set(c["k"])) > 1 for c in cases)
    decode = [c for c in cases if max(c["m"]) <= 32]  # the decode config (MMA N = 32)
    # two members of one Blackwell size class: the second reuses the first's plan and
    # schedule with its own sizes, which the B200's self-check then checks
    classes = [sm100.sm100_size_class([(m, n, k, 1) for m, n, k in zip(c["m"], c["n"], c["k"])]) for c in decode]
    assert len(decode) == 2 and classes[0] == classes[1] and decode[0]["m"] != decode[1]["m"]
    script = ROOT / "tools" / "gpu_verify.sh"
    assert "tools/b200_edge_specs.txt" in script.read_text()
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_regime_specs_cover_the_regimes_a_grouped_gemm_meets():
    """tools/regime_specs.txt (eval.py benchmark --baselines tools/regime_specs.txt): the
    leaderboard's four benchmarks, mixture-of-experts projections of 32 groups, decode-like
    groups of 1-8 tokens (8 to 64 groups) and prefill-like groups of 512-2048 tokens."""
    lines = (ROOT / "tools" / "regime_specs.txt").read_text().split("\n")
    cases = [specs.parse_spec(line) for line in lines if line.strip()]
    assert [specs.spec_problem(c) for c in cases] == [""] * len(cases)
    task = [specs.parse_spec(t.spec) for t in specs.load_task_cases("benchmarks")]
    assert all(t in cases for t in task)
    moe = [c for c in cases if c["g"] == 32 and 16 <= min(c["m"]) and max(c["m"]) <= 200]
    decode = [c for c in cases if max(c["m"]) <= 8]
    prefill = [c for c in cases if min(c["m"]) >= 512]
    assert len(moe) == 2 and {c["g"] for c in decode} == {8, 32, 64} and len(prefill) == 2
