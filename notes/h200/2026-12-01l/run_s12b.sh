# Twelfth session, run 2: the full checks on HEAD (GPU tests, eval test, sanitizers, host
# time), then host time per launch through a CUDA graph replay.
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh > /tmp/setup.log 2>&1; tail -1 /tmp/setup.log
PART=checks bash tools/h200_final.sh
timeout 60 python3 notes/h200/2026-12-01l/graph_probe.py 2>&1 | grep -v "Warning\|_warn_once" | tail -4 | tee -a $OUT/final.log
