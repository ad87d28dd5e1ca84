# Fourteenth session, run 3: the epilogue with one descriptor acquire per tile (tile_n 256)
# and the next unit's first K-tile prepared by the last K-tile (tile_n 128): correctness
# (GPU tests, bit for bit against HEAD), the timeline's transitions, and two alternating
# rounds against HEAD (build/head14), event and kernel time.
#   run: {"command": "bash notes/h200/2026-12-01n/run_s14c.sh", "carry": [".device", "build/head14"]}
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh > /tmp/setup.log 2>&1; tail -1 /tmp/setup.log
L=$OUT/run3.log
if ! timeout 400 python3 -m pytest -q -m gpu tests/ -x -p no:cacheprovider 2>&1 | tail -3 | tee -a $L | grep -q " passed"; then
  echo "== GPU tests failed: stopping" | tee -a $L; exit 1
fi
timeout 200 python3 notes/h200/2026-12-01l/bitexact.py build/head14/submission.py $OUT/head.pt 2>&1 | tail -3 | tee -a $L
timeout 200 python3 notes/h200/2026-12-01l/bitexact.py submission.py $OUT/new.pt $OUT/head.pt 2>&1 | tail -3 | tee -a $L
rm -f $OUT/*.pt
timeout 150 python3 tools/sm90_trace.py timeline --out /tmp/tl.pt 2>&1 | grep -v "^  [a-zK]" | tee -a $L
for i in 1 2; do
  timeout 110 python3 tools/sm90_sweep.py --module build/head14/submission.py --kernel-time auto 2>&1 | grep -v "Warning\|_warn_once" | tee -a $L
  timeout 110 python3 tools/sm90_sweep.py --kernel-time auto 2>&1 | grep -v "Warning\|_warn_once" | tee -a $L
done
