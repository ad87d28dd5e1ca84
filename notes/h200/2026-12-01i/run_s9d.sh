# session 9, device run 4: the final commit as one build: canary, eval.py benchmark with baselines,
# K-tile costs, tile_n 128 stream-K against the chooser on shapes 2 / 3
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run4.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader) at $(git log -1 --format=%h 2>/dev/null)" | tee -a $L
if ! timeout 200 python3 -m pytest -q -m gpu tests/test_gpu.py -k "many_tiles" -p no:cacheprovider 2>&1 | tail -2 | tee -a $L | grep -q " passed"; then
  echo "== canary failed" | tee -a $L; exit 1
fi
timeout 140 python3 eval.py benchmark --baselines --report $OUT --json $OUT/bench.json 2>&1 | tail -12 | tee -a $L
timeout 120 python3 tools/sm90_ktile_cost.py 2>&1 | grep -v "Warning\|_warn_once" | tee -a $L
timeout 100 python3 tools/sm90_sweep.py --shapes 2,3 auto "tile_n=128,stream_k=1,narrow=64" auto "tile_n=128,stream_k=1,narrow=64" 2>&1 | grep -v "Warning\|_warn_once\|^  " | tee -a $L
