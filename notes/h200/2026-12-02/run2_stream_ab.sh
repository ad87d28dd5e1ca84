# Seventeenth session, call 2: new sizes on inputs made per call (--new-sizes-stream), old
# (120a5ea) and new alternating twice more, the warm cases at 50 calls only
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run2.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)" | tee -a $L
rm -rf /tmp/old && mkdir -p /tmp/old && cp -r *.py task.yml tests tools /tmp/old/ && cp build/old/submission_120a5ea.py /tmp/old/submission.py
for round in 1 2; do
  for tree in /tmp/old .; do
    (cd $tree && timeout 120 python3 tools/host_overhead.py --calls 50 --new-sizes-stream 400 --json $OUT/stream_${round}_$(basename $(realpath $tree)).json 2>&1 | grep -E "stream|floor" | sed "s#^#[$tree r$round] #" | tee -a $L)
  done
done
