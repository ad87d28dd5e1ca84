"""The watchdog on real hardware: each wait of the Hopper kernel made to hang on purpose
(NVFP4_GEMM_INJECT_HANG) is ended by its deadline, the call returns the exact result, the
config is retired with a warning that names the wait, and another config still runs on the
same device (tools/watchdog_check.py, one process per site)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import requires_sm90

from nvfp4_gemm.watchdog import WAIT_SITES

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.gpu, pytest.mark.slow]


@requires_sm90
@pytest.mark.parametrize("site", [s.name for s in WAIT_SITES if s.kernel == "sm90" and s.inject is not None])
def test_an_injected_hang_is_ended_diagnosed_and_retired(site):
    deadline_ms = 500
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "watchdog_check.py"), site, "--ms", str(deadline_ms),
         "--timeout", "300"],
        capture_output=True, text=True, timeout=400, cwd=ROOT,
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = lines[0]
    print(json.dumps(result, indent=1))
    assert "error" not in result, result.get("error")
    assert result["exact"], "the call that hung did not return the exact result"
    assert result["elapsed_s"] < deadline_ms / 1000 + 1.5, result["elapsed_s"]
    assert result["named"], result["warnings"]
    assert result["fallback"], result["fallback_warnings"]
    assert result["other_ran"] and result["other_exact"], result
    assert result["passed"] and proc.returncode == 0
