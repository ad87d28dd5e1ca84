"""eval.py's roofline math (bytes of a case, which bound holds), the speed-of-light display
and the CPU estimate, on the CPU."""

import pytest
import torch

import reference
from harness import baselines, ceilings, report, specs, timing

ROOF = ceilings.Roofline(tflops=100.0, label="peak", gbps=1000.0, bandwidth_label="copy")


def _args(m, n, k):
    return {"m": tuple(m), "n": tuple(n), "k": tuple(k), "g": len(m), "seed": 1}


def test_scale_bytes_are_whole_atoms():
    assert ceilings.scale_bytes(1, 16) == 512  # one scale still takes a 128 x 4 atom
    assert ceilings.scale_bytes(128, 256) == 4 * 512  # 16 scales a row: 4 atom columns
    assert ceilings.scale_bytes(129, 64) == 2 * 512
    assert ceilings.scale_bytes(0, 256) == 0


def test_bytes_of_a_case_by_hand():
    a, b, c = 64 * 128, 128 * 128, 2 * 64 * 128
    scales = 2 * 4 * 512
    assert ceilings.bytes_of(_args([64], [128], [256])) == a + b + c + scales


def test_bytes_of_matches_the_generated_tensors():
    """A and B as stored, the blocked scales with their padding, and C: what generate_input
    allocates for the call (its CPU copies of the scales are not the kernel's to read)."""
    args = _args([1, 129, 0], [64, 128, 32], [64, 256, 16])
    abc, _, sf_reordered, _ = reference.generate_input(**args)
    tensors = [t for group in abc for t in group] + [t for pair in sf_reordered for t in pair]
    assert ceilings.bytes_of(args) == sum(t.numel() * t.element_size() for t in tensors)


def test_roofline_takes_the_larger_bound():
    assert ceilings.roofline_time(2e9, 1e6, ROOF) == (pytest.approx(2e-5), "flops")
    assert ceilings.roofline_time(2e6, 1e8, ROOF) == (pytest.approx(1e-4), "bytes")
    assert ceilings.roofline_time(1e11, 1e8, ROOF)[1] == "flops"  # a tie is the FLOPs bound


def test_task_benchmarks_are_flops_bound_at_h200_rates():
    h200 = ceilings.Roofline(720.0, "fp16", 4000.0, "copy")
    for test in specs.load_task_cases("benchmarks"):
        seconds, bound = ceilings.roofline_time(
            ceilings.flops_of(test.args), ceilings.bytes_of(test.args), h200
        )
        assert bound == "flops" and seconds > 0


def test_speed_of_light_shown_on_a_b200_only():
    assert ceilings.sol_mode(None) == "none"
    assert ceilings.sol_mode("NVIDIA B200") == "ratio"
    assert ceilings.sol_mode("NVIDIA H200") == "figure"


def _results():
    return [
        {
            "case": "a",
            "mean": 20000.0,
            "best": 19000.0,
            "flops": 2e9,
            "roofline_us": 10.0,
            "bound": "flops",
            "sol_us": 5.0,
        },
        {
            "case": "b",
            "mean": 8000.0,
            "best": 7000.0,
            "flops": 1e9,
            "roofline_us": 2.0,
            "bound": "bytes",
            "sol_us": 2.0,
        },
    ]


def test_benchmark_report_ratios():
    roof = ceilings.Roofline(100.0, "test", 1000.0, "copy")
    table = report.benchmark_report(_results(), roof, "ratio")
    column = {name: i for i, name in enumerate(table["headers"])}
    assert abs(table["summary"]["geomean_us"] - (20 * 8) ** 0.5) < 1e-9
    assert abs(table["summary"]["roofline_geomean_us"] - (10 * 2) ** 0.5) < 1e-9
    assert (
        table["rows"][0][column["x roofline"]] == "2.00"
        and table["rows"][1][column["x SOL"]] == "4.00"
    )
    assert table["rows"][0][column["TFLOP/s"]] == "100.0"  # 2 GFLOP in 20 us


@pytest.mark.parametrize(
    ("sol", "headers", "summary"),
    [
        ("ratio", ["B200 SOL us", "x SOL"], "B200 speed-of-light geomean 3.16 us (4.00x)"),
        ("figure", ["B200 SOL us"], "B200 speed-of-light geomean 3.16 us (a B200 figure, no ratio"),
        ("none", [], None),
    ],
)
def test_report_speed_of_light_columns(sol, headers, summary):
    table = report.benchmark_report(_results(), ROOF, sol)
    assert table["headers"][4:7] == ["roofline us", "x roofline", "bound"]
    assert table["headers"][7:] == headers
    assert [row[6] for row in table["rows"]] == ["flops", "bytes"]
    if summary:
        assert summary in table["text"]
    else:
        assert "SOL" not in table["text"] and "speed-of-light" not in table["text"]
    assert "roofline = the larger of FLOPs / peak and bytes / bandwidth" in table["text"]


