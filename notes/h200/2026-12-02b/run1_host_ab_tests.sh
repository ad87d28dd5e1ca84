# Eighteenth session, call 1: the unrolled call key against 40218c3 (warm calls, same input
# and the leaderboard's 15 in turn, alternating rounds), the warm path's C calls, the
# breakdown, then GPU tests and eval test on this code.
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run1.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader); HEAD $(git log -1 --format=%h 2>/dev/null)" | tee -a $L
timeout 60 python3 notes/h200/2026-12-02b/c_calls.py 2>&1 | tee -a $L
timeout 240 python3 tools/host_ab.py build/old/submission_40218c3.py submission.py --rounds 8 --calls 300 2>&1 | grep -v Warning | tee -a $L
timeout 120 python3 tools/host_overhead.py --calls 300 --breakdown --json $OUT/host_overhead.json 2>&1 | grep -v Warning | tee -a $L
timeout 300 python3 -m pytest -q -m gpu tests/ -p no:cacheprovider 2>&1 | tail -2 | tee -a $L
timeout 60 python3 eval.py test 2>&1 | tail -1 | tee -a $L
