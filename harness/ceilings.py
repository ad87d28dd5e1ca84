"""A machine's ceilings and a case's place under them: FLOPs and bytes of a case, the peak
and the bandwidth measured in the same run, the roofline, task.yml's B200 speed of light,
and the time a CPU run takes, estimated up front.

The roofline of a case is the larger of its FLOPs / peak and its bytes / bandwidth: on a GPU
the peak is the best of a few large fp16 torch.mm and the bandwidth the larger of a large
device copy's and sum's rate; on a CPU fp32 torch.mm and the same transfers there."""

from __future__ import annotations

import dataclasses
import functools
import os
import time

import torch

from harness.specs import SF_VEC_SIZE, TestCase, spec_problem
from harness.text import _duration, _plural, _rate
from harness.timing import CPU_MAX_REPEATS, NUM_ITERATIONS_PER_BENCHMARK
from reference import decode_e2m1

# B200 speed of light per leaderboard benchmark (task.yml), keyed by (m, n, k).
B200_SPEED_OF_LIGHT_US = {
    ((80, 176, 128, 72, 64, 248, 96, 160), (4096,) * 8, (7168,) * 8): 18.833,
    ((40, 76, 168, 72, 164, 148, 196, 160), (7168,) * 8, (2048,) * 8): 10.667,
    ((192, 320), (3072, 3072), (4096, 4096)): 2.406,
    ((128, 384), (4096, 4096), (1536, 1536)): 1.525,
}


def flops_of(args: dict) -> int:
    return sum(2 * m * n * k for m, n, k in zip(args["m"], args["n"], args["k"]))


