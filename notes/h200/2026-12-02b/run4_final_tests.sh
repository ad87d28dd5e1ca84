# Eighteenth session, call 4, on the final code (LayoutMiss): GPU tests, eval test, the
# layout-keyed and new-pointer paths against 1576faa (ab_paths.py).
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run4.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)" | tee -a $L
timeout 200 python3 -m pytest -q -m gpu tests/ -p no:cacheprovider 2>&1 | tail -2 | tee -a $L
timeout 40 python3 eval.py test 2>&1 | tail -1 | tee -a $L
timeout 120 python3 notes/h200/2026-12-02/ab_paths.py build/old/submission_1576faa.py submission.py 2>&1 | grep -v Warning | tee -a $L
