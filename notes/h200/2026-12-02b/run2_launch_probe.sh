# Eighteenth session, call 2: a launch's host cost by layer (launch_probe.py)
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run2.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)" | tee -a $L
timeout 200 python3 notes/h200/2026-12-02b/launch_probe.py 2>&1 | grep -v Warning | tee -a $L
