# Thirteenth session, run 3: the first stage alone (experiments/sm90_first_stage_alone.patch
# applied as build/fill: fill_ahead f = the producer issues f K-tiles, waits for the first,
# then the rest) against HEAD, two alternating rounds, shapes 2 / 3 at tile_n 128 (whole and
# balanced pieces) and 0 / 1 at 256 stream-K; then eval.py benchmark with the baselines
# (the fp16 ceiling of this call) on HEAD
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh > /tmp/setup.log 2>&1; tail -1 /tmp/setup.log
L=$OUT/run3.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)" | tee -a $L
for i in 1 2; do
timeout 60 python3 tools/sm90_sweep.py --shapes 2,3 "tile_n=128" "tile_n=128,stream_k=1" 2>&1 | grep -v "Warning\|_warn_once\|^  " | tee -a $L
timeout 80 python3 tools/sm90_sweep.py --module build/fill/submission.py --shapes 2,3 "tile_n=128,fill_ahead=1" \
  "tile_n=128,stream_k=1,fill_ahead=1" "tile_n=128,fill_ahead=2" 2>&1 | grep -v "Warning\|_warn_once\|^  " | tee -a $L
timeout 60 python3 tools/sm90_sweep.py --shapes 0,1 "tile_n=256,stream_k=1" 2>&1 | grep -v "Warning\|_warn_once\|^  " | tee -a $L
timeout 60 python3 tools/sm90_sweep.py --module build/fill/submission.py --shapes 0,1 "tile_n=256,stream_k=1,fill_ahead=1" 2>&1 | grep -v "Warning\|_warn_once\|^  " | tee -a $L
done
timeout 150 python3 eval.py benchmark --baselines --report $OUT --json $OUT/bench.json 2>&1 | tail -14 | tee -a $L