def scale_bytes(rows: int, k: int) -> int:
    """Bytes of one operand's E4M3 scales in the blocked layout: whole atoms of 128 rows x
    4 scales (512 bytes), padding included."""
    row_atoms = -(-rows // 128)
    col_atoms = -(-(k // SF_VEC_SIZE) // 4)
    return row_atoms * col_atoms * 512


def bytes_of(args: dict) -> int:
    """Bytes a call moves at the least: A and B in FP4 (K/2 bytes a row), their blocked
    scales, and C written in fp16."""
    total = 0
    for m, n, k in zip(args["m"], args["n"], args["k"]):
        total += (m + n) * k // 2 + scale_bytes(m, k) + scale_bytes(n, k) + 2 * m * n
    return total


@dataclasses.dataclass
class Roofline:
    """A machine's ceilings, measured in the run that uses them."""

    tflops: float  # the peak: the best matmul rate seen
    label: str  # what the peak is (dtype, shapes, device)
    gbps: float  # the bandwidth: the larger of a large copy's and a large sum's rate, in GB/s
    bandwidth_label: str


def roofline_time(flops: float, nbytes: float, roof: Roofline) -> tuple[float, str]:
    """Seconds at the roofline and the bound that sets them: "flops" when FLOPs / peak is
    the larger, else "bytes" (bytes / bandwidth)."""
    compute = flops / (roof.tflops * 1e12)
    memory = nbytes / (roof.gbps * 1e9)
    return (compute, "flops") if compute >= memory else (memory, "bytes")


# fp16 GEMMs (M, N, K) whose best rate is the GPU's peak: no cuBLAS call beats it.
# Each runs twice, on normal random operands and on FP4-valued ones (fp4_valued: E2M1
# values times E4M3 scales of 1 or 2 per 16, drawn as the reference draws them): the tensor
# cores draw less power on values with few significant bits and clock higher, so cuBLAS on
# the baselines' decoded operands beat a ceiling measured on normal values alone by up to
# 16 % on the H200 (python eval.py benchmark --baselines tools/regime_specs.txt). The two
# of 0.15-0.4 ms (K = 7168) read 863-875 TFLOP/s on FP4-valued operands there, one call
# at a time, against 848-882 for 8192^3: short GEMMs finish before the clocks settle
# lower. cuBLAS stacked on the prefill cases (3072 x 4096 x 7168) still read 1.8 % over
# the best of these, timed in batches (the same command on 1932dbf), so on a GPU the peak
# also takes every benchmarked case's own stacked GEMM (case_gemm_shapes).
GPU_PEAK_SHAPES = ((8192, 8192, 8192), (16384, 16384, 16384), (8192, 16384, 8192),
                   (2048, 4096, 7168), (6144, 4096, 7168))
# GPU timings of the ceilings take this many calls between one pair of events, as the
# benchmark times its 15 calls: with one call, the GPU reaches the first event and then
# waits for the host to launch the call (about 5 us on the H200's host, 2-3 % of a 0.2 ms
# GEMM); with several, the later launches queue while the first call runs
GPU_CEILING_BATCH = 4
CPU_PEAK_SHAPES = ((1024, 1024, 1024), (2048, 2048, 2048))
GPU_COPY_BYTES = 2 << 30  # a copy of 2 GiB: 4 GiB read + written
CPU_COPY_BYTES = 256 << 20


def _best_seconds(fn, reps: int, batch: int | None = None) -> float:
    """Seconds per call of fn: the fastest of `reps` timings of `batch` calls back to back
    (None: GPU_CEILING_BATCH on a GPU, 1 on a CPU), after one warm-up call; CUDA events
    around each batch on a GPU, the host clock on a CPU."""
    if batch is None:
        batch = GPU_CEILING_BATCH if torch.cuda.is_available() else 1
    fn()
    times = []
    for _ in range(reps):
        if torch.cuda.is_available():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(batch):
                fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) * 1e-3 / batch)
        else:
            t0 = time.perf_counter()
            for _ in range(batch):
                fn()
            times.append((time.perf_counter() - t0) / batch)
    return min(times)


def _shape_text(shapes) -> str:
    return ", ".join("x".join(str(d) for d in shape) for shape in shapes)


def fp4_valued(rows: int, cols: int, device, dtype) -> torch.Tensor:
    """A (rows, cols) matrix of decoded NVFP4 values (cols even) drawn as the reference draws
    them: E2M1 codes with the sign and the two low bits of each nibble (0, +-0.5, +-1,
    +-1.5: reference._create_fp4_tensors) times a scale of 1 or 2 per 16 consecutive
    columns, exact in fp16. On all 16 codes the H200's GEMMs ran slower than cuBLAS on the
    baselines' decoded operands (fp16 mm stacked at 3072 x 4096 x 7168 read 893 TFLOP/s
    against 883.5 for the best of these: python eval.py benchmark --baselines
    tools/regime_specs.txt on 2d27def)."""
    packed = torch.randint(0, 256, (rows, cols // 2), dtype=torch.uint8, device=device) & 0xBB
    scales = torch.randint(1, 3, (rows, -(-cols // 16)), device=device).to(torch.float32)
    values = decode_e2m1(packed) * scales.repeat_interleave(16, dim=1)[:, :cols]
    return values.to(dtype)


def case_gemm_shapes(tests) -> list[tuple[int, int, int]]:
    """The dense fp16 GEMM (sum of M, N, K) that each valid case's groups make stacked, where
    they share N and K: the "fp16 mm stacked" baseline's shape, which the peak must cover."""
    shapes = []
    for test in tests:
        args = test.args
        if spec_problem(args) or len(set(args["n"])) != 1 or len(set(args["k"])) != 1:
            continue
        shape = (sum(args["m"]), args["n"][0], args["k"][0])
        if shape not in shapes:
            shapes.append(shape)
    return shapes


def measure_peak(extra_shapes=()) -> tuple[float, str]:
    """The best torch.mm rate in TFLOP/s over a few large GEMMs (and, on a GPU, the
    `extra_shapes`: the benchmarked cases' own stacked GEMMs), each on normal random and
    on FP4-valued operands, and its label: fp16 on a GPU, fp32 on a CPU (which has no fast
    fp16 path)."""
    cuda = torch.cuda.is_available()
    device, dtype = ("cuda", torch.float16) if cuda else ("cpu", torch.float32)
    shapes = GPU_PEAK_SHAPES if cuda else CPU_PEAK_SHAPES
    extra = [shape for shape in extra_shapes if shape not in shapes] if cuda else []
    makers = (
        lambda r, c: torch.randn(r, c, device=device, dtype=dtype),
        lambda r, c: fp4_valued(r, c, device, dtype),
    )
    best = 0.0
    for m, n, k in (*shapes, *extra):
        for make in makers:
            a, b = make(m, k), make(n, k).T
            seconds = _best_seconds(lambda a=a, b=b: a @ b, reps=10 if cuda else 3)
            best = max(best, 2 * m * n * k / seconds / 1e12)
            del a, b
    operands = "normal and FP4-valued operands"
    also = f" and the cases' stacked GEMMs ({_shape_text(extra)})" if extra else ""
    if cuda:
        label = f"fp16 torch.mm on {torch.cuda.get_device_name()}, best of {_shape_text(shapes)}{also}, {operands}"
    else:
        label = f"the CPU's fp32 torch.mm ({os.cpu_count()} cores), best of {_shape_text(shapes)}, {operands}"
    return best, label


def copy_and_sum_rates(src) -> tuple[float, float]:
    """GB/s of a copy of `src` (a uint8 tensor of a multiple of 8 bytes; bytes read +
    written) and of a sum of its bytes as int64 words (bytes read), the best of 5 timings."""
    size = src.numel()
    copy = 2 * size / _best_seconds(functools.partial(torch.Tensor.copy_, torch.empty_like(src), src), reps=5) / 1e9
    words = src.view(torch.int64)
    read = size / _best_seconds(lambda: words.sum(), reps=5) / 1e9
    return copy, read


def measure_bandwidth() -> tuple[float, str]:
    """The memory bandwidth in GB/s and its label: the larger of a large copy's rate (bytes
    read + written) and a large sum's (bytes read). A GEMM's operand bytes are nearly all
    read, and reads alone ran 1-3 % faster than the copy on the H200 (python
    tools/probes/read_bandwidth.py), so the copy alone would be a ceiling that such a kernel
    could beat."""
    if torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info()
        size = min(GPU_COPY_BYTES, free // 4) // 8 * 8
        src = torch.ones(size, dtype=torch.uint8, device="cuda")
        where = f"on {torch.cuda.get_device_name()}"
    else:
        size = CPU_COPY_BYTES
        src = torch.ones(size, dtype=torch.uint8)  # written, so that reads hit real pages
        where = "on the CPU"
    copy, read = copy_and_sum_rates(src)
    gib = f"{size / 2**30:.2g} GiB"
    if read > copy:
        return read, f"a sum of {gib} {where}, read; a copy ran {_rate(copy)} GB/s read + written"
    return copy, f"a copy of {gib} {where}, read + written; a sum ran {_rate(read)} GB/s read"


def measure_roofline(gemm_shapes=()) -> Roofline:
    """The peak (measure_peak, also over `gemm_shapes` on a GPU) and the bandwidth."""
    tflops, label = measure_peak(gemm_shapes)
    gbps, bandwidth_label = measure_bandwidth()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # the benchmarks' L2 flush sizes itself by free memory
    return Roofline(tflops, label, gbps, bandwidth_label)


def sol_mode(device_name: str | None) -> str:
    """How to show task.yml's B200 speed of light: "ratio" on a B200, "figure" (the B200's
    number, no ratio) on another GPU, "none" on a CPU (device_name None)."""
    if device_name is None:
        return "none"
    return "ratio" if "B200" in device_name else "figure"


# A CPU benchmark: per case, each of its 15 inputs is made, run and checked once, then timed
# CPU_MAX_REPEATS times (and rechecked each time in leaderboard mode); --baselines times the
# exact path as often again. On the CPU the torch path and the reference both decode A and
# B to fp32 with elementwise passes and then multiply, so a call or a check costs about
# (FLOPs + CPU_DECODE_FLOPS * FP4 values decoded) / the fp32 matmul peak. The constant is
# fitted on task.yml's four benchmarks, each case in a fresh worker (python eval.py
# benchmark on a 2-core AMD EPYC: 306, 138, 38 and 13 s measured, 301, 149, 36 and 18 s
# estimated; docs/eval.md has the run's figures); the estimate is a rough guide.
CPU_DECODE_FLOPS = 3500


def cpu_call_seconds(args: dict, roof: Roofline) -> float:
    """About how long one torch-path call, or one check, of this case takes on a CPU."""
    decoded = sum((m + n) * k for m, n, k in zip(args["m"], args["n"], args["k"]))
    return (flops_of(args) + CPU_DECODE_FLOPS * decoded) / (roof.tflops * 1e12)


def cpu_calls_per_benchmark(recheck: bool, baselines: bool) -> int:
    """Calls and checks of one benchmark case on a CPU, as human_benchmarks runs it."""
    timed = CPU_MAX_REPEATS * (2 if recheck else 1) + (CPU_MAX_REPEATS if baselines else 0)
    return NUM_ITERATIONS_PER_BENCHMARK * (2 + timed)


def _roofline_text(roof: Roofline) -> str:
    return (
        f"peak {_rate(roof.tflops)} TFLOP/s ({roof.label}); "
        f"bandwidth {_rate(roof.gbps)} GB/s ({roof.bandwidth_label})"
    )


def cpu_plan(tests: list[TestCase], roof: Roofline, recheck: bool, baselines: bool) -> str:
    """What a CPU benchmark run does, and about how long it takes."""
    runnable = [test for test in tests if not spec_problem(test.args)]
    calls = cpu_calls_per_benchmark(recheck, baselines)
    seconds = calls * sum(cpu_call_seconds(test.args, roof) for test in runnable)
    rechecked = ", each rechecked" if recheck else ""
    return (
        f"no GPU: each benchmark makes {NUM_ITERATIONS_PER_BENCHMARK} inputs, runs and checks "
        f"each once, then times {CPU_MAX_REPEATS} repeats of the {NUM_ITERATIONS_PER_BENCHMARK} "
        f"calls by the host clock{rechecked} (a GPU run repeats until the standard error is "
        f"under 0.1%)\nestimate: {_duration(seconds)} for "
        f"{_plural(len(runnable), 'benchmark')} (from the FLOPs and the FP4 values decoded, "
        "at this CPU's fp32 matmul rate)"
    )


def _set_roofline(entry: dict, roof: Roofline) -> None:
    """An entry's roofline_us and bound from its flops and bytes (roofline_time)."""
    seconds, bound = roofline_time(entry["flops"], entry["bytes"], roof)
    entry.update(roofline_us=seconds * 1e6, bound=bound)
