"""Evaluation harness for `nvfp4_group_gemm`, compatible with the leaderboard's eval.

Protocol mode (what the leaderboard runs):
    POPCORN_FD=3 python eval.py {test|benchmark|leaderboard|profile} SPECFILE 3>out.txt
writes `key: value` lines to the descriptor, runs each case in one spawned worker process,
times as the leaderboard does (L2 flushed, one CUDA-event pair around the 15 calls of a
benchmark, divided by 15, repeated until the standard error is under 0.1% of the mean or
the time budget ends) and exits 0 when everything passes, 112 otherwise.

Human mode (no POPCORN_FD):
    python eval.py test                      # the 10 task.yml tests, a readable table
    python eval.py benchmark [--baselines] [--report reports/] [SPECFILE | SPEC ...]
    python eval.py leaderboard
    python eval.py test "m: [96]; n: [128]; k: [256]; g: 1; seed: 7"
runs task.yml's cases (or the given spec lines and spec files; options and specs in any
order) and prints tables: pass/fail and the worst mismatch for tests; mean and best time,
TFLOP/s and the ratio to this machine's roofline (measured in the same run) for benchmarks,
and on a B200 the ratio to task.yml's speed of light. It works on a CPU-only machine, with
fewer timing repeats; it then says up front what it will run and about how long it takes,
and shows a long case's progress (inputs made, calls checked, rounds timed, time left).
`--report DIR` writes benchmark-<gpu>.md and .png (benchmark-cpu without a GPU) into DIR.

Specs: one case per line, `m: [..]; n: [..]; k: [..]; g: G; seed: S`; human mode skips
blank lines and `#` lines of a spec file, protocol mode takes the leaderboard's format
(every line a case). A case that generate_input cannot build (a missing or unknown field,
lists that are not g integers, a negative M or N, K not a positive multiple of 16) fails
with one line saying why. M = 0 and N = 0 are legal empty groups (an empty c, nothing to
compare), as in custom_kernel. A case whose tensors (its inputs, their copies, the checks'
work: case_memory) would not fit in the memory free on the device it runs on fails before
anything is allocated, saying how much it needs and how much is free. A case that raises
(custom_kernel's ValueError names the group and the field), mismatches or runs past its
time limit fails with its message, and the other cases still run; in protocol mode every
case gets its lines and the `check:` line is always written. No traceback is printed
unless `--traceback` is given (in either mode).

Time limit per case: EVAL_TIMEOUT_S seconds (0: none). Unset, protocol mode uses the
leaderboard's limit for the whole mode (test and benchmark 180 s, leaderboard 300 s) and
human mode has none. A case past it fails and its worker process is replaced.

Exit status (both modes): 0 every case passed; 112 a case failed; 113 the spec file cannot
be read or a line of it does not parse (`garbage`), as the leaderboard's eval does (it stops
before running anything; this one also writes `check: fail` to the descriptor), a spec file
with no case, a key given twice or a seed outside 0..2^32-1; 2 a wrong command line or
environment variable (EVAL_TIMEOUT_S, POPCORN_FD, POPCORN_SEED), or a --report or --json
path that cannot be written, said in one line before any case runs (an open POPCORN_FD
gets `check: fail`); 130 interrupted (Ctrl-C: the worker is ended, what finished is printed, and
in protocol mode the interrupted case fails with `interrupted` before `check: fail`).

The roofline of a case is the larger of its FLOPs / peak and its bytes / bandwidth, both
measured in the same run: on a GPU the best of a few large fp16 torch.mm and the larger of
a large device copy's and sum's rate, on a CPU fp32 torch.mm and the same transfers there.
The table says which bound holds.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import errno
import functools
import importlib.util
import json
import math
import multiprocessing
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports a process ended by SIGINT


def _interrupted_at_start(signum, frame):
    """Ctrl-C while eval.py is still importing torch: one line and exit status 130."""
    print("interrupted", file=sys.stderr, flush=True)
    os._exit(EXIT_INTERRUPTED)


if __name__ == "__main__" and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _interrupted_at_start)

# Disable CuTe DSL file caching for more stable benchmarking (as the leaderboard does).
os.environ["CUTE_DSL_DISABLE_FILE_CACHING"] = "1"

import torch  # noqa: E402

from reference import check_implementation, decode_e2m1, generate_input, ref_kernel  # noqa: E402
from utils import clear_l2_cache_large as clear_l2_cache  # noqa: E402
from utils import set_seed  # noqa: E402

NUM_ITERATIONS_PER_BENCHMARK = 15
HERE = Path(__file__).resolve().parent
RTOL = ATOL = 1e-3
SF_VEC_SIZE = 16  # one E4M3 scale per 16 K values
# B200 speed of light per leaderboard benchmark (task.yml), keyed by (m, n, k).
B200_SPEED_OF_LIGHT_US = {
    ((80, 176, 128, 72, 64, 248, 96, 160), (4096,) * 8, (7168,) * 8): 18.833,
    ((40, 76, 168, 72, 164, 148, 196, 160), (7168,) * 8, (2048,) * 8): 10.667,
    ((192, 320), (3072, 3072), (4096, 4096)): 2.406,
    ((128, 384), (4096, 4096), (1536, 1536)): 1.525,
}
# CPU timing: the leaderboard repeats up to 100 times; a CPU-only run keeps this short.
CPU_MAX_REPEATS = 2
# The leaderboard's time limit for each mode, in seconds: the default limit per case here.
MODE_TIME_LIMIT_S = {"test": 180, "benchmark": 180, "leaderboard": 300}
EXIT_FAIL = 112
EXIT_BAD_SPEC_FILE = 113
EXIT_USAGE = 2
SPEC_FIELDS = ("m", "n", "k", "g", "seed")
# Seeds that set_seed takes (numpy's legacy seeding): --seed, POPCORN_SEED and a spec's seed
SEED_MAX = 2**32 - 1
SEED_RANGE = f"an integer from 0 to {SEED_MAX}"


def _init_worker():
    os.environ["CUTE_DSL_DISABLE_FILE_CACHING"] = "1"
    # Ctrl-C reaches the whole process group: the parent ends the worker (CaseRunner.close)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class PopcornOutput:
    def __init__(self, fd: int):
        self.file = os.fdopen(fd, "w")
        os.set_inheritable(fd, False)
        self.checked = False
        self.open_case = None  # "test.3" from its spec line until its next line

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        self.file.close()

    def print(self, *args, **kwargs):
        print(*args, **kwargs, file=self.file, flush=True)

    def log(self, key, value):
        self.print(f"{key}: {value}")
        case, _, field = key.rpartition(".")
        if field == "spec":
            self.open_case = case
        elif case == self.open_case:
            self.open_case = None

    def finish(self, passed: bool) -> int:
        """The final `check:` line; the exit status that goes with it."""
        self.log("check", "pass" if passed else "fail")
        self.checked = True
        return 0 if passed else EXIT_FAIL


@dataclasses.dataclass
class TestCase:
    args: dict
    spec: str


class SpecFileError(Exception):
    """A spec file that cannot be read, or a line that does not parse (exit status 113)."""


def _combine(a: int, b: int) -> int:
    # Cantor pairing: a large secret seed gives a large combined seed.
    return int(a + (a + b) * (a + b + 1) // 2)


_SPEC_PART = r"\s*([a-zA-Z_]+)\s*:\s*(\[[^\]]*\]|\([^)]*\)|[a-zA-Z_]+|[+-]?[0-9]+)\s*"


def parse_spec(line: str) -> dict:
    """`m: [96, 128]; n: [128, 256]; k: [256, 512]; g: 2; seed: 1111` -> dict.

    Raises ValueError on a part that is not `key: value`, a key given twice and an integer
    seed outside 0..SEED_MAX. A value that is neither an integer nor a list of integers
    stays a string; spec_problem says what is wrong with it.
    """
    case = {}
    for part in line.split(";"):
        matched = re.fullmatch(_SPEC_PART, part)
        if not matched:
            raise ValueError(f"invalid test case: '{line}': '{part}' is not `key: value`")
        key, val = matched[1], matched[2]
        if key in case:
            raise ValueError(f"invalid test case: '{line}': key '{key}' is given twice")
        try:
            val = int(val)
        except ValueError:
            if val[:1] in "([" and val[-1:] in ")]":
                inner = val[1:-1].strip()
                try:
                    val = tuple(int(x.strip()) for x in inner.split(",")) if inner else ()
                except ValueError:
                    pass
        if key == "seed" and _is_int(val) and not 0 <= val <= SEED_MAX:
            raise ValueError(
                f"invalid test case: '{line}': field 'seed': expected {SEED_RANGE}, got {val}"
            )
        case[key] = val
    return case


def spec_line(case: dict) -> str:
    def fmt(v):
        return "[" + ", ".join(str(x) for x in v) + "]" if isinstance(v, (list, tuple)) else str(v)

    return "; ".join(f"{k}: {fmt(v)}" for k, v in case.items())


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def spec_problem(args: dict) -> str:
    """What keeps generate_input from building this case, or "" when nothing does.

    Messages name the field (and the group), as custom_kernel's ValueErrors do. M = 0 and
    N = 0 are legal empty groups.
    """
    missing = [f"'{f}'" for f in SPEC_FIELDS if f not in args]
    if missing:
        return f"missing {'field' if len(missing) == 1 else 'fields'} {', '.join(missing)}"
    unknown = [f"'{f}'" for f in args if f not in SPEC_FIELDS]
    if unknown:
        return f"unknown {'field' if len(unknown) == 1 else 'fields'} {', '.join(unknown)}"
    for field in ("g", "seed"):
        if not _is_int(args[field]):
            return f"field '{field}': expected an integer, got {args[field]!r}"
    g = args["g"]
    if g < 1:
        return f"field 'g': g = {g}; a case has at least one group"
    for field in ("m", "n", "k"):
        sizes = args[field]
        if not isinstance(sizes, (tuple, list)) or not all(_is_int(s) for s in sizes):
            return f"field '{field}': expected a list of {_plural(g, 'integer')}, got {sizes!r}"
        if len(sizes) != g:
            return f"field '{field}': {_plural(len(sizes), 'size')}, but g = {g}"
    for group, (m, n, k) in enumerate(zip(args["m"], args["n"], args["k"])):
        for field, size in (("m", m), ("n", n)):
            if size < 0:
                return f"group {group}: field '{field}': {field.upper()} = {size} is negative"
        if k <= 0 or k % SF_VEC_SIZE:
            return f"group {group}: field 'k': K = {k} is not a positive multiple of {SF_VEC_SIZE}"
    return ""


def _skipped_line(line: str) -> bool:
    """A blank line or a `#` comment line, which human mode skips in a spec file."""
    return not line.strip() or line.lstrip().startswith("#")


def read_spec_file(file_name: str, strict: bool = True) -> list[TestCase]:
    """The cases of a spec file, one a line; SpecFileError names the file and the line.

    strict (protocol mode): the leaderboard's format, where every line is a case and a
    blank or comment line does not parse. Otherwise blank lines and lines starting with
    `#` are skipped."""
    try:
        content = Path(file_name).read_text()
    except Exception as e:
        raise SpecFileError(f"Could not open test file `{file_name}`: {e}") from None
    tests = []
    for number, line in enumerate(content.splitlines(), 1):
        if _skipped_line(line):
            if not strict:
                continue
            raise SpecFileError(
                f"{file_name}, line {number}: invalid test case: '{line}': the leaderboard's "
                "spec files have one case on every line (no blank or # lines; human mode "
                "skips them)"
            )
        try:
            tests.append(TestCase(spec=line, args=parse_spec(line)))
        except ValueError as e:
            raise SpecFileError(f"{file_name}, line {number}: {e}") from None
    if not tests:
        raise SpecFileError(f"{file_name} holds no cases: a spec file has one case a line")
    return tests


def _apply_secret_seed(tests: list[TestCase], seed: int | None) -> list[TestCase]:
    if seed is not None:
        for test in tests:
            if _is_int(test.args.get("seed")):
                test.args["seed"] = _combine(test.args["seed"], seed)
    return tests


@dataclasses.dataclass
class Stats:
    runs: int
    mean: float
    std: float
    err: float
    best: float
    worst: float


def calculate_stats(durations: list[float]) -> Stats:
    """Stats over durations in nanoseconds (std and err are 0 for a single run)."""
    runs = len(durations)
    avg = sum(durations) / runs
    variance = sum((x - avg) ** 2 for x in durations)
    std = math.sqrt(variance / (runs - 1)) if runs > 1 else 0.0
    err = std / math.sqrt(runs)
    return Stats(runs, avg, std, err, float(min(durations)), float(max(durations)))


def _clone_data(data):
    if isinstance(data, tuple):
        return tuple(_clone_data(x) for x in data)
    if isinstance(data, list):
        return [_clone_data(x) for x in data]
    if isinstance(data, dict):
        return {k: _clone_data(v) for k, v in data.items()}
    if isinstance(data, torch.Tensor):
        return data.clone()
    return data


def _synchronize():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


# --------------------------------------------------------------------------------------
# FLOPs, bytes and the roofline (plain math, tested on the CPU)
# --------------------------------------------------------------------------------------
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
# fitted on task.yml's four benchmarks (a 2-core CPU: 11 min measured, 11 min estimated,
# within 1.7x per shape); the estimate is a rough guide.
CPU_DECODE_FLOPS = 5000


def cpu_call_seconds(args: dict, roof: Roofline) -> float:
    """About how long one torch-path call, or one check, of this case takes on a CPU."""
    decoded = sum((m + n) * k for m, n, k in zip(args["m"], args["n"], args["k"]))
    return (flops_of(args) + CPU_DECODE_FLOPS * decoded) / (roof.tflops * 1e12)


def cpu_calls_per_benchmark(recheck: bool, baselines: bool) -> int:
    """Calls and checks of one benchmark case on a CPU, as human_benchmarks runs it."""
    timed = CPU_MAX_REPEATS * (2 if recheck else 1) + (CPU_MAX_REPEATS if baselines else 0)
    return NUM_ITERATIONS_PER_BENCHMARK * (2 + timed)


# --------------------------------------------------------------------------------------
# The memory a case needs, checked before it runs (plain math, tested on the CPU)
# --------------------------------------------------------------------------------------
# Work beyond the tensors a step keeps, from the peak resident memory of the worker
# functions on a CPU (M, N, K from 256 to 8192): ref_kernel (each check) and the exact path
# decode a group's A and B to fp32 through int32 / fp32 temporaries, about 30 bytes per
# FP4 value at their peak, then multiply into fp32 and round to fp16; worst_mismatch holds
# fp32 copies of out and ref and the ratio between them.
DECODE_WORK_BYTES = 32  # per FP4 value of a group's A and B
PRODUCT_WORK_BYTES = 8  # per element of a group's C
MISMATCH_WORK_BYTES = 24  # per element of a group's C
DEQUANTIZED_BASELINE_BYTES = 6  # per FP4 value: the GPU baselines' bf16 / fp16 operands
# The allocators' slack on top: on a CPU, temporaries under glibc's mmap threshold (32 MiB)
# come from its heap, which fragments and grows (a case of four 2048^3 groups peaked 140 MiB
# over the rest of the estimate); on a GPU, the caching allocator's rounding.
ALLOCATOR_SLACK_BYTES = 256 << 20
# A case runs when its estimate is at most this fraction of the memory free where it runs.
MEMORY_HEADROOM = 0.9
# Copies of one input that each worker function holds at its peak, with what else it keeps:
# a test the input and the copy custom_kernel gets (the human test also the reference's
# copy); a benchmark its 15 inputs, their 15 copies for the checks and the copy of the call
# being checked, with the 15 outputs; the baselines their 15 inputs.
WORKER_INPUT_COPIES = {
    "_run_single_test": 2,
    "_run_single_test_detailed": 3,
    "_run_single_benchmark": 2 * NUM_ITERATIONS_PER_BENCHMARK + 1,
    "_run_single_profile_torch": 2,
    "_run_single_profile_ncu": 2,
    "_run_baselines": NUM_ITERATIONS_PER_BENCHMARK,
}


def _groups(args: dict):
    return zip(args["m"], args["n"], args["k"])


def input_bytes(args: dict, cuda: bool) -> int:
    """Bytes of one generate_input on the compute device: A and B (K/2 bytes a row), C in
    fp16 and the blocked scales, and on a CPU also the plain scales (on the CPU anyway)."""
    total = 0
    for m, n, k in _groups(args):
        total += (m + n) * k // 2 + 2 * m * n + scale_bytes(m, k) + scale_bytes(n, k)
        if not cuda:
            total += (m + n) * (k // SF_VEC_SIZE)
    return total


def case_memory(args: dict, worker: str, cuda: bool) -> int:
    """About the most bytes the worker function `worker` (by name) holds at once for this
    case on the compute device: its copies of the inputs (WORKER_INPUT_COPIES) and the
    largest group's work in a check or a call (the outputs of a benchmark too) and the
    allocators' slack."""
    groups = list(_groups(args))
    work = max(
        DECODE_WORK_BYTES * (m + n) * k + PRODUCT_WORK_BYTES * m * n for m, n, k in groups
    )
    total = WORKER_INPUT_COPIES[worker] * input_bytes(args, cuda)
    if worker == "_run_single_test_detailed":
        work = max(work, max(MISMATCH_WORK_BYTES * m * n for m, n, _ in groups))
    if worker == "_run_single_benchmark":
        total += NUM_ITERATIONS_PER_BENCHMARK * sum(2 * m * n for m, n, _ in groups)
    if worker == "_run_baselines" and cuda:
        values = sum((m + n) * k for m, n, k in groups)
        total += NUM_ITERATIONS_PER_BENCHMARK * DEQUANTIZED_BASELINE_BYTES * values
    return total + work + ALLOCATOR_SLACK_BYTES


