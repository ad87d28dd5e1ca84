# Sixteenth session, call 2: host time of calls with new sizes (and warm), old (2278827) and
# new alternating, then the benchmark of the final commit with its baselines
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run2.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)" | tee -a $L
rm -rf /tmp/old && mkdir -p /tmp/old && cp -r *.py task.yml tests tools /tmp/old/ && cp build/old/submission.py /tmp/old/submission.py
for round in 1 2; do
  for tree in /tmp/old .; do
    (cd $tree && timeout 120 python3 tools/host_overhead.py --calls 300 --new-sizes --json $OUT/host_${round}_$(basename $(realpath $tree)).json 2>&1 | tail -8 | sed "s#^#[$tree r$round] #" | tee -a $L)
  done
done
timeout 150 python3 eval.py benchmark --baselines --report $OUT --json $OUT/bench.json 2>&1 | tail -12 | tee -a $L
