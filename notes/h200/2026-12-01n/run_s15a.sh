# Prepared in the fourteenth session for the next device call (not run: no device time left).
# experiments/sm90_producer_acquire_per_group.patch against HEAD: the GPU tests of
# multi-unit schedules on the patched file (stop if any fails: a producer that loses its
# place hangs, every step is under a timeout), bit for bit against HEAD, three alternating
# rounds of the chooser's configs, and both files' tile_n 256 timelines.
#   run: {"command": "bash notes/h200/2026-12-01n/run_s15a.sh", "carry": [".device"]}
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh > /tmp/setup.log 2>&1; tail -1 /tmp/setup.log
L=$OUT/run.log
ROOT=$PWD
mkdir -p /tmp/head /tmp/pacq && cp submission.py /tmp/head/submission.py && cp submission.py /tmp/pacq/submission.py
(cd /tmp/pacq && git apply "$ROOT/notes/experiments/sm90_producer_acquire_per_group.patch") || { echo "== patch did not apply" | tee -a $L; exit 1; }
cp /tmp/pacq/submission.py submission.py
if ! timeout 300 python3 -m pytest -q -m gpu tests/test_gpu.py -k "many_tiles or balanced or stream_k or tiny" -p no:cacheprovider 2>&1 | tail -2 | tee -a $L | grep -q " passed"; then
  echo "== GPU tests failed on the patch: stopping" | tee -a $L; cp /tmp/head/submission.py submission.py; exit 1
fi
cp /tmp/head/submission.py submission.py
timeout 120 python3 notes/h200/2026-12-01l/bitexact.py /tmp/head/submission.py $OUT/head.pt 2>&1 | tail -1 | tee -a $L
timeout 120 python3 notes/h200/2026-12-01l/bitexact.py /tmp/pacq/submission.py $OUT/new.pt $OUT/head.pt 2>&1 | tail -2 | tee -a $L
rm -f $OUT/*.pt
for i in 1 2 3; do
  for m in /tmp/head/submission.py /tmp/pacq/submission.py; do
    timeout 80 python3 tools/sm90_sweep.py --module $m auto 2>&1 | grep "geomean" | tee -a $L
  done
done
for m in /tmp/head/submission.py /tmp/pacq/submission.py; do
  echo "== timeline $m" | tee -a $L
  timeout 100 python3 tools/sm90_trace.py timeline --module $m --only "tile_n 256" --out /tmp/tl.pt 2>&1 | grep -v "^  [a-zK]" | tee -a $L
done