def bytes_text(count: float) -> str:
    """1.5 KiB, 21.3 GiB, 5.4 TiB: binary units, three significant digits at most."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if count < 1000 or unit == "PiB":
            break
        count /= 1024
    return f"{count:.0f} {unit}" if unit == "B" else f"{count:.3g} {unit}"


def memory_problem(needed: int, where: str, free: int | None) -> str:
    """Why a case needing `needed` bytes cannot run where `free` bytes are free (in words:
    `where`), or "" when it fits within MEMORY_HEADROOM of them or free is unknown."""
    if free is None or needed <= MEMORY_HEADROOM * free:
        return ""
    return (
        f"the case needs about {bytes_text(needed)}; {where} has {bytes_text(free)} free, "
        f"of which a case may use {MEMORY_HEADROOM:.0%} ({bytes_text(MEMORY_HEADROOM * free)})"
    )


def _cgroup_free_bytes() -> int | None:
    """What this container's memory limit leaves (limit - usage + inactive file pages),
    where a cgroup (v2 or v1) sets one; None elsewhere."""
    for limit_file, usage_file, stat_file, inactive in (
        ("memory.max", "memory.current", "memory.stat", "inactive_file"),
        ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes", "memory/memory.stat",
         "total_inactive_file"),
    ):
        root = Path("/sys/fs/cgroup")
        try:
            limit = (root / limit_file).read_text().strip()
            usage = int((root / usage_file).read_text())
        except (OSError, ValueError):
            continue
        if not limit.isdigit() or int(limit) >= 1 << 60:  # "max", or no limit
            return None
        stat = dict(line.split() for line in (root / stat_file).read_text().splitlines())
        return int(limit) - usage + int(stat.get(inactive, 0))
    return None


def host_free_bytes() -> int | None:
    """The host memory a new allocation can have: MemAvailable (/proc/meminfo), or the
    free pages (os.sysconf) where there is no /proc, capped by a cgroup's limit; None
    when neither is known."""
    free = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                free = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if free is None:
        try:
            free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):
            return None
    try:
        limited = _cgroup_free_bytes()
    except (OSError, ValueError):
        limited = None
    return free if limited is None else min(free, limited)


# --------------------------------------------------------------------------------------
# Worker-side functions (run in the spawned process)
# --------------------------------------------------------------------------------------
@dataclasses.dataclass
class CaseError:
    """A case that raised, or ran past its time limit, instead of giving a result."""

    message: str


def one_line(text: str) -> str:
    """Text on one line (a protocol value must not hold a newline)."""
    return " | ".join(line.strip() for line in str(text).splitlines() if line.strip())


def _guarded(fn, args: tuple, show_traceback: bool):
    """fn(*args) in the worker; an exception becomes a CaseError with its type and message
    (some exceptions, the CuTe DSL's among them, do not survive the trip back)."""
    try:
        return fn(*args)
    except (Exception, SystemExit) as e:
        if show_traceback:
            traceback.print_exc()
        return CaseError(one_line(f"{type(e).__name__}: {e}"))


def _ping() -> bool:
    return True


def _free_memory() -> tuple[str, int | None, bool]:
    """Where a case's tensors go, in words, the bytes free there (None: unknown) and
    whether that is a GPU: the worker's CUDA device (free to the driver, and what torch
    holds cached but unused), else the host."""
    if torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info()
        free += torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
        return f"the GPU ({torch.cuda.get_device_name()})", free, True
    return "the CPU", host_free_bytes(), False


def _run_single_test(test: TestCase):
    from submission import custom_kernel

    data = generate_input(**test.args)
    _synchronize()
    submission_output = custom_kernel(_clone_data(data))
    _synchronize()
    return check_implementation(data, submission_output)


def _same_shapes(outputs, expected) -> bool:
    if not isinstance(outputs, (list, tuple)) or len(outputs) != len(expected):
        return False
    return all(
        isinstance(o, torch.Tensor) and o.shape == r.shape for o, r in zip(outputs, expected)
    )


def worst_mismatch(outputs, expected) -> dict:
    """The element with the largest |out - ref| / (atol + rtol |ref|) over all groups; an
    empty group (M = 0 or N = 0) has none. group is None when every group is empty."""
    worst = {"ratio": 0.0, "group": None, "index": None, "got": None, "expected": None}
    for g, (out, ref) in enumerate(zip(outputs, expected)):
        if ref.numel() == 0:
            continue
        out32, ref32 = out.float().to(ref.device), ref.float()
        ratio = (out32 - ref32).abs() / (ATOL + RTOL * ref32.abs())
        ratio = torch.where(
            torch.isnan(out32) == torch.isnan(ref32), ratio.nan_to_num(0.0), math.inf
        )
        value, flat = ratio.flatten().max(dim=0)
        if value.item() > worst["ratio"] or worst["group"] is None:
            idx = tuple(int(i) for i in torch.unravel_index(flat, ratio.shape))
            worst = {
                "ratio": float(value.item()),
                "group": g,
                "index": idx,
                "got": float(out32[idx].item()),
                "expected": float(ref32[idx].item()),
            }
    return worst


def _run_single_test_detailed(test: TestCase) -> dict:
    """Human mode: pass/fail, the leaderboard's message and the worst element."""
    from submission import custom_kernel

    data = generate_input(**test.args)
    _synchronize()
    start = time.perf_counter()
    output = custom_kernel(_clone_data(data))
    _synchronize()
    seconds = time.perf_counter() - start
    expected = ref_kernel(_clone_data(data))
    ok, message = check_implementation(data, output)
    worst = worst_mismatch(output, expected) if _same_shapes(output, expected) else None
    return {"ok": ok, "message": message, "worst": worst, "seconds": seconds}


class _Timer:
    """CUDA events on a GPU (as the leaderboard), the host clock on a CPU."""

    def __init__(self):
        self.cuda = torch.cuda.is_available()

    def start(self):
        if self.cuda:
            self._start = torch.cuda.Event(enable_timing=True)
            self._end = torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._t0 = time.perf_counter_ns()

    def stop_ns(self) -> float:
        if self.cuda:
            self._end.record()
            torch.cuda.synchronize()
            return self._start.elapsed_time(self._end) * 1e6
        return float(time.perf_counter_ns() - self._t0)


def _benchmark_inputs(test: TestCase) -> list:
    data_list = []
    for i in range(NUM_ITERATIONS_PER_BENCHMARK):
        if "seed" in test.args:
            test.args["seed"] += 42
        data_list.append(generate_input(**test.args))
        report_progress(f"inputs {i + 1}/{NUM_ITERATIONS_PER_BENCHMARK} made")
    return data_list


def _left(seconds: float | None) -> str:
    """", about 40 s left" (nothing when the time left is not known)."""
    return "" if seconds is None else f", {_duration(seconds)} left"


def time_calls(fn, data_list, recheck, check_copy, max_repeats, max_time_ns):
    """The leaderboard's timing loop. Returns Stats or an error message."""
    durations = []
    timer = _Timer()
    if not timer.cuda:
        max_repeats = min(max_repeats, CPU_MAX_REPEATS)
    bm_start_time = time.perf_counter_ns()
    for i in range(max_repeats):
        _synchronize()
        outputs = []
        clear_l2_cache()
        timer.start()
        for j, data in enumerate(data_list):
            outputs.append(fn(data))
            if not timer.cuda:  # a CPU round can take minutes (a send is some us a second)
                calls = f"call {j + 1}/{len(data_list)}"
                report_progress(f"round {i + 1} of {max_repeats}: {calls}")
        duration = timer.stop_ns() / NUM_ITERATIONS_PER_BENCHMARK
        if recheck:
            for reference_output, custom_output in zip(check_copy, outputs):
                good, message = check_implementation(reference_output, custom_output)
                if not good:
                    return message
        durations.append(duration)
        total_bm_duration = time.perf_counter_ns() - bm_start_time
        # On a CPU the rounds are few and long: how many are done and the time left
        if timer.cuda:
            report_progress(f"round {i + 1} timed")
        else:
            rounds_left = max_repeats - i - 1
            left = rounds_left * total_bm_duration / (i + 1) * 1e-9 if rounds_left else None
            report_progress(f"round {i + 1} of {max_repeats} timed{_left(left)}")
        if i > 1 and total_bm_duration > 1e8:
            stats = calculate_stats(durations)
            if (
                stats.err / stats.mean < 0.001
                or stats.mean * stats.runs > max_time_ns
                or total_bm_duration > 120e9
            ):
                break
    return calculate_stats(durations)


def _run_single_benchmark(test: TestCase, recheck: bool, max_repeats: int, max_time_ns: float):
    from submission import custom_kernel

    data_list = _benchmark_inputs(test)
    check_copy = _clone_data(data_list)
    outputs = []
    count = NUM_ITERATIONS_PER_BENCHMARK
    start = time.perf_counter()
    for i, data in enumerate(data_list):
        outputs.append(custom_kernel(_clone_data(data)))
        report_progress(f"calls {i + 1}/{count} made")
    call_s = (time.perf_counter() - start) / count
    start = time.perf_counter()
    # The time left, on a CPU (where the timed rounds are CPU_MAX_REPEATS): the checks to
    # come, and the rounds' calls (and their checks in leaderboard mode)
    rounds = None if torch.cuda.is_available() else min(max_repeats, CPU_MAX_REPEATS)
    for i, (reference_output, custom_output) in enumerate(zip(check_copy, outputs)):
        good, message = check_implementation(reference_output, custom_output)
        if not good:
            return message
        left = None
        if rounds is not None:
            check_s = (time.perf_counter() - start) / (i + 1)
            left = (count - i - 1) * check_s + rounds * count * (call_s + recheck * check_s)
        report_progress(f"checked {i + 1}/{count}{_left(left)}")
    return time_calls(custom_kernel, data_list, recheck, check_copy, max_repeats, max_time_ns)


def _run_single_profile_torch(test: TestCase) -> str:
    from torch.profiler import ProfilerActivity, profile

    from submission import custom_kernel

    data = generate_input(**test.args)
    _synchronize()
    cloned = _clone_data(data)
    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        custom_kernel(cloned)
        _synchronize()
    sort = "self_cuda_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
    return prof.key_averages().table(sort_by=sort, row_limit=20)


def _run_single_profile_ncu(test: TestCase) -> str:
    from torch.cuda.nvtx import range as nvtx_range

    from submission import custom_kernel

    with nvtx_range("generate input"):
        data = generate_input(**test.args)
        _synchronize()
    cloned = _clone_data(data)
    with nvtx_range("custom_kernel"):
        custom_kernel(cloned)
        _synchronize()
    return ""


# --------------------------------------------------------------------------------------
# The worker process
# --------------------------------------------------------------------------------------
@dataclasses.dataclass
class Progress:
    """A line of progress from the worker, sent ahead of the result of a request."""

    text: str


PROGRESS_EVERY_S = 1.0  # the worker sends at most one Progress a second
_progress_conn = None  # in the worker, the pipe while a request wants progress
_progress_sent = 0.0


def report_progress(text: str) -> None:
    """Tell the parent how a long case is going (at most one line a PROGRESS_EVERY_S);
    nothing when the request did not ask for progress or outside the worker."""
    global _progress_sent
    now = time.monotonic()
    if _progress_conn is not None and now - _progress_sent >= PROGRESS_EVERY_S:
        _progress_sent = now
        _progress_conn.send(Progress(text))


def _serve(conn) -> None:
    """The worker process: runs (fn, args, wants_progress) requests from the pipe and sends
    back results (after any Progress lines) until the pipe closes."""
    global _progress_conn, _progress_sent
    _init_worker()
    while True:
        try:
            fn, args, wants_progress = conn.recv()
        except EOFError:
            return
        _progress_conn, _progress_sent = (conn if wants_progress else None), time.monotonic()
        result = fn(*args)
        _progress_conn = None
        conn.send(result)


def _exit_text(code: int | None) -> str:
    """A worker's exit code in words: a signal by name (a crash in native code), or the
    code."""
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class CaseRunner:
    """Runs worker functions in one spawned process, as the leaderboard does. run() gives
    the function's result, or a CaseError when it raised, ran past timeout_s or the worker
    died (a crash in native code): the worker is then ended, and the next run starts a new
    one. A dead worker is seen within WORKER_POLL_S, with or without a time limit."""

    WORKER_POLL_S = 0.2

    def __init__(self, timeout_s: float | None, show_traceback: bool = False, on_progress=None):
        self.timeout_s = timeout_s
        self.show_traceback = show_traceback
        self.on_progress = on_progress  # called with each Progress text; None: no progress
        self._context = multiprocessing.get_context("spawn")
        self._proc = None
        self._conn = None

    def _start(self):
        """A worker, started and answering (its start-up, imports included, is not counted
        against a case); a CaseError if it died on the way. It starts with SIGINT ignored
        (kept across exec, and by Python), so that Ctrl-C during its imports leaves it to
        the parent to end it."""
        if self._proc is None:
            parent, child = self._context.Pipe()
            self._conn = parent
            self._proc = self._context.Process(target=_serve, args=(child,), daemon=True)
            handler = signal.getsignal(signal.SIGINT)
            in_main_thread = threading.current_thread() is threading.main_thread()
            if in_main_thread:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
            try:
                self._proc.start()
            finally:
                if in_main_thread:
                    signal.signal(signal.SIGINT, handler)
                child.close()
            answer = self._call(_ping, (), None)
            if isinstance(answer, CaseError):
                return answer
        return None

    def run(self, fn, *args):
        failed = self._start()
        if failed is not None:
            return failed
        return self._call(_guarded, (fn, args, self.show_traceback), self.timeout_s)

    def _call(self, fn, args: tuple, timeout_s: float | None):
        self._conn.send((fn, args, self.on_progress is not None))
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            wait = self.WORKER_POLL_S
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
                if wait <= 0:
                    self.close()
                    return CaseError(f"timed out after {timeout_s:g} s (EVAL_TIMEOUT_S)")
            try:
                if self._conn.poll(wait):
                    answer = self._conn.recv()
                    if not isinstance(answer, Progress):
                        return answer
                    if self.on_progress is not None:
                        self.on_progress(answer.text)
                    continue
            except (EOFError, OSError):  # the worker closed the pipe as it died
                pass
            if not self._proc.is_alive():
                self._proc.join()
                code = self._proc.exitcode
                self.close()
                return CaseError(f"the worker process died ({_exit_text(code)})")

    def close(self):
        """End the worker (SIGTERM, then SIGKILL after 5 s) and wait for it."""
        if self._proc is not None and self._proc.pid is not None:
            if self._proc.is_alive():
                self._proc.terminate()
                self._proc.join(5)
                if self._proc.is_alive():  # stuck where SIGTERM is not handled
                    self._proc.kill()
            self._proc.join()
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        self.close()


class InputError(Exception):
    """An argument or environment variable that eval.py does not take (exit status 2): the
    message names it and what is allowed."""


def case_timeout_s(mode: str, protocol: bool) -> float | None:
    """EVAL_TIMEOUT_S (0: none); unset, the leaderboard's limit for the mode in protocol
    mode (none for profile, whose limit is not known here) and none in human mode.
    InputError when it is not a finite number of seconds >= 0."""
    value = os.getenv("EVAL_TIMEOUT_S")
    if value:
        try:
            seconds = float(value)
        except ValueError:
            seconds = math.nan
        if not (math.isfinite(seconds) and seconds >= 0):
            raise InputError(
                f"EVAL_TIMEOUT_S={value!r}: expected a number of seconds >= 0 (0: no limit)"
            )
        return seconds or None
    return MODE_TIME_LIMIT_S.get(mode) if protocol else None


def seed_value(text: str, name: str) -> int:
    """A seed given as text (--seed, POPCORN_SEED): InputError naming `name` unless it is
    an integer in 0..SEED_MAX, which set_seed takes."""
    try:
        seed = int(text)
    except ValueError:
        seed = None
    if seed is None or not 0 <= seed <= SEED_MAX:
        raise InputError(f"{name}={text!r}: expected {SEED_RANGE}")
    return seed


def fits_in_memory(runner: CaseRunner, test: TestCase, worker) -> CaseError | None:
    """A CaseError when the case (a valid spec) needs more memory than is free on the
    worker's device (case_memory, memory_problem), else None. Nothing is allocated."""
    answer = runner.run(_free_memory)
    if isinstance(answer, CaseError):
        return answer
    where, free, cuda = answer
    problem = memory_problem(case_memory(test.args, worker.__name__, cuda), where, free)
    return CaseError(problem) if problem else None


def run_case(runner: CaseRunner, test: TestCase, worker, *args):
    """worker(test, *args) in the worker process, or a CaseError: a raise, a timeout, a
    spec that generate_input cannot build or a case that needs more memory than is free
    (neither is run)."""
    problem = spec_problem(test.args)
    if problem:
        return CaseError(f"invalid spec: {problem}")
    return fits_in_memory(runner, test, worker) or runner.run(worker, test, *args)


# --------------------------------------------------------------------------------------
# Baselines (human mode)
# --------------------------------------------------------------------------------------
def _dequantized(data, dtype=torch.bfloat16):
    """Per group (A, B) as bf16 or fp16 (both exact: every FP4 x E4M3 value has at most 6
    significant bits and lies within fp16's normal range), for the pre-dequantized
    baselines."""
    from submission import _dequantize_rows

    abc, _, sfr, sizes = data
    out = []
    for (a, b, _), (sfa, sfb), (_, _, k, _) in zip(abc, sfr, sizes):
        out.append(
            (
                _dequantize_rows(a[:, :, 0], sfa, k).to(dtype),
                _dequantize_rows(b[:, :, 0], sfb, k).to(dtype),
            )
        )
    return out


# Names of the baselines that peak_with_baselines and the notes treat apart
PER_GROUP_BASELINE = "fp16 mm per group"
STACKED_BASELINE = "fp16 mm stacked"  # reads one group's weights
GROUPED_MM_BASELINE = "torch._grouped_mm bf16 (pre-dequantized)"


def _dense_fp16_baselines(data_list) -> dict:
    """cuBLAS fp16 on the pre-dequantized operands, timed like the submission: one torch.mm
    per group, and, where every group has the same N and K, one torch.mm of the groups'
    stacked A against group 0's B (the same FLOPs in one dense GEMM that reads 1/G of the
    weights: a best case for a dense GEMM of this size, not a grouped GEMM)."""
    results = {}
    per_group = [_dequantized(data, torch.float16) for data in data_list]
    stats = time_calls(lambda pairs: [a @ b.T for a, b in pairs], per_group, False, None, 50, 2e9)
    results[PER_GROUP_BASELINE] = stats.mean if isinstance(stats, Stats) else None
    if len({(n, k) for _, n, k, _ in data_list[0][3]}) == 1:
        stacked = [(torch.cat([a for a, _ in pairs]), pairs[0][1].T) for pairs in per_group]
        stats = time_calls(lambda x: x[0] @ x[1], stacked, False, None, 50, 2e9)
        results[STACKED_BASELINE] = stats.mean if isinstance(stats, Stats) else None
    return results


def _run_baselines(test: TestCase) -> dict:
    """torch._grouped_mm on pre-dequantized bf16 (dequantization untimed), the exact torch
    path and, on CUDA, cuBLAS fp16 on pre-dequantized operands and our own fp16 fallback
    (the FP4 decode, then cuBLAS, both timed), timed like the submission."""
    from submission import run_torch_exact, run_torch_fp16, validate_inputs

    data_list = _benchmark_inputs(test)
    results = {}

    def exact(data):
        return run_torch_exact(data, validate_inputs(data))

    stats = time_calls(exact, data_list, False, None, 10, 2e9)
    results["torch exact path"] = stats.mean if isinstance(stats, Stats) else None

    if torch.cuda.is_available() and hasattr(torch, "_grouped_mm"):
        grouped = []
        for data in data_list:
            pairs = _dequantized(data)
            a_cat = torch.cat([a for a, _ in pairs])
            b_stack = torch.stack([b for _, b in pairs]).transpose(1, 2)  # (G, K, N) column-major
            ms = torch.tensor([a.shape[0] for a, _ in pairs], device="cuda")
            grouped.append((a_cat, b_stack, torch.cumsum(ms, 0).to(torch.int32)))
        try:
            stats = time_calls(
                lambda x: torch._grouped_mm(x[0], x[1], offs=x[2], out_dtype=torch.bfloat16),
                grouped,
                False,
                None,
                50,
                2e9,
            )
            results[GROUPED_MM_BASELINE] = stats.mean
        except RuntimeError as e:
            results[GROUPED_MM_BASELINE] = f"unavailable: {e}"
    if torch.cuda.is_available():
        results.update(_dense_fp16_baselines(data_list))

        def fallback(data):
            return run_torch_fp16(data, validate_inputs(data))

        stats = time_calls(fallback, data_list, False, None, 20, 2e9)
        results["our fp16 fallback (decode + cuBLAS)"] = stats.mean if isinstance(stats, Stats) else None
    return results


# --------------------------------------------------------------------------------------
# Protocol mode
# --------------------------------------------------------------------------------------
def _log_failure(logger: PopcornOutput, kind: str, idx: int, test: TestCase, message: str) -> None:
    """A failed case's lines on the descriptor, and one line on stderr for whoever watches."""
    logger.log(f"{kind}.{idx}.status", "fail")
    logger.log(f"{kind}.{idx}.error", one_line(message))
    print(f"{kind} {idx} failed: '{test.spec}': {one_line(message)}", file=sys.stderr)


def run_testing(logger: PopcornOutput, runner: CaseRunner, tests: list[TestCase]) -> int:
    passed = True
    logger.log("test-count", len(tests))
    for idx, test in enumerate(tests):
        logger.log(f"test.{idx}.spec", test.spec)
        result = run_case(runner, test, _run_single_test)
        good, message = (False, result.message) if isinstance(result, CaseError) else result
        if not good:
            _log_failure(logger, "test", idx, test, message)
            passed = False
        else:
            logger.log(f"test.{idx}.status", "pass")
            if message:
                logger.log(f"test.{idx}.message", message)
    return logger.finish(passed)


def _benchmark(runner: CaseRunner, test: TestCase, *settings) -> Stats | str:
    """Stats, or why the benchmark failed."""
    result = run_case(runner, test, _run_single_benchmark, *settings)
    return result.message if isinstance(result, CaseError) else result


def _log_benchmark(logger: PopcornOutput, idx: int, test: TestCase, result) -> bool:
    if isinstance(result, Stats):
        for field in dataclasses.fields(Stats):
            logger.log(f"benchmark.{idx}.{field.name}", getattr(result, field.name))
        return True
    _log_failure(logger, "benchmark", idx, test, str(result))
    return False


def run_benchmarking(logger: PopcornOutput, runner: CaseRunner, tests: list[TestCase]) -> int:
    runnable = [test for test in tests if not spec_problem(test.args)]
    if runnable:  # warm-up, as the leaderboard's; its result is not reported
        _benchmark(runner, runnable[0], False, 100, 10e7)
    passed = True
    logger.log("benchmark-count", len(tests))
    for idx, test in enumerate(tests):
        logger.log(f"benchmark.{idx}.spec", test.spec)
        result = _benchmark(runner, test, False, 100, 10e9)
        passed = _log_benchmark(logger, idx, test, result) and passed
    return logger.finish(passed)


def run_leaderboard(logger: PopcornOutput, runner: CaseRunner, tests: list[TestCase]) -> int:
    for test in tests:  # warm-up
        _benchmark(runner, test, False, 50, 5e8)
    logger.log("benchmark-count", len(tests))
    passed = True
    for idx, test in enumerate(tests):
        result = _benchmark(runner, test, True, 100, 30e9)
        logger.log(f"benchmark.{idx}.spec", test.spec)
        if not _log_benchmark(logger, idx, test, result):
            passed = False
            break  # the leaderboard stops at the first failure
    return logger.finish(passed)


def run_profiling(logger: PopcornOutput, runner: CaseRunner, tests: list[TestCase]) -> int:
    ncu = os.getenv("POPCORN_NCU", "0") == "1"
    worker = _run_single_profile_ncu if ncu else _run_single_profile_torch
    passed = True
    logger.log("benchmark-count", len(tests))
    for idx, test in enumerate(tests):
        logger.log(f"benchmark.{idx}.spec", test.spec)
        report = run_case(runner, test, worker)
        if isinstance(report, CaseError):
            _log_failure(logger, "benchmark", idx, test, report.message)
            passed = False
            continue
        encoded = base64.b64encode(report.encode("utf-8"), b"+*").decode("utf-8")
        logger.log(f"benchmark.{idx}.report", encoded)
    return logger.finish(passed)


PROTOCOL_RUNNERS = {
    "test": run_testing,
    "benchmark": run_benchmarking,
    "leaderboard": run_leaderboard,
    "profile": run_profiling,
}
PROTOCOL_USAGE = (
    "usage: POPCORN_FD=N python eval.py {test|benchmark|leaderboard|profile} SPECFILE [--traceback]"
)


def popcorn_fd(text: str) -> int:
    """POPCORN_FD's descriptor: InputError unless it is the number of an open one."""
    try:
        fd = int(text)
        os.fstat(fd)
    except (ValueError, OSError):
        raise InputError(
            f"POPCORN_FD={text!r}: expected the number of an open file descriptor"
        ) from None
    return fd


def protocol_main(fd: str, argv: list[str]) -> int:
    show_traceback = "--traceback" in argv
    positional = [arg for arg in argv if arg != "--traceback"]
    if len(positional) < 2 or positional[0] not in PROTOCOL_RUNNERS:
        print(PROTOCOL_USAGE, file=sys.stderr)
        return EXIT_USAGE
    mode, spec_file = positional[:2]
    seed = os.getenv("POPCORN_SEED")
    os.unsetenv("POPCORN_SEED")
    try:
        fd = popcorn_fd(fd)
    except InputError as e:  # no descriptor to write `check: fail` to
        print(f"eval.py: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    with PopcornOutput(fd) as logger:
        try:
            seed = seed_value(seed, "POPCORN_SEED") if seed else None
            timeout_s = case_timeout_s(mode, protocol=True)
        except InputError as e:
            print(f"eval.py: error: {e}", file=sys.stderr)
            logger.finish(False)
            return EXIT_USAGE
        set_seed(seed or 42)
        try:
            tests = _apply_secret_seed(read_spec_file(spec_file), seed)
        except SpecFileError as e:
            print(e, file=sys.stderr)
            logger.finish(False)
            return EXIT_BAD_SPEC_FILE
        try:
            with CaseRunner(timeout_s, show_traceback) as runner:
                return PROTOCOL_RUNNERS[mode](logger, runner, tests)
        except KeyboardInterrupt:  # Ctrl-C: the case it stopped gets its lines
            case = logger.open_case
            if case is not None:
                logger.log(f"{case}.status", "fail")
                logger.log(f"{case}.error", "interrupted")
            raise
        finally:
            if not logger.checked:  # eval.py itself failed, or was interrupted
                logger.finish(False)


# --------------------------------------------------------------------------------------
# Human mode
# --------------------------------------------------------------------------------------
def load_task_cases(kind: str, task_file: Path = HERE / "task.yml") -> list[TestCase]:
    """task.yml's `tests` or `benchmarks` as TestCases."""
    import yaml

    doc = yaml.safe_load(task_file.read_text())
    cases = []
    for entry in doc[kind]:
        args = {k: tuple(v) if isinstance(v, list) else v for k, v in entry.items()}
        cases.append(TestCase(args=args, spec=spec_line(args)))
    return cases


def _is_file(name: str) -> bool:
    """Whether name is a file; False for a name the system cannot take as a path (a spec
    line of 17+ groups is longer than a file name may be: ENAMETOOLONG)."""
    try:
        return Path(name).is_file()
    except (OSError, ValueError):  # ValueError: a NUL byte
        return False


def human_cases(specs: list[str], mode: str) -> list[TestCase]:
    """The cases of the command line's spec files and spec lines, in order; task.yml's
    tests or benchmarks when there are none. SpecFileError when one does not parse."""
    if not specs:
        return load_task_cases("tests" if mode == "test" else "benchmarks")
    tests = []
    for spec in specs:
        if _is_file(spec):
            tests += read_spec_file(spec, strict=False)
        elif ":" not in spec:
            raise SpecFileError(
                f"'{spec}' is neither a spec file nor a spec line `key: value; ...`"
            )
        else:
            try:
                tests.append(TestCase(args=parse_spec(spec), spec=spec))
            except ValueError as e:
                raise SpecFileError(str(e)) from None
    return tests


SHORT_SPEC_MAX_MS = 8  # groups whose every M a case's label lists; more read as a range


def _short_spec(args: dict) -> str:
    """A case's label: G, every group's M (or their range and total past SHORT_SPEC_MAX_MS
    groups, which would make a table too wide to read), the distinct N and K."""
    if len(args["m"]) <= SHORT_SPEC_MAX_MS:
        ms = "[" + ",".join(str(m) for m in args["m"]) + "]"
    else:
        ms = f"{min(args['m'])}..{max(args['m'])} (sum {sum(args['m'])})"
    ns, ks = sorted(set(args["n"])), sorted(set(args["k"]))
    n = ns[0] if len(ns) == 1 else "/".join(map(str, ns))
    k = ks[0] if len(ks) == 1 else "/".join(map(str, ks))
    return f"G={args['g']} M={ms} N={n} K={k}"


def _case_label(test: TestCase) -> str:
    """The short form of a valid case, the spec as written otherwise."""
    return test.spec if spec_problem(test.args) else _short_spec(test.args)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(out)


def _device_name() -> str | None:
    return torch.cuda.get_device_name() if torch.cuda.is_available() else None


def _cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo, else platform), or ""."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and ":" in line:
                return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    import platform

    return platform.processor()


def _machine_line() -> str:
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        where = f"{torch.cuda.get_device_name()} (sm_{major}{minor})"
    else:
        model = _cpu_model()
        where = f"CPU only ({model + ', ' if model else ''}{os.cpu_count()} cores)"
    return f"{where}, torch {torch.__version__}"


def _describe_path() -> str:
    import submission

    select_path = getattr(submission, "select_path", None)
    if select_path is None:
        return "unknown (submission.py has no select_path)"
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    return select_path(device)


def _path_line(runner: CaseRunner) -> str:
    path = runner.run(_describe_path)
    return f"unknown ({path.message})" if isinstance(path, CaseError) else path


def _worst_text(worst: dict | None) -> str:
    if worst is None:
        return "-"
    if worst["group"] is None:
        return "no elements (every group is empty)"
    if worst["ratio"] == 0:
        return "0 (bit-identical to the reference)"
    index = list(worst["index"])
    where = f"g{worst['group']}{index}"
    return f"{worst['ratio']:.3f}x tol at {where}: {worst['got']:.4g} vs {worst['expected']:.4g}"


class CaseLine:
    """A case's line in human mode: its head (`  [1/4] G=8 ... ...`), the worker's progress
    while it runs, then its result. On a terminal the progress replaces itself in place;
    elsewhere (a log) it is appended, at most once every log_every_s."""

    def __init__(self, stream=None, log_every_s: float = 10.0):
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()
        self.log_every_s = log_every_s
        self.head = None  # the open line's head; None: no line open
        self._shown = False
        self._logged = 0.0

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def start(self, head: str) -> None:
        self.head, self._shown, self._logged = head, False, time.monotonic()
        self._write(head)

    def progress(self, text: str) -> None:
        if self.head is None:
            return
        if self.tty:
            width = shutil.get_terminal_size().columns - 1
            self._write(f"\r{self.head} {text}"[: width + 1] + "\x1b[K")
            self._shown = True
        elif time.monotonic() - self._logged >= self.log_every_s:
            self._logged = time.monotonic()
            self._write(f" [{text}]")

    def finish(self, result: str) -> None:
        """End the open line with result (nothing when no line is open)."""
        if self.head is None:
            return
        if self._shown:  # clear the progress
            self._write(f"\r{self.head}\x1b[K")
        self._write(result + "\n")
        self.head = None


def human_tests(runner: CaseRunner, tests: list[TestCase]) -> int:
    print(f"{_plural(len(tests), 'test')} on {_machine_line()}, path: {_path_line(runner)}")
    rows, failed, line = [], 0, CaseLine()
    try:
        for i, test in enumerate(tests):
            label = _case_label(test)
            line.start(f"  [{i + 1}/{len(tests)}] {label} ...")
            r = run_case(runner, test, _run_single_test_detailed)
            if isinstance(r, CaseError):
                r = {"ok": False, "message": r.message, "worst": None, "seconds": 0.0}
            line.finish(" pass" if r["ok"] else f" FAIL: {one_line(r['message'])}")
            failed += not r["ok"]
            # A mismatch shows its worst element; a raise (no output to compare) its message.
            shown = _worst_text(r["worst"]) if r["worst"] else one_line(r["message"])[:160]
            result, ms = "pass" if r["ok"] else "FAIL", f"{r['seconds'] * 1e3:.1f}"
            rows.append([str(i), label, result, shown, ms])
    except KeyboardInterrupt:
        _stop_for_interrupt(runner, line)
        _print_test_table(rows, len(tests), failed)
        raise
    _print_test_table(rows, len(tests), failed)
    return 0 if failed == 0 else EXIT_FAIL


def _stop_for_interrupt(runner: CaseRunner, line: CaseLine) -> None:
    """After Ctrl-C: the worker ended, the open case's line closed as interrupted."""
    runner.close()
    line.finish(" interrupted")


def _print_test_table(rows: list[list[str]], count: int, failed: int) -> None:
    """The tests' table and summary; `count` cases asked for, those in rows done."""
    if not rows:
        return
    print()
    print(_table(["#", "case", "result", "worst |out-ref| / (atol + rtol|ref|)", "ms"], rows))
    not_run = f", {count - len(rows)} not run" if len(rows) < count else ""
    print(f"\n{len(rows) - failed} passed, {failed} failed{not_run} (rtol = atol = {RTOL:g})")


def human_profile(runner: CaseRunner, tests: list[TestCase]) -> int:
    failed = 0
    for test in tests:
        print(f"== {_case_label(test)}")
        report = run_case(runner, test, _run_single_profile_torch)
        if isinstance(report, CaseError):
            failed += 1
            print(f"FAIL: {report.message}")
        else:
            print(report)
    return 0 if failed == 0 else EXIT_FAIL


def _rate(value: float) -> str:
    return f"{value:.1f}" if value >= 10 else f"{value:.3g}"


def _roofline_text(roof: Roofline) -> str:
    return (
        f"peak {_rate(roof.tflops)} TFLOP/s ({roof.label}); "
        f"bandwidth {_rate(roof.gbps)} GB/s ({roof.bandwidth_label})"
    )


def _duration(seconds: float) -> str:
    if seconds < 1:
        return "under a second"
    return f"about {seconds:.0f} s" if seconds < 90 else f"about {seconds / 60:.0f} min"


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


def _benchmark_entry(runner: CaseRunner, test: TestCase, recheck: bool, roof: Roofline) -> dict:
    """One benchmark's row: its time, FLOPs, bytes, roofline and speed of light, or error."""
    entry = {"case": _case_label(test), "spec": test.spec}
    problem = spec_problem(test.args)
    if problem:
        entry["error"] = f"invalid spec: {problem}"
        return entry
    entry.update(flops=flops_of(test.args), bytes=bytes_of(test.args))
    _set_roofline(entry, roof)
    key = (tuple(test.args["m"]), tuple(test.args["n"]), tuple(test.args["k"]))
    entry["sol_us"] = B200_SPEED_OF_LIGHT_US.get(key)
    stats = _benchmark(runner, test, recheck, 100, 10e9)
    if isinstance(stats, Stats):
        entry.update(dataclasses.asdict(stats))
    else:
        entry["error"] = one_line(str(stats))
    return entry


def _add_baselines(runner: CaseRunner, test: TestCase, entry: dict, line: CaseLine) -> None:
    """The baselines of a case that ran: beside a failed one they would compare nothing."""
    if "error" in entry:
        return
    line.start("      baselines ...")
    t0 = time.perf_counter()
    baselines = fits_in_memory(runner, test, _run_baselines) or runner.run(_run_baselines, test)
    if isinstance(baselines, CaseError):
        line.finish(f" failed: {baselines.message}")
    else:
        line.finish(f" done ({time.perf_counter() - t0:.0f} s)")
        entry["baselines"] = baselines


def human_benchmarks(runner: CaseRunner, tests: list[TestCase], recheck: bool, args) -> int:
    device = _device_name()
    print(f"{_plural(len(tests), 'benchmark')} on {_machine_line()}, path: {_path_line(runner)}")
    roof = runner.run(measure_roofline, case_gemm_shapes(tests))
    if isinstance(roof, CaseError):
        print(f"error: measuring the roofline failed: {roof.message}")
        return EXIT_FAIL
    print(f"roofline, measured now: {_roofline_text(roof)}")
    if device is None:
        print(cpu_plan(tests, roof, recheck, args.baselines))
    results, failed, start, line = [], 0, time.perf_counter(), CaseLine()
    runner.on_progress = line.progress
    try:
        for i, test in enumerate(tests):
            line.start(f"  [{i + 1}/{len(tests)}] {_case_label(test)} ...")
            t0 = time.perf_counter()
            entry = _benchmark_entry(runner, test, recheck, roof)
            now = time.perf_counter()
            took = f"{now - t0:.0f} s, {now - start:.0f} s elapsed"
            if "error" in entry:
                failed += 1
                line.finish(f" FAIL ({took}): {entry['error']}")
            else:
                runs = _plural(entry["runs"], "run")
                line.finish(f" {entry['mean'] / 1e3:.1f} us ({runs}; {took})")
            if args.baselines:
                _add_baselines(runner, test, entry, line)
            results.append(entry)
    except KeyboardInterrupt:
        _stop_for_interrupt(runner, line)
        if results:  # the finished cases' table; no report or JSON of a part of the run
            print()
            roof = peak_with_baselines(results, roof)
            print(benchmark_report(results, roof, sol_mode(device))["text"])
        raise
    sol = sol_mode(device)
    roof = peak_with_baselines(results, roof)
    report = benchmark_report(results, roof, sol)
    print()
    print(report["text"])
    if args.report:
        paths = write_report(
            Path(args.report), results, roof, report, sol=sol, device_name=device
        )
        print(f"report: {', '.join(str(path) for path in paths)}")
    if args.json:
        doc = {"machine": _machine_line(), "ceiling": dataclasses.asdict(roof), "results": results}
        Path(args.json).write_text(json.dumps(doc, indent=2))
    return 0 if failed == 0 else EXIT_FAIL


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def _sol_headers(sol: str) -> list[str]:
    return {"ratio": ["B200 SOL us", "x SOL"], "figure": ["B200 SOL us"], "none": []}[sol]


def _sol_cells(sol_us: float | None, mean_us: float, sol: str) -> list[str]:
    if sol == "none":
        return []
    if not sol_us:
        return ["-"] * len(_sol_headers(sol))
    cells = [f"{sol_us:.3f}"]
    return cells + [f"{mean_us / sol_us:.2f}"] if sol == "ratio" else cells


# Baselines that do less than the case: their roofline is the FLOPs bound alone
FLOPS_ONLY_BASELINES = (STACKED_BASELINE,)  # reads group 0's B only (_dense_fp16_baselines)


# Baselines that are one dense tensor-core GEMM per call or per group: the peak is at least
# their rate (peak_with_baselines)
DENSE_GEMM_BASELINES = (PER_GROUP_BASELINE, STACKED_BASELINE, GROUPED_MM_BASELINE)


def peak_with_baselines(results: list[dict], roof: Roofline) -> Roofline:
    """The roofline with its peak raised to the fastest dense-GEMM baseline of the run where
    one beat the ceiling's GEMMs, and every result's roofline and bound recomputed with it:
    the peak is the best dense GEMM rate measured in the run, so no cuBLAS call beats it.
    (With the cases' own stacked GEMMs among the ceiling's, cuBLAS stacked still read up
    to 0.3 % over it: python eval.py benchmark --baselines tools/regime_specs.txt on
    2d27def's kernels.)"""
    best, where = roof.tflops, None
    for r in results:
        for name in DENSE_GEMM_BASELINES:
            ns = r.get("baselines", {}).get(name)
            if isinstance(ns, (int, float)) and ns > 0 and r.get("flops"):
                rate = r["flops"] / ns / 1e3  # FLOPs per ns / 1e3 = TFLOP/s
                if rate > best:
                    best, where = rate, f"{name} on {r['case']}"
    if where is None:
        return roof
    roof = dataclasses.replace(roof, tflops=best, label=f"{roof.label}; raised to the rate of {where}")
    for r in results:
        if "flops" in r:
            _set_roofline(r, roof)
    return roof


def _below_roofline_notes(results: list[dict], roof: Roofline) -> list[str]:
    """A baseline faster than the roofline means a measured ceiling is too low: a baseline
    does the case's FLOPs and moves at least its bytes (the stacked GEMM, which reads 1/G of
    the weights, is held to the FLOPs bound only)."""
    notes = []
    for r in results:
        for name, ns in r.get("baselines", {}).items():
            if not isinstance(ns, (int, float)):
                continue
            bound_us = r["roofline_us"]
            if name in FLOPS_ONLY_BASELINES:
                bound_us = r["flops"] / (roof.tflops * 1e6)
            if ns / 1e3 < bound_us:
                notes.append(
                    f"note: {name} took {ns / 1e3:.2f} us on {r['case']}, under its roofline "
                    f"of {bound_us:.2f} us: the measured ceiling is too low"
                )
    return notes


def _report_row(r: dict, sol: str, baseline_names: list[str], width: int) -> list[str]:
    if "mean" not in r:
        return [r["case"], "FAIL"] + ["-"] * (width - 2)
    mean_us = r["mean"] / 1e3
    ratio = f"{mean_us / r['roofline_us']:.2f}" if r["roofline_us"] > 0 else "-"
    row = [
        r["case"],
        f"{mean_us:.2f}",
        f"{r['best'] / 1e3:.2f}",
        _rate(r["flops"] / (r["mean"] * 1e-9) / 1e12),
        f"{r['roofline_us']:.2f}",
        ratio,
        r["bound"],
    ]
    row += _sol_cells(r["sol_us"], mean_us, sol)
    for name in baseline_names:
        v = r.get("baselines", {}).get(name)
        row.append(f"{v / 1e3:.1f}" if isinstance(v, (int, float)) else str(v or "-"))
    return row


def benchmark_report(results: list[dict], roof: Roofline, sol: str = "ratio") -> dict:
    """The benchmark table and its summary. sol (see sol_mode): "ratio" shows task.yml's
    B200 speed of light and the ratio to it, "figure" the B200's number alone, "none"
    neither."""
    headers = ["case", "mean us", "best us", "TFLOP/s", "roofline us", "x roofline", "bound"]
    headers += _sol_headers(sol)
    baseline_names = sorted({n for r in results for n in r.get("baselines", {})})
    headers += [f"{n} us" for n in baseline_names]
    rows = [_report_row(r, sol, baseline_names, len(headers)) for r in results]
    # The summary is over the cases that ran and have work to do (a roofline above 0).
    timed = [r for r in results if "mean" in r and r["roofline_us"] > 0]
    means = [r["mean"] / 1e3 for r in timed]
    roofs = [r["roofline_us"] for r in timed]
    sols = [r["sol_us"] for r in timed if r["sol_us"]]
    lines = [_table(headers, rows)] + _below_roofline_notes(results, roof)
    summary = {}
    if means:
        summary = {"geomean_us": _geomean(means), "roofline_geomean_us": _geomean(roofs)}
        ratio = summary["geomean_us"] / summary["roofline_geomean_us"]
        lines.append(
            f"\ngeometric mean: {summary['geomean_us']:.2f} us; roofline geomean "
            f"{summary['roofline_geomean_us']:.2f} us ({ratio:.2f}x)"
        )
        if sol != "none" and len(sols) == len(means):
            summary["sol_geomean_us"] = _geomean(sols)
            if sol == "ratio":
                sol_ratio = f"{summary['geomean_us'] / summary['sol_geomean_us']:.2f}x"
            else:
                sol_ratio = "a B200 figure, no ratio on this GPU"
            lines.append(
                f"B200 speed-of-light geomean {summary['sol_geomean_us']:.2f} us ({sol_ratio})"
            )
    lines.append(
        f"roofline = the larger of FLOPs / peak and bytes / bandwidth: {_roofline_text(roof)}"
    )
    return {"text": "\n".join(lines), "headers": headers, "rows": rows, "summary": summary}


def _plot_label(case: str) -> str:
    """A bar group's label, one field a line so that neighbours never overlap: G, then N
    and K (a case label's last two fields; its M list is in the table)."""
    return "\n".join([case.split(" ")[0], *case.split(" ")[-2:]])


def report_stem(device_name: str | None) -> str:
    """The report's file name without its suffix, naming the device: benchmark-nvidia-h200
    for an "NVIDIA H200", benchmark-cpu without a GPU."""
    slug = re.sub(r"[^a-z0-9]+", "-", (device_name or "cpu").lower()).strip("-")
    return f"benchmark-{slug or 'gpu'}"


MATPLOTLIB_MISSING = (
    "--report draws its chart with matplotlib, which is not installed: "
    'pip install -e ".[report]"'
)


def write_report(
    out_dir: Path,
    results: list[dict],
    roof: Roofline,
    report: dict,
    machine: str | None = None,
    sol: str = "ratio",
    device_name: str | None = None,
) -> list[Path]:
    """The table (.md) and the chart (.png: time vs roofline, and the B200 speed of light
    unless sol is "none", per shape) in out_dir, named for the device (report_stem: the
    GPU's name, or the CPU), and said in them; the paths written."""
    machine = machine or _machine_line()
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / report_stem(device_name)
    title = f"nvfp4_group_gemm benchmark on {device_name or 'the CPU'}"
    md = [f"# {title}\n\nMachine: {machine}\n"]
    md.append("| " + " | ".join(report["headers"]) + " |")
    md.append("|" + "---|" * len(report["headers"]))
    md += ["| " + " | ".join(r) + " |" for r in report["rows"]]
    summary = [
        line
        for line in report["text"].splitlines()
        if line.startswith(("geometric", "B200", "roofline"))
    ]
    md += [""] + summary
    written = [stem.with_suffix(".md")]
    written[0].write_text("\n".join(md) + "\n")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in results if "mean" in r]
    if not ok:
        return written
    labels = [_plot_label(r["case"]) for r in ok]
    x = range(len(ok))
    width = 0.27
    fig, ax = plt.subplots(figsize=(max(10.0, 0.95 * len(ok)), 5))
    ax.bar([i - width for i in x], [r["mean"] / 1e3 for r in ok], width, label="measured (mean)")
    ax.bar(
        list(x),
        [r["roofline_us"] for r in ok],
        width,
        label="roofline (max of FLOPs / peak, bytes / bandwidth)",
    )
    if sol != "none":
        ax.bar(
            [i + width for i in x],
            [r["sol_us"] or 0 for r in ok],
            width,
            label="B200 speed of light",
        )
    ax.set_yscale("log")
    ax.set_ylabel("time per call (us, log scale)")
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_title(f"nvfp4 grouped GEMM on {machine}", fontsize=10)
    for i, r in enumerate(ok):
        ax.annotate(
            f"{r['mean'] / 1e3:.1f}",
            (i - width, r["mean"] / 1e3),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.legend(fontsize=8)
    fig.tight_layout()
    written.append(stem.with_suffix(".png"))
    fig.savefig(written[-1], dpi=120)
    plt.close(fig)
    return written


MODES = {
    "test": "check each case against the reference: pass / fail and the worst element",
    "benchmark": "time each case as the leaderboard does: mean, best, TFLOP/s, x roofline",
    "leaderboard": "benchmark, with every timed repeat checked again",
    "profile": "a torch profiler table for each case",
}
USAGE = (
    "python eval.py {test,benchmark,leaderboard,profile} [SPECFILE | SPEC ...] [--baselines]\n"
    "       [--report DIR] [--json FILE] [--seed N] [--traceback]\n"
    "       POPCORN_FD=N python eval.py MODE SPECFILE [--traceback]"
)
HELP_DESCRIPTION = (
    "Run submission.py's tests or benchmarks for nvfp4_group_gemm and print readable tables;\n"
    "options, spec files and spec lines come in any order.\n\nmodes:\n"
    + "".join(f"  {mode:<12} {text}\n" for mode, text in MODES.items())
)
HELP_EPILOG = """\
spec format: one case a line, `key: value` pairs separated by `;`, lists as [1, 2, 3]:
  m: [96, 128]; n: [128, 256]; k: [256, 512]; g: 2; seed: 1111
In spec files blank lines and lines starting with # are skipped (not with POPCORN_FD).

environment:
  POPCORN_FD=N      the leaderboard's protocol: `key: value` lines on descriptor N, one
                    spec file, its strict format (every line a case)
  POPCORN_SEED=S    with POPCORN_FD, the secret seed combined into each case's seed
                    (0 to 4294967295, as --seed and a spec's seed)
  EVAL_TIMEOUT_S=T  time limit per case in seconds (0: none)

exit status: 0 all passed, 112 a case failed, 113 a spec that does not parse or a spec
file that cannot be read or holds no case, 2 a wrong command line, environment variable or
output path, 130 interrupted (Ctrl-C)"""


class _UsageError(Exception):
    """A command line that eval.py does not take (exit status 2)."""


class _Parser(argparse.ArgumentParser):
    """argparse, with a wrong command line raising _UsageError (one line, not the usage)."""

    def error(self, message):
        raise _UsageError(message)


def _help_formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=32, width=100)