def test_cpu_estimate():
    """Each case's inputs are run and checked once and timed CPU_MAX_REPEATS times (twice
    as many calls when rechecked); an invalid spec costs nothing."""
    plain = ceilings.cpu_calls_per_benchmark(recheck=False, baselines=False)
    assert plain == timing.NUM_ITERATIONS_PER_BENCHMARK * (2 + timing.CPU_MAX_REPEATS)
    assert ceilings.cpu_calls_per_benchmark(recheck=True, baselines=True) > plain
    case = _args([128], [4096], [1536])
    decoded = (128 + 4096) * 1536
    expected = (ceilings.flops_of(case) + ceilings.CPU_DECODE_FLOPS * decoded) / 100e12
    assert ceilings.cpu_call_seconds(case, ROOF) == pytest.approx(expected)
    tests = [specs.TestCase(case, ""), specs.TestCase({"m": (-1,)}, "m: [-1]")]
    cpu = ceilings.Roofline(0.1, "the CPU's fp32 torch.mm", 20.0, "a CPU copy")
    plan = ceilings.cpu_plan(tests, cpu, recheck=False, baselines=False)
    assert "estimate: about" in plan and "for 1 benchmark " in plan


def test_report_flags_a_baseline_under_the_roofline():
    """No baseline may beat the ceiling: if one does, the report says the ceiling is low."""
    results = _results()
    results[0]["baselines"] = {"fp16 mm per group": 9000.0, "fp16 mm stacked": 12000.0}
    roof = ceilings.Roofline(200.0, "peak", 1000.0, "copy")  # case a's 2 GFLOP: 10 us
    text = report.benchmark_report(results, roof, "none")["text"]
    assert "note: fp16 mm per group took 9.00 us on a, under its roofline of 10.00 us" in text
    assert "fp16 mm stacked took" not in text


def test_stacked_baseline_is_held_to_the_flops_bound():
    """The stacked GEMM reads one group's weights, not G: under a bytes-bound case's
    roofline it may go, under the FLOPs bound it may not."""
    roof = ceilings.Roofline(100.0, "peak", 1000.0, "copy")
    case = {"case": "d", "mean": 50000.0, "best": 49000.0, "flops": 1e9, "roofline_us": 40.0,
            "bound": "bytes", "sol_us": None}
    case["baselines"] = {"fp16 mm stacked": 15000.0, "fp16 mm per group": 45000.0}
    assert baselines._below_roofline_notes([case], roof) == []  # 15 us: above 1 GFLOP / 100 TFLOP/s
    case["baselines"] = {"fp16 mm stacked": 8000.0, "fp16 mm per group": 39000.0}
    notes = baselines._below_roofline_notes([case], roof)
    assert len(notes) == 2
    assert "fp16 mm stacked took 8.00 us on d, under its roofline of 10.00 us" in notes[0]
    assert "fp16 mm per group took 39.00 us on d, under its roofline of 40.00 us" in notes[1]


def test_fp4_valued_operands_are_decoded_nvfp4():
    """The peak's second operand kind, drawn as reference.generate_input draws: E2M1 codes
    of magnitude 0-1.5 with either sign, times 1 or 2 per 16 columns, exact in fp16, every
    value of the set present in a large draw and both signs."""
    x = ceilings.fp4_valued(64, 256, "cpu", torch.float16)
    assert x.shape == (64, 256) and x.dtype == torch.float16
    e2m1 = {0.0, 0.5, 1.0, 1.5}  # the reference keeps bits 3, 1, 0 of each nibble
    assert set(x.abs().float().unique().tolist()) == {v * f for v in e2m1 for f in (1, 2)}
    assert (x < 0).any() and (x > 0).any()
    blocks = x.float().view(64, 16, 16).abs()
    odd = blocks * 2 % 2 == 1  # 0.5 and 1.5: values only a scale of 1 gives
    assert not (odd.any(-1) & (blocks == 3).any(-1)).any()  # one scale per 16 columns


def test_report_case_without_work():
    """M = N = 0: no FLOPs, no bytes, a zero roofline: no ratio, and left out of the means."""
    empty = {"case": "e", "mean": 1000.0, "best": 900.0, "flops": 0, "roofline_us": 0.0}
    empty.update(bound="flops", sol_us=None)
    table = report.benchmark_report([empty, _results()[1]], ROOF, "none")
    assert table["rows"][0][5] == "-"
    assert table["summary"]["geomean_us"] == pytest.approx(8.0)


