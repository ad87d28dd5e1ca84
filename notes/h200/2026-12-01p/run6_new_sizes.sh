# Sixteenth session, call 6: host time of calls with new sizes at K = 512 and at shape 0's
# N and K (stream-K competes), old (2278827) and new, both through this tree's tool
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run6.log
rm -rf /tmp/old && mkdir -p /tmp/old && cp -r *.py task.yml tests tools /tmp/old/ && cp build/old/submission.py /tmp/old/submission.py
for tree in /tmp/old . /tmp/old .; do
  (cd $tree && timeout 110 python3 tools/host_overhead.py --calls 50 --new-sizes 2>&1 | grep -E "new sizes|launch floor" | sed "s#^#[$tree] #" | tee -a $L)
done
