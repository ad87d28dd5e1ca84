# Eleventh session, run 6: the benchmark of this commit with c26bf4c (the tenth session's
# final) in the same call, then the one-group shape whose chooser pick changed.
set -uo pipefail
PART=bench OLD=build/head/submission.py bash tools/h200_final.sh
source .device/setup.sh > /tmp/setup.log 2>&1
timeout 120 python3 notes/h200/2026-12-01k/sched_ab2.py 2 D 2>&1 | grep -v Warning | tail -3 | tee -a $OUT/final.log
