# Sixteenth session, call 3: the final commit's GPU tests and eval test, then the host time
# of calls with new sizes and the config choice, old (2278827) and new alternating
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run3.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)" | tee -a $L
timeout 300 python3 -m pytest -q -m gpu tests/ -p no:cacheprovider 2>&1 | tail -3 | tee -a $L
timeout 60 python3 eval.py test 2>&1 | tail -2 | tee -a $L
rm -rf /tmp/old && mkdir -p /tmp/old && cp -r *.py task.yml tests tools /tmp/old/ && cp build/old/submission.py /tmp/old/submission.py
for round in 1 2; do
  for tree in /tmp/old .; do
    (cd $tree && timeout 100 python3 tools/host_overhead.py --calls 100 --new-sizes 2>&1 | grep -E "new sizes|launch floor" | sed "s#^#[$tree r$round] #" | tee -a $L)
  done
done
timeout 80 python3 tools/chooser_cost.py build/old/submission.py submission.py 2>&1 | tail -2 | tee -a $L
