# Eighteenth session, call 3, on the final code: GPU tests, eval test, benchmark with
# baselines, the warm-call A/B against 40218c3 (8 alternating rounds), the launch probe.
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run3.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)" | tee -a $L
timeout 200 python3 -m pytest -q -m gpu tests/ -p no:cacheprovider 2>&1 | tail -2 | tee -a $L
timeout 40 python3 eval.py test 2>&1 | tail -1 | tee -a $L
timeout 150 python3 eval.py benchmark --baselines --report $OUT --json $OUT/bench.json 2>&1 | tail -12 | tee -a $L
timeout 120 python3 tools/host_ab.py build/old/submission_40218c3.py submission.py --rounds 8 --calls 300 2>&1 | grep -v Warning | tee -a $L
timeout 60 python3 notes/h200/2026-12-02b/launch_probe.py 2>&1 | grep -v Warning | tee -a $L
