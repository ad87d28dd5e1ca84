"""The masked op's kernel runners on the CPU: the first run's check against the exact path
(masked_runner.check_against_exact, on real inputs with a wrong element written into the
kernel's output), which runner a device gets (moe._kernel_runner, the capability faked),
and the Blackwell runner's host math (config choice, refusal, launch shape, tables)."""

from __future__ import annotations

import ast
import os
import subprocess

import pytest
import torch
from cases import ROOT
from conftest import requires_cuda
from test_masked_plan import _pythons
from test_moe_op import counts_tensor, make_inputs

from nvfp4_gemm import moe
from nvfp4_gemm.masked_plan import MASKED_PLAN_THREADS, sm100_masked_bound
from nvfp4_gemm.masked_runner import MaskedCheckFailed, check_against_exact
from nvfp4_gemm.sm100 import SM100_NAMED_CONFIGS, sm100_config_is_legal, sm100_problem_fits_config
from nvfp4_gemm.sm100_masked import (
    MASKED_SM100_ENV,
    choose_masked_sm100_config,
    masked_sm100_enabled,
    masked_sm100_refusal,
    masked_sm100_shape,
    masked_sm100_tables,
)

COUNTS = (0, 1, 7, 8, 3, 8)


def _call(counts=COUNTS, max_m=8, n=16, k=64, seed=3):
    x = make_inputs(len(counts), max_m, n, k, seed)
    masked_m = counts_tensor(counts, "cpu")
    before = torch.full((len(counts), max_m, n), float("nan"), dtype=torch.float16)  # what the caller's out held
    p = moe.check_masked_args(*x.args(), masked_m, before)

    def exact(dst):
        moe._cuda_into(*x.args(), masked_m, dst, p)
    return before, exact


def test_the_first_run_check_passes_the_exact_result():
    before, exact = _call()
    out = before.clone()
    exact(out)  # a kernel that got it right
    check_against_exact(out, before, exact, "the kernel k")


@pytest.mark.parametrize("where", ["computed_row", "row_above_masked_m"])
def test_the_first_run_check_names_the_group_and_leaves_the_exact_result(where):
    """A wrong element in a computed row, or any write into a row at or above masked_m
    (which must keep what it held), fails the check; out then holds the exact result."""
    before, exact = _call()
    want = before.clone()
    exact(want)
    out = want.clone()
    if where == "computed_row":
        out[3, 2, 5] = out[3, 2, 5] * 2 + 1  # group 3 has 3 rows
        group = 3
    else:
        out[1, 4, 0] = 0.0  # group 1 has 1 row: row 4 must stay NaN
        group = 1
    with pytest.raises(MaskedCheckFailed, match=f"the kernel k failed its first-run check .*group {group}:"):
        check_against_exact(out, before, exact, "the kernel k")
    assert torch.equal(out.view(torch.int16), want.view(torch.int16))


def test_only_the_first_run_check_reads_the_gpu_back():
    """masked_runner's one read of device values is the first run's check: nothing else in
    the module calls first_mismatch or reads a tensor back, and run() calls the check only
    where `check` holds (a config's first eager run with check_first_run)."""
    tree = ast.parse((ROOT / "nvfp4_gemm" / "masked_runner.py").read_text())
    reads = {"item", "tolist", "cpu", "numpy", "synchronize", "nonzero", "any", "all"}
    callers = set()
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef):
            for node in ast.walk(fn):
                if isinstance(node, ast.Call):
                    name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                    assert name not in reads, (fn.name, name)
                    if name in ("first_mismatch", "check_against_exact"):
                        callers.add((fn.name, name))
    assert callers == {("check_against_exact", "first_mismatch"), ("run", "check_against_exact")}
    run = next(f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == "run")
    guarded = [node for node in ast.walk(run) if isinstance(node, ast.If) and ast.unparse(node.test) == "check"
               and "check_against_exact" in ast.unparse(node)]
    assert len(guarded) == 1


@pytest.fixture
def fake_gpu(monkeypatch):
    """moe._kernel_runner on a faked device of the given capability (the device queries it
    makes; no kernel is made or run)."""
    def make(capability, env=()):
        for name, value in env:
            monkeypatch.setenv(name, value)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: capability)
        monkeypatch.setattr(torch.cuda, "get_device_properties",
                            lambda index=None: type("Props", (), {"multi_processor_count": 148})())
        monkeypatch.setattr(moe, "_RUNNERS", {})
        monkeypatch.setattr(moe, "_DSL_IMPORT_ERROR", None)
        return moe._kernel_runner(torch.device("cuda", 0))
    return make


