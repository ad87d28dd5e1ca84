# session 10, device run 4: tile_n 128 narrow (64,) against (96, 64) and (64, 32) on shapes 2 / 3 (no tile uses the extra phase), alternating, 3 rounds
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run4.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)" | tee -a $L
for i in 1 2 3; do
timeout 180 python3 tools/sm90_sweep.py --kernel-time --shapes 2,3 "tile_n=128,narrow=64" "tile_n=128,narrow=96/64" "tile_n=128,narrow=64/32" 2>&1 | grep -v "Warning\|_warn_once" | grep -v "^  " | tee -a $L
done