def _seed_arg(text: str) -> int:
    try:
        return seed_value(text, "--seed")
    except InputError:
        raise argparse.ArgumentTypeError(f"expected {SEED_RANGE}, got {text!r}") from None


def _make_file_in(folder: Path) -> None:
    """OSError unless a file can be made in folder (a permission bit, a read-only file
    system or a path through a file: only trying tells them all apart, root included)."""
    with tempfile.TemporaryFile(dir=folder):
        pass


def check_outputs(args: argparse.Namespace) -> None:
    """InputError when --report's directory cannot be made or written to, or --json's file
    cannot be written: said before a run of minutes, not after it. Makes the directory."""
    if args.report:
        folder = Path(args.report)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            _make_file_in(folder)
        except OSError as e:
            raise InputError(
                f"--report {args.report}: cannot make this directory or write in it "
                f"({e.strerror or e})"
            ) from None
    if args.json:
        path = Path(args.json)
        try:
            if path.is_dir():
                raise IsADirectoryError(errno.EISDIR, "it is a directory")
            if path.exists():
                open(path, "a").close()
            else:
                _make_file_in(path.parent)
        except OSError as e:
            raise InputError(
                f"--json {args.json}: cannot write this file ({e.strerror or e}); its "
                "directory must exist and be writable"
            ) from None


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="eval.py",
        usage=USAGE,
        description=HELP_DESCRIPTION,
        epilog=HELP_EPILOG,
        formatter_class=_help_formatter,
    )
    parser.add_argument(
        "words",
        nargs="*",
        metavar="MODE [SPECFILE | SPEC ...]",
        help="a mode (above), then optional spec files and spec lines; none: task.yml's "
        "tests (test mode) or benchmarks (the other modes)",
    )
    parser.add_argument(
        "--baselines",
        action="store_true",
        help="(benchmark, leaderboard) also time torch._grouped_mm on bf16, cuBLAS fp16 on "
        "the dequantized operands and the exact path",
    )
    parser.add_argument(
        "--report",
        metavar="DIR",
        help="(benchmark, leaderboard) write the table and the chart into DIR, named for the "
        "machine: benchmark-<gpu or cpu>.md and .png (the chart needs matplotlib)",
    )
    parser.add_argument(
        "--json", metavar="FILE", help="(benchmark, leaderboard) write the results as JSON"
    )
    parser.add_argument(
        "--seed", type=_seed_arg, metavar="N", help="secret seed combined into each case's seed"
    )
    parser.add_argument(
        "--traceback", action="store_true", help="print the traceback of a case that raises"
    )
    return parser


