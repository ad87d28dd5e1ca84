"""No DeprecationWarning from the project's own use of the CuTe DSL: each kernel compiled
(on the CPU) under the project's DSL 4.8.1 and the leaderboard runners' 4.5.2 raises none.
The names 4.8.1 deprecates have a stand-in in nvfp4_gemm/common.py where 4.5.2 lacks the
new one (cutlass.memory.SmemAllocator, cutlass.tensor_utils)."""

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.compile, pytest.mark.slow]

SCRIPT = """
import json, sys, warnings
sys.path.insert(0, {root!r})
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    from nvfp4_gemm import decoder, sm90, sm90_config, sm100
    if {arch!r} == "sm_90a":
        sm90.compile_sm90(sm90_config.make_sm90_config(256, split_k=True))
        sm90.compile_sm90(sm90_config.make_sm90_config(256, tile_m=32, narrow=(16,), mma_depth=3))
        decoder.compile_fp4_decoder()
    else:
        for config in sm100.SM100_NAMED_CONFIGS.values():
            sm100.compile_sm100(config)
print(json.dumps(sorted({{(w.filename, w.lineno, str(w.message)[:200]) for w in caught
                          if issubclass(w.category, DeprecationWarning)}})))
"""


def _pythons():
    yield "dsl481", str(ROOT / ".venv" / "bin" / "python")
    yield "dsl452", os.environ.get("NVFP4_DSL452_PYTHON", "")


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("dsl, py", list(_pythons()), ids=lambda x: x if x.startswith("dsl") else "")
def test_the_kernels_compile_without_deprecation_warnings(dsl, py, arch):
    if not py:
        pytest.skip("NVFP4_DSL452_PYTHON is not set: no nvidia-cutlass-dsl 4.5.2 python to test")
    if not Path(py).exists():
        pytest.skip(f"{dsl}: python {py!r} does not exist")
    proc = subprocess.run([py, "-c", SCRIPT.format(root=str(ROOT), arch=arch)], capture_output=True,
                          text=True, env=dict(os.environ, CUTE_DSL_ARCH=arch), timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    warned = json.loads(proc.stdout.strip().splitlines()[-1])
    assert warned == [], warned
