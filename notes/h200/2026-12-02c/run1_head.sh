# Nineteenth session, call 1, on HEAD (0caecb2): the full GPU suite (not run since the fp16
# fallback landed), eval test on the kernel and on the torch path, benchmark with baselines
# (fp16 ceiling, cuBLAS dense, torch._grouped_mm), the launch probe (the driver's floor).
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run1.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader) $(git log -1 --format=%h 2>/dev/null)" | tee -a $L
timeout 220 python3 -m pytest -q -m gpu tests/ -p no:cacheprovider 2>&1 | tail -3 | tee -a $L
timeout 40 python3 eval.py test 2>&1 | tail -1 | tee -a $L
NVFP4_GEMM_PATH=torch timeout 60 python3 eval.py test 2>&1 | tail -1 | sed 's/^/[torch path] /' | tee -a $L
timeout 170 python3 eval.py benchmark --baselines --report $OUT --json $OUT/bench.json 2>&1 | tail -14 | tee -a $L
timeout 60 python3 notes/h200/2026-12-02b/launch_probe.py 2>&1 | grep -v Warning | tee -a $L
