# Eleventh session, run 2: the descriptor-encode cost, the alignment fallback on the real
# kernel, balanced_units on tiny grids, then the schedule A/B (2 rounds).
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh > /tmp/setup.log 2>&1; tail -1 /tmp/setup.log
L=$OUT/run2.log
timeout 60 python3 notes/h200/2026-12-01k/encode_probe.py 2>&1 | tail -4 | tee -a $L
timeout 120 python3 -m pytest -q -m gpu tests/test_gpu.py -k "unaligned or self_check" -p no:cacheprovider 2>&1 | tail -2 | tee -a $L
timeout 420 python3 notes/h200/2026-12-01k/sched_ab.py 2 2>&1 | grep -v Warning | tee -a $L
