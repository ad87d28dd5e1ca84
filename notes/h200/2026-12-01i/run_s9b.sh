# session 9, device run 2: CTA pairs (pair_tokens) correctness, then an A/B against the chooser's configs
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run2.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)" | tee -a $L
timeout 200 python3 -m pytest -x -q -m gpu tests/test_gpu.py -k "token_width_phases" -p no:cacheprovider 2>&1 | grep -v Warning | tail -15 | tee -a $L
for i in 1 2; do
timeout 170 python3 tools/sm90_sweep.py auto "tile_n=128,narrow=64,pair_tokens=1" "tile_n=128,narrow=96/64,pair_tokens=1" "tile_n=256,narrow=96/64,pair_tokens=1" 2>&1 | grep -v "Warning\|_warn_once" | tee -a $L
done
