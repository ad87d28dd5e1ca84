# session 9, device run 1: scale half-select patch (submission.py) against HEAD f521b46 (build/v_head); GPU tests on the patch; K-tile costs
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run1.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)" | tee -a $L
for i in 1 2; do
for m in build/v_head/submission.py submission.py; do
echo "-- $m" | tee -a $L
timeout 100 python3 tools/sm90_sweep.py --module $m --kernel-time auto 2>&1 | grep -v "^  \|Warning" | tee -a $L
done
done
timeout 200 python3 -m pytest -q -m gpu tests/ -p no:cacheprovider 2>&1 | tail -2 | tee -a $L
timeout 150 python3 tools/sm90_ktile_cost.py 2>&1 | grep -v Warning | tee -a $L
