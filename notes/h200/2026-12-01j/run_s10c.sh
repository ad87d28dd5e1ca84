# session 10, device run 3: every candidate config on the four shapes (event time), for the chooser and its cost model
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run3.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)" | tee -a $L
timeout 560 python3 tools/sm90_sweep.py auto "tile_n=128,narrow=64" "tile_n=128,narrow=96/64" "tile_n=128,narrow=64/32" \
  "tile_n=256,stream_k=1,narrow=64" "tile_n=256,stream_k=1,narrow=96/64" "tile_n=256,stream_k=1,narrow=64/32" "tile_n=256,stream_k=1,narrow=96/32" \
  "tile_n=256,narrow=96/64" "tile_n=128,stream_k=1,narrow=96/64" 2>&1 | grep -v "Warning\|_warn_once" | tee -a $L
