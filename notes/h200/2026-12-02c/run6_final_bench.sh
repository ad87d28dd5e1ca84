# Nineteenth session, call 6, on the final kernel (2444083's launched code): eval.py test and
# the benchmark with baselines and report (docs/benchmark.md).
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run6.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)" | tee -a $L
timeout 40 python3 eval.py test 2>&1 | tail -1 | tee -a $L
timeout 170 python3 eval.py benchmark --baselines --report $OUT --json $OUT/bench.json 2>&1 | tail -14 | tee -a $L
