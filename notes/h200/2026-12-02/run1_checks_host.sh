# Seventeenth session, call 1: GPU tests and eval test on the host-side changes (plain-tuple
# work units, HashedLruCache for layouts), host time old (120a5ea) and new alternating with
# the new --new-sizes-stream figure, and a profile of first calls on new pointers
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run1.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader) $(git log --oneline -1 2>/dev/null)" | tee -a $L
timeout 300 python3 -m pytest -q -m gpu tests/ -p no:cacheprovider 2>&1 | tail -2 | tee -a $L
timeout 60 python3 eval.py test 2>&1 | tail -1 | tee -a $L
rm -rf /tmp/old && mkdir -p /tmp/old && cp -r *.py task.yml tests tools /tmp/old/ && cp build/old/submission_120a5ea.py /tmp/old/submission.py
for tree in /tmp/old .; do
  (cd $tree && timeout 150 python3 tools/host_overhead.py --calls 300 --new-sizes --new-sizes-stream 300 --json $OUT/host_$(basename $(realpath $tree)).json 2>&1 | tail -11 | sed "s#^#[$tree] #" | tee -a $L)
done
timeout 60 python3 notes/h200/2026-12-02/profile_new_pointers.py > $OUT/profile_new_pointers.txt 2>&1; echo "profile rc=$?" | tee -a $L
