# session 10, device run 2: ring_staging A/B against the previous commit on shapes 0 / 1 (tile_n 256 stream-K), alternating
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run2.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)" | tee -a $L
for i in 1 2; do
timeout 140 python3 tools/sm90_sweep.py --kernel-time --shapes 0,1 auto 2>&1 | grep -v "Warning\|_warn_once" | tee -a $L
timeout 140 python3 tools/sm90_sweep.py --module build/head/submission.py --kernel-time --shapes 0,1 auto 2>&1 | grep -v "Warning\|_warn_once" | tee -a $L
done
