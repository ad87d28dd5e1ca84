# The whole H200 check in one device call (logs and JSON under $OUT):
#   canary (many tiles per CTA, both tile widths), benchmark with baselines, GPU tests,
#   eval test, sanitizers, host time; with OLD=path/to/submission.py also the benchmark of
#   that submission in the same call (same harness, same machine state). The device tool's
#   10-minute limit per call fits one half: PART=bench (canary, benchmarks, kernel times of
#   the chosen configs) or PART=checks (GPU tests, eval test, sanitizers, host time).
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/final.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)" | tee -a $L
PART=${PART:-all}
if [ "$PART" != checks ]; then
if ! timeout 200 python3 -m pytest -q -m gpu tests/test_gpu.py -k "many_tiles" -p no:cacheprovider 2>&1 | tail -2 | tee -a $L | grep -q " passed"; then
  echo "== canary failed: stopping (a kernel that loses pipeline state hangs or is wrong)" | tee -a $L
  exit 1
fi
timeout 140 python3 eval.py benchmark --baselines --report $OUT --json $OUT/bench.json 2>&1 | tail -12 | tee -a $L
if [ -n "${OLD:-}" ]; then
  rm -rf /tmp/old && mkdir -p /tmp/old && cp -r *.py task.yml tests /tmp/old/ && cp "$OLD" /tmp/old/submission.py
  (cd /tmp/old && timeout 100 python3 eval.py benchmark --json $OUT/bench_old.json 2>&1 | tail -8 | sed 's/^/[old] /' | tee -a $L)
fi
timeout 150 python3 tools/sm90_sweep.py --kernel-time "tile_n=256,split_k=1,pdl=0" "tile_n=128,pdl=0,narrow=64" 2>&1 | grep -v "^  " | tee -a $L
fi
if [ "$PART" != bench ]; then
timeout 330 python3 -m pytest -q -m gpu tests/ -p no:cacheprovider 2>&1 | tail -3 | tee -a $L
timeout 40 python3 eval.py test 2>&1 | tail -2 | tee -a $L
for tool in racecheck memcheck; do timeout 150 compute-sanitizer --tool $tool --report-api-errors no python3 tools/sanitize_case.py > /tmp/san.txt 2>&1; echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|bit-exact|within|MISMATCH' /tmp/san.txt | tr '\n' ' ')" | tee -a $L; done
timeout 120 python3 tools/host_overhead.py --calls 300 --breakdown --new-sizes --new-sizes-stream 300 --json $OUT/host.json 2>&1 | tail -16 | tee -a $L
fi
