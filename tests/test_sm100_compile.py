"""Compile-only tests of the sm_100a kernel on the CPU (no GPU or driver needed).

Each case runs tools/sm100_compile_check.py in a subprocess (the DSL reads CUTE_DSL_* at
import, and one process per DSL version keeps the two installs apart) and checks the PTX:
the block-scaled tcgen05 MMA is there, the epilogue stores through TMA, TMEM alloc/dealloc
are paired, nothing spills to local memory, and the watchdog is whole: every mbarrier wait
bounded by the global timer, every give-up path on its way to tcgen05.dealloc (also in the
builds with a fault injected at each wait site).

DSL versions: 4.8.1 always (the running python where it has it, else the project venv's); the leaderboard runner's 4.5.2 when
NVFP4_DSL452_PYTHON names its python.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECK = ROOT / "tools" / "sm100_compile_check.py"
sys.path.insert(0, str(ROOT / "tests"))
from nvfp4_gemm import sm100 as k  # noqa: E402
from nvfp4_gemm.watchdog import WAIT_SITES  # noqa: E402


def _dsl481_python() -> str:
    """The running interpreter where it has the pinned DSL 4.8.x, else the project venv's."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        if version("nvidia-cutlass-dsl").startswith("4.8."):
            return sys.executable
    except PackageNotFoundError:
        pass
    return str(ROOT / ".venv" / "bin" / "python")


DSL_PYTHONS = {
    "dsl481": _dsl481_python(),
    "dsl452": os.environ.get("NVFP4_DSL452_PYTHON", ""),
}
# Configs of the benchmark table first; the other named variants are compiled too.
CONFIG_NAMES = sorted(
    k.SM100_NAMED_CONFIGS,
    key=lambda n: k.SM100_NAMED_CONFIGS[n] not in k.SM100_CONFIG_TABLE.values(),
)


def _python_or_skip(dsl: str) -> str:
    py = DSL_PYTHONS[dsl]
    if dsl == "dsl452" and not py:
        pytest.skip("NVFP4_DSL452_PYTHON is not set: no nvidia-cutlass-dsl 4.5.2 python to test")
    if not Path(py).exists():
        pytest.skip(f"{dsl}: python {py!r} does not exist")
    return py


def _compile_report(dsl: str, config: str, tmp_path, inject: str | None = None) -> dict:
    py = _python_or_skip(dsl)
    env = {
        **os.environ,
        "CUTE_DSL_ARCH": "sm_100a",
        "CUTE_DSL_KEEP": "ptx,cubin",
        "CUTE_DSL_DUMP_DIR": str(tmp_path),
    }
    extra = [] if inject is None else ["--inject", inject]
    proc = subprocess.run(
        [py, str(CHECK), "--config", config, "--out", str(tmp_path), *extra],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _assert_watchdog_whole(gemm: dict) -> None:
    """Every mbarrier wait is the watchdog's (none of the DSL's unbounded ones is left), each
    reads the global timer, and from each one's give-up path the control flow reaches
    tcgen05.dealloc: a CTA that gives up releases its TMEM (no trap ends a path)."""
    wd = gemm["watchdog"]
    assert wd["bounded_waits"] >= 9 and wd["unbounded_mbarrier_waits"] == 0, wd
    assert wd["bounded_waits_reading_timer"] == wd["bounded_waits"], wd
    assert wd["giveup_paths"] == wd["bounded_waits"] == wd["giveup_paths_reaching_dealloc"], wd
    assert wd["traps"] == 0, wd


@pytest.mark.compile
@pytest.mark.slow
@pytest.mark.parametrize("config", CONFIG_NAMES)
@pytest.mark.parametrize("dsl", sorted(DSL_PYTHONS))
def test_compile_sm100(dsl, config, tmp_path):
    report = _compile_report(dsl, config, tmp_path)
    gemm, init = report["kernels"]["gemm"], report["kernels"]["init"]
    _assert_watchdog_whole(gemm)
    assert report["has_block_scale_mma"], "no tcgen05.mma kind::mxf4nvf4.block_scale"
    assert report["ld_local"] == 0 and report["st_local"] == 0, "local memory traffic"
    assert gemm["tma_store"] > 0, "epilogue does not use a TMA store"
    # direct_last_store: one subtile's 4 chunks a thread (unrolled), each a 16-byte smem
    # read and a predicated 16-byte store; no other config stores C without the TMA
    direct = k.SM100_NAMED_CONFIGS[config].direct_last_store
    assert (gemm["ld_shared_v4"], gemm["st_global_v4"]) == ((4, 4) if direct else (0, 0)), gemm
    assert gemm["tma_load"] > 0
    assert gemm["tcgen05_alloc"] == gemm["tcgen05_dealloc"] == 1
    assert gemm["tensormap_replace"] == 0, "the GEMM must not rewrite descriptors"
    assert init["tensormap_replace"] > 0
    assert gemm["pdl_wait"] == 1 and gemm["global_before_pdl_wait"] == 0, "PDL: global access before the wait"
    # before the wait, prefetch_start's: the schedule row (two addresses) and the sizes'
    # lines into L1, host-written; the descriptors into L2 only
    assert gemm["l1_prefetch_before_pdl_wait"] == 3, gemm["l1_prefetch_before_pdl_wait"]
    assert gemm["l2_prefetch_before_pdl_wait"] >= 1, "descriptors not prefetched before the wait"
    for kernel in (gemm, init):
        for res in kernel["ptxas"].values():
            assert res["spill_stores"] == 0 and res["spill_loads"] == 0, res
    assert report["dynamic_smem_bytes"] <= report["dynamic_smem_bytes_model"]
    assert report["dynamic_smem_bytes_model"] <= k.SM100_SMEM_CAPACITY


SM100_SITES = [site.name for site in WAIT_SITES if site.kernel == "sm100" and site.inject is not None]


@pytest.mark.compile
@pytest.mark.slow
@pytest.mark.parametrize("site", SM100_SITES)
@pytest.mark.parametrize("dsl", sorted(DSL_PYTHONS))
def test_compile_sm100_with_each_injected_fault(dsl, site, tmp_path):
    """NVFP4_GEMM_INJECT_HANG's builds of the 2-CTA config (the one with every wait site,
    the pair's teardown among them) compile for sm_100a, without spills, with the watchdog
    whole."""
    report = _compile_report(dsl, "swap_2cta_m128n256", tmp_path, inject=site)
    assert report["inject"] == site
    gemm = report["kernels"]["gemm"]
    _assert_watchdog_whole(gemm)
    for res in gemm["ptxas"].values():
        assert res["spill_stores"] == 0 and res["spill_loads"] == 0, res