def test_a_blackwell_gpu_gets_its_kernel_only_when_asked(fake_gpu, monkeypatch):
    monkeypatch.delenv(MASKED_SM100_ENV, raising=False)
    monkeypatch.delenv("NVFP4_GEMM_SELF_CHECK", raising=False)
    assert fake_gpu((10, 0)) is None
    runner = fake_gpu((10, 0), [(MASKED_SM100_ENV, "1")])
    assert type(runner).__name__ == "MaskedSm100Runner" and runner.check_first_run  # checked by default
    assert not fake_gpu((10, 0), [(MASKED_SM100_ENV, "1"), ("NVFP4_GEMM_SELF_CHECK", "0")]).check_first_run
    assert fake_gpu((10, 0), [(MASKED_SM100_ENV, "1"), ("NVFP4_GEMM_PATH", "torch")]) is None


def test_a_hopper_gpu_checks_its_first_runs_with_the_self_check(fake_gpu, monkeypatch):
    monkeypatch.delenv("NVFP4_GEMM_SELF_CHECK", raising=False)
    runner = fake_gpu((9, 0))
    assert type(runner).__name__ == "MaskedSm90Runner" and not runner.check_first_run
    assert fake_gpu((9, 0), [("NVFP4_GEMM_SELF_CHECK", "1")]).check_first_run
    assert fake_gpu((8, 0)) is None


def test_the_blackwell_switch(monkeypatch):
    monkeypatch.delenv(MASKED_SM100_ENV, raising=False)
    assert not masked_sm100_enabled()
    monkeypatch.setenv(MASKED_SM100_ENV, "1")
    assert masked_sm100_enabled()
    monkeypatch.setenv(MASKED_SM100_ENV, "yes")
    with pytest.raises(ValueError, match=MASKED_SM100_ENV):
        masked_sm100_enabled()


@pytest.mark.parametrize("groups, max_m, expected_m, name", [
    (64, 8, None, "swap_1cta_m32n128"),       # decode: one 32-token tile a group
    (64, 8, 4, "swap_1cta_m32n128"),
    (64, 64, 4, "swap_2cta_m128n256"),        # a hint of 4 tokens, but groups of up to 64
    (8, 512, None, "swap_2cta_m128n256"),     # prefill
    (8, 512, 300, "swap_2cta_m128n256"),
])
def test_the_blackwell_config_takes_max_m_rows_with_direct_stores(groups, max_m, expected_m, name):
    cfg = choose_masked_sm100_config(groups, max_m, 4096, 7168, expected_m, 148)
    assert cfg == SM100_NAMED_CONFIGS[name].__class__(**{**SM100_NAMED_CONFIGS[name].__dict__,
                                                        "direct_last_store": True})
    assert sm100_config_is_legal(cfg)[0]
    assert sm100_problem_fits_config(cfg, [(max_m, 4096, 7168, 1)])[0]


def test_the_blackwell_kernel_refuses_what_it_cannot_take():
    x = make_inputs(2, 8, 16, 512, 1)
    out = torch.zeros((2, 8, 16), dtype=torch.float16)
    p = moe.check_masked_args(*x.args(), counts_tensor((1, 2), "cpu"), out)
    assert masked_sm100_refusal(p, x.a, x.sfa, x.b, x.sfb, out) is None
    bad = moe.MaskedProblem(2, 8, 16, 128, p.device)
    assert "K = 128 is not a multiple of 256" in masked_sm100_refusal(bad, x.a, x.sfa, x.b, x.sfb, out)
    bad = moe.MaskedProblem(2, 8, 12, 512, p.device)
    assert "N = 12" in masked_sm100_refusal(bad, x.a, x.sfa, x.b, x.sfb, out)
    bad = moe.MaskedProblem(MASKED_PLAN_THREADS + 1, 8, 16, 512, p.device)
    assert "plan kernel's" in masked_sm100_refusal(bad, x.a, x.sfa, x.b, x.sfb, out)
    shifted = torch.zeros(2 * 8 * 16 + 1, dtype=torch.float16)[1:].view(2, 8, 16)
    assert "'out' does not start on a 16-byte boundary" in masked_sm100_refusal(p, x.a, x.sfa, x.b, x.sfb, shifted)