def test_best_seconds_is_per_call_of_a_batch(monkeypatch):
    """The ceilings are timed as batches of calls back to back (GPU_CEILING_BATCH on a
    GPU), reported per call: a batch of 3 calls of 2 ms reads about 2 ms, not 6."""
    now = [0.0]  # a clock that only the calls move: 2 ms each (the second batch 3 ms each)
    calls = []

    def two_ms():
        calls.append(1)
        now[0] += 0.002 if len(calls) <= 4 else 0.003

    monkeypatch.setattr(ceilings.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(ceilings.torch.cuda, "is_available", lambda: False)
    seconds = ceilings._best_seconds(two_ms, reps=2, batch=3)
    assert len(calls) == 1 + 2 * 3  # one warm-up, then 2 batches of 3
    assert seconds == pytest.approx(0.002)  # per call, and the faster batch
    assert ceilings.GPU_CEILING_BATCH > 1


def test_the_peak_covers_each_cases_stacked_gemm():
    """On a GPU the peak also times each case's groups stacked into one dense GEMM (the
    "fp16 mm stacked" baseline's shape), once per shape; cases whose groups differ in N or
    K, and invalid ones, have none."""
    tests = [
        specs.TestCase(_args([1024, 2048], [4096, 4096], [7168, 7168]), ""),
        specs.TestCase(_args([3000, 72], [4096, 4096], [7168, 7168]), ""),  # same stacked shape
        specs.TestCase(_args([64, 64], [4096, 2048], [7168, 7168]), ""),  # N differs
        specs.TestCase(_args([64], [4096], [100]), ""),  # K not a multiple of 256: invalid
        specs.TestCase(_args([4, 6, 7], [2048] * 3, [2048] * 3), ""),
    ]
    assert ceilings.case_gemm_shapes(tests) == [(3072, 4096, 7168), (17, 2048, 2048)]


def test_a_dense_gemm_baseline_faster_than_the_ceiling_raises_the_peak():
    """The peak is the best dense GEMM rate of the run: a cuBLAS baseline that beat the
    ceiling's GEMMs raises it (and every case's roofline and bound follow); the fp16
    fallback (decode + cuBLAS) is not a dense GEMM and never does; without such a
    baseline the roofline is the one measured."""
    roof = ceilings.Roofline(tflops=100.0, label="peak", gbps=1000.0, bandwidth_label="copy")
    fast = {"case": "p", "flops": 4e9, "bytes": 1e6, "roofline_us": 40.0, "bound": "flops",
            "baselines": {"fp16 mm stacked": 32000.0, "our fp16 fallback (decode + cuBLAS)": 31000.0}}
    small = {"case": "d", "flops": 1e7, "bytes": 3e7, "roofline_us": 30.0, "bound": "bytes",
             "baselines": {"fp16 mm per group": 50000.0}}
    assert baselines.peak_with_baselines([dict(small)], roof) is roof
    results = [fast, small]
    raised = baselines.peak_with_baselines(results, roof)
    assert raised.tflops == pytest.approx(125.0)  # 4e9 FLOPs in 32 us
    assert "raised to the rate of fp16 mm stacked on p" in raised.label and raised.gbps == 1000.0
    assert fast["roofline_us"] == pytest.approx(32.0) and fast["bound"] == "flops"
    assert small["roofline_us"] == pytest.approx(30.0) and small["bound"] == "bytes"
    # the fallback's 31 us (129 TFLOP/s) raised nothing; under the raised roofline it is
    # what the notes flag
    notes = baselines._below_roofline_notes(results, raised)
    assert len(notes) == 1 and "our fp16 fallback (decode + cuBLAS) took 31.00 us on p" in notes[0]


def test_cpu_table_says_the_exact_path_column_is_the_submissions_code():
    """On a CPU (sol "none") the submission is the exact torch path: the note says the two
    columns time the same code; on a GPU there is no such note."""
    results = _results()
    results[0]["baselines"] = {baselines.EXACT_PATH_BASELINE: 21000.0}
    cpu = report.benchmark_report(results, ROOF, "none")["text"]
    assert "note: on a CPU the submission runs the exact torch path" in cpu
    assert f"`{baselines.EXACT_PATH_BASELINE} us` time the same code" in cpu
    assert "exact torch path" not in report.benchmark_report(results, ROOF, "figure")["text"]


def test_cpu_benchmark_cases_start_in_a_fresh_worker():
    """A worker that kept an earlier case's pages ran the same code 2x faster: on a CPU the
    runner is closed before each case and its baselines, on a GPU it is kept."""
    from harness import human

    class Runner:
        closed = 0

        def close(self):
            self.closed += 1

    runner = Runner()
    human._fresh_worker_on_cpu(runner, None)
    human._fresh_worker_on_cpu(runner, "NVIDIA H100 80GB HBM3")
    assert runner.closed == 1
