# Seventeenth session, call 3: the layout-keyed path and first calls on new pointers, old
# (120a5ea) and new loaded side by side in one process, 6 alternating rounds
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run3.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)" | tee -a $L
timeout 300 python3 notes/h200/2026-12-02/ab_paths.py build/old/submission_120a5ea.py submission.py 2>&1 | tail -6 | tee -a $L
timeout 120 python3 tools/host_overhead.py --calls 300 --breakdown 2>&1 | grep -E "pieces|G=2 N=4096|floor" | tee -a $L