@pytest.mark.parametrize("name", ["swap_2cta_m128n256", "swap_1cta_m32n128", "plain_1cta_m128n128"])
def test_the_blackwell_launch_shape_and_tables(name):
    """The bound is every group full; the grid at most one cluster a tile and no more than
    the SM count's clusters without a device; the schedule holds the bound's rows and the
    count row after them."""
    cfg = SM100_NAMED_CONFIGS[name]
    for groups, max_m in ((64, 8), (8, 512), (1, 1)):
        shape = masked_sm100_shape(cfg, groups, max_m, 4096, 7168, 148, None)
        assert shape.bound == sm100_masked_bound(groups, max_m, 4096, cfg.tile_m, cfg.tile_n)
        assert shape.ctas == min(shape.bound, 148 // cfg.cta_group) * cfg.cta_group
        tables = masked_sm100_tables(shape, torch.device("cpu"))
        assert tables["schedule"].shape == (shape.bound + 1, 3)
        assert tables["ptrs"].shape == (groups, 5) and tables["desc_sizes"].shape == (groups, 4)
        assert tables["tmaps"].numel() * 8 == groups * 5 * 128


BIND_CHECK = """
import dataclasses, torch
from nvfp4_gemm.binding import dsl_args
from nvfp4_gemm.sm100 import SM100_NAMED_CONFIGS
from nvfp4_gemm.sm100_masked import compile_masked_sm100, masked_sm100_args, masked_sm100_shape, masked_sm100_tables
cfg = dataclasses.replace(SM100_NAMED_CONFIGS[{name!r}], direct_last_store=True)
kernels = compile_masked_sm100(cfg)
shape = masked_sm100_shape(cfg, 4, 64, 256, 512, 148, None)
tables = masked_sm100_tables(shape, torch.device("cpu"))
raw = torch.zeros(tables["tmaps"].numel() + 16, dtype=torch.int64)  # the descriptors' 128-byte alignment
skip = (-raw.data_ptr() % 128) // 8
tables["tmaps"] = raw[skip:skip + tables["tmaps"].numel()]
tables["masked_m"] = torch.zeros(4, dtype=torch.int32).data_ptr()
for fn, args in zip((kernels.init, kernels.plan, kernels.gemm), masked_sm100_args(shape, tables, 0)):
    exe_args, _ = fn.generate_execution_args(*dsl_args(args))
    print(len(args), len(exe_args))
"""


@pytest.mark.compile
@pytest.mark.slow
@pytest.mark.parametrize("python", list(_pythons()))
@pytest.mark.parametrize("name", ["swap_2cta_m128n256", "swap_1cta_m32n128"])
def test_the_blackwell_launch_arguments_fit_the_compiled_kernels(python, name):
    """masked_sm100_args against the kernels compile_masked_sm100 builds for sm_100a: the
    DSL's own conversion of each launch's arguments (the one a first launch makes) takes
    them, one by one, in number and alignment."""
    pytest.importorskip("cutlass")
    env = dict(os.environ, CUTE_DSL_ARCH="sm_100a")
    proc = subprocess.run([python, "-c", BIND_CHECK.format(name=name)], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = [tuple(map(int, line.split())) for line in proc.stdout.strip().splitlines()]
    assert [c[0] for c in counts] == [5, 9, 12], counts


# ----------------------------------------------------------------------------------------
# The current queue's handle, read without making a torch.cuda.Stream
# ----------------------------------------------------------------------------------------
def test_the_queue_handle_falls_back_to_torchs_stream_object(monkeypatch):
    """Where torch has no raw handle lookup (a torch built without CUDA, or one that dropped
    it), current_queue asks torch.cuda.current_stream for the device's."""
    from types import SimpleNamespace

    from nvfp4_gemm import masked_runner

    asked = []
    monkeypatch.setattr(masked_runner, "_raw_current_queue", None)
    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda device=None: asked.append(device) or SimpleNamespace(cuda_stream=1234))
    device = torch.device("cuda", 1)
    assert masked_runner.current_queue(device) == 1234 and asked == [device]


@pytest.mark.gpu
@requires_cuda
def test_the_queue_handle_is_torchs_current_stream():
    """current_queue gives torch's current CUDA stream of the device, on the default one
    and inside a torch.cuda.stream block on a side one."""
    from nvfp4_gemm import masked_runner

    device = torch.device("cuda", torch.cuda.current_device())
    assert masked_runner.current_queue(device) == torch.cuda.current_stream(device).cuda_stream
    side = torch.cuda.Stream(device)
    with torch.cuda.stream(side):
        assert masked_runner.current_queue(device) == side.cuda_stream != torch.cuda.default_stream(device).cuda_stream
