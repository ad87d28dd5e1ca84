# Fourteenth session, run 5: the C descriptor acquired at the CTA's start (and at a change
# of group) instead of before every tile's store: bit for bit against HEAD, three
# alternating rounds against HEAD (build/head14), then the checks of the final code (GPU
# tests, eval.py test, racecheck and memcheck).
#   run: {"command": "bash notes/h200/2026-12-01n/run_s14e.sh", "carry": [".device", "build/head14"]}
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh > /tmp/setup.log 2>&1; tail -1 /tmp/setup.log
L=$OUT/run5.log
timeout 120 python3 notes/h200/2026-12-01l/bitexact.py build/head14/submission.py $OUT/head.pt 2>&1 | tail -1 | tee -a $L
timeout 120 python3 notes/h200/2026-12-01l/bitexact.py submission.py $OUT/new.pt $OUT/head.pt 2>&1 | tail -2 | tee -a $L
rm -f $OUT/*.pt
for i in 1 2 3; do
  for m in build/head14/submission.py submission.py; do
    timeout 80 python3 tools/sm90_sweep.py --module $m auto 2>&1 | grep "geomean" | tee -a $L
  done
done
timeout 200 python3 -m pytest -q -m gpu tests/ -p no:cacheprovider 2>&1 | tail -2 | tee -a $L
timeout 40 python3 eval.py test 2>&1 | tail -2 | tee -a $L
for tool in racecheck memcheck; do timeout 100 compute-sanitizer --tool $tool --report-api-errors no python3 tools/sanitize_case.py > /tmp/san.txt 2>&1; echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|bit-exact|within|MISMATCH' /tmp/san.txt | tr '\n' ' ')" | tee -a $L; done
