# Seventeenth session, call 4: GPU tests, eval test and warm host time on the final code
# (the runner's lock, bind_launch's per-stream lock and owned argument storage)
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run4.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)" | tee -a $L
timeout 300 python3 -m pytest -q -m gpu tests/ -p no:cacheprovider 2>&1 | tail -2 | tee -a $L
timeout 60 python3 eval.py test 2>&1 | tail -1 | tee -a $L
timeout 120 python3 tools/host_overhead.py --calls 300 --breakdown 2>&1 | grep -vE "^\[" | tee -a $L
