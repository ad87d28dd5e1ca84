# session 9, device run 8: shape 1 at tile_n 256 (64,), whole tiles against stream-K (the re-measured K-tile costs pick whole)
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run8.log
timeout 150 python3 tools/sm90_sweep.py --shapes 1 "tile_n=256,narrow=64" "tile_n=256,stream_k=1,narrow=64" "tile_n=256,narrow=64" "tile_n=256,stream_k=1,narrow=64" 2>&1 | grep -v "Warning\|_warn_once" | tee -a $L
