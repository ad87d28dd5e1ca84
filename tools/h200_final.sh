set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/final.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)" | tee -a $L
timeout 90 python3 -m pytest -q -m gpu tests/ -p no:cacheprovider 2>&1 | tail -3 | tee -a $L
timeout 30 python3 eval.py test 2>&1 | tail -2 | tee -a $L
for tool in racecheck memcheck; do timeout 40 compute-sanitizer --tool $tool --report-api-errors no python3 tools/sanitize_case.py > /tmp/san.txt 2>&1; echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|bit-exact|MISMATCH' /tmp/san.txt | tr '\n' ' ')" | tee -a $L; done
timeout 40 python3 tools/host_overhead.py --calls 300 --breakdown --json $OUT/host.json 2>&1 | tail -13 | tee -a $L
timeout 100 python3 eval.py benchmark --baselines --report $OUT --json $OUT/bench.json 2>&1 | tail -12 | tee -a $L
