# session 10, device run 6: C descriptor acquired (and prefetched) at the tile's start instead of before each TMA store; A/B against 09e2197, alternating, 2 rounds, all shapes
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run6.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)" | tee -a $L
timeout 150 python3 -m pytest -x -q -m gpu tests/test_gpu.py -p no:cacheprovider -k "every_tile_width or many_tiles_per_cta or output_not_16" 2>&1 | tail -1 | tee -a $L
for i in 1 2; do
timeout 150 python3 tools/sm90_sweep.py auto 2>&1 | grep -v "Warning\|_warn_once" | grep -v "^  " | tee -a $L
timeout 150 python3 tools/sm90_sweep.py --module build/head2/submission.py auto 2>&1 | grep -v "Warning\|_warn_once" | grep -v "^  " | tee -a $L
done
