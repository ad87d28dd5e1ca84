# Fourteenth session, run 4: what the C descriptor's tensormap acquire costs in the epilogue.
# HEAD (build/head14: an acquire before each block's store), this file (the acquire before a
# tile's first store only) and build/noacq (no acquire at all: a measurement, not a
# candidate): timeline of the tile_n 256 cases, two alternating rounds of the chooser's
# configs, and this file bit for bit against HEAD.
#   run: {"command": "bash notes/h200/2026-12-01n/run_s14d.sh", "carry": [".device", "build/head14", "build/noacq"]}
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh > /tmp/setup.log 2>&1; tail -1 /tmp/setup.log
L=$OUT/run4.log
for m in build/head14/submission.py submission.py build/noacq/submission.py; do
  echo "== timeline $m" | tee -a $L
  timeout 100 python3 tools/sm90_trace.py timeline --module $m --only "tile_n 256" --out /tmp/tl.pt 2>&1 | grep -v "^  [a-zK]" | tee -a $L
done
for i in 1 2; do
  for m in build/head14/submission.py submission.py build/noacq/submission.py; do
    timeout 100 python3 tools/sm90_sweep.py --module $m auto 2>&1 | grep "geomean" | tee -a $L
  done
done
timeout 200 python3 notes/h200/2026-12-01l/bitexact.py build/head14/submission.py $OUT/head.pt 2>&1 | tail -2 | tee -a $L
timeout 200 python3 notes/h200/2026-12-01l/bitexact.py submission.py $OUT/new.pt $OUT/head.pt 2>&1 | tail -2 | tee -a $L
rm -f $OUT/*.pt