def parse_command_line(argv: list[str]) -> argparse.Namespace:
    """The human mode's command line: args.mode, args.specs and the options. _UsageError
    when there is no mode or an unknown one."""
    args = _parser().parse_intermixed_args(argv)
    if not args.words:
        raise _UsageError("a mode is required: test, benchmark, leaderboard or profile")
    args.mode, *args.specs = args.words
    if args.mode not in MODES:
        raise _UsageError(
            f"unknown mode '{args.mode}': choose test, benchmark, leaderboard or profile"
        )
    return args


def human_main(argv: list[str]) -> int:
    try:
        args = parse_command_line(argv)
    except _UsageError as e:
        print(f"eval.py: error: {e} (see python eval.py --help)", file=sys.stderr)
        return EXIT_USAGE
    try:
        timeout_s = case_timeout_s(args.mode, protocol=False)
        tests = human_cases(args.specs, args.mode)
        if args.mode in ("benchmark", "leaderboard"):  # before a run of minutes
            if args.report and importlib.util.find_spec("matplotlib") is None:
                raise InputError(MATPLOTLIB_MISSING)
            check_outputs(args)
    except SpecFileError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_SPEC_FILE
    except InputError as e:
        print(f"eval.py: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    tests = _apply_secret_seed(tests, args.seed)
    set_seed(args.seed or 42)
    with CaseRunner(timeout_s, args.traceback) as runner:
        if args.mode == "test":
            return human_tests(runner, tests)
        if args.mode == "profile":
            return human_profile(runner, tests)
        return human_benchmarks(runner, tests, args.mode == "leaderboard", args)


def _interrupt_once(signum, frame):
    """Ctrl-C: KeyboardInterrupt once; later presses are ignored while eval.py ends its
    worker and prints what finished."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def main() -> int:
    if signal.getsignal(signal.SIGINT) in (signal.default_int_handler, _interrupted_at_start):
        signal.signal(signal.SIGINT, _interrupt_once)
    try:
        fd = os.getenv("POPCORN_FD")
        if fd:
            return protocol_main(fd, sys.argv[1:])
        return human_main(sys.argv[1:])
    except KeyboardInterrupt:
        sys.stdout.flush()
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
