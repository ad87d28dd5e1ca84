# Eleventh session, run 1: the self-check on the real kernel, the task tests with it
# forced on, the benchmark with the new cuBLAS fp16 baselines, host time.
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh > /tmp/setup.log 2>&1; tail -1 /tmp/setup.log
L=$OUT/run1.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)" | tee -a $L
timeout 150 python3 -m pytest -q -m gpu tests/test_gpu.py -k "self_check or task_tests or many_tiles" -p no:cacheprovider 2>&1 | tail -3 | tee -a $L
NVFP4_GEMM_SELF_CHECK=1 timeout 60 python3 -W error::RuntimeWarning eval.py test 2>&1 | tail -3 | sed 's/^/[self-check on] /' | tee -a $L
timeout 200 python3 eval.py benchmark --baselines --report $OUT --json $OUT/bench.json 2>&1 | tail -14 | tee -a $L
timeout 60 python3 tools/host_overhead.py --calls 300 --breakdown --json $OUT/host.json 2>&1 | tail -14 | tee -a $L
