# Sixteenth session, call 1: GPU tests and eval test on the host-side schedule changes
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run1.log
echo "== $(git log --oneline -1 2>/dev/null) $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)" | tee -a $L
timeout 400 python3 -m pytest -q -m gpu tests/ -p no:cacheprovider 2>&1 | tail -4 | tee -a $L
timeout 60 python3 eval.py test 2>&1 | tail -3 | tee -a $L
timeout 100 python3 tools/chooser_cost.py build/old/submission.py submission.py 2>&1 | tail -2 | tee -a $L
