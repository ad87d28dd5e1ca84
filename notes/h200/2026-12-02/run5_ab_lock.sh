# Seventeenth session, call 5: the layout-keyed path and first calls on new pointers,
# a9e61ce (before the locks) and the final code side by side, 6 alternating rounds
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run5.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)" | tee -a $L
timeout 300 python3 notes/h200/2026-12-02/ab_paths.py build/old/submission_a9e61ce.py submission.py 2>&1 | tail -6 | tee -a $L
