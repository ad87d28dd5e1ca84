"""Compile-only tests of the sm_100a kernel on the CPU (no GPU or driver needed).

Each case runs tools/sm100_compile_check.py in a subprocess (the DSL reads CUTE_DSL_* at
import, and one process per DSL version keeps the two installs apart) and checks the PTX:
the block-scaled tcgen05 MMA is there, the epilogue stores through TMA, TMEM alloc/dealloc
are paired, nothing spills to local memory.

DSL versions: the project venv (4.8.1) always; the leaderboard runner's 4.5.2 when
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

DSL_PYTHONS = {
    "dsl481": str(ROOT / ".venv" / "bin" / "python"),
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


@pytest.mark.compile
@pytest.mark.slow
@pytest.mark.parametrize("config", CONFIG_NAMES)
@pytest.mark.parametrize("dsl", sorted(DSL_PYTHONS))
def test_compile_sm100(dsl, config, tmp_path):
    py = _python_or_skip(dsl)
    env = {
        **os.environ,
        "CUTE_DSL_ARCH": "sm_100a",
        "CUTE_DSL_KEEP": "ptx,cubin",
        "CUTE_DSL_DUMP_DIR": str(tmp_path),
    }
    proc = subprocess.run(
        [py, str(CHECK), "--config", config, "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    gemm, init = report["kernels"]["gemm"], report["kernels"]["init"]
    assert report["has_block_scale_mma"], "no tcgen05.mma kind::mxf4nvf4.block_scale"
    assert report["ld_local"] == 0 and report["st_local"] == 0, "local memory traffic"
    assert gemm["tma_store"] > 0, "epilogue does not use a TMA store"
    assert gemm["tma_load"] > 0
    assert gemm["tcgen05_alloc"] == gemm["tcgen05_dealloc"] == 1
    assert gemm["tensormap_replace"] == 0, "the GEMM must not rewrite descriptors"
    assert init["tensormap_replace"] > 0
    assert gemm["pdl_wait"] == 1 and gemm["global_before_pdl_wait"] == 0, "PDL: global access before the wait"
    for kernel in (gemm, init):
        for res in kernel["ptxas"].values():
            assert res["spill_stores"] == 0 and res["spill_loads"] == 0, res
    assert report["dynamic_smem_bytes"] <= report["dynamic_smem_bytes_model"]
    assert report["dynamic_smem_bytes_model"] <= k.SM100_SMEM_CAPACITY
