# session 9, device run 3: publish one group after the last token store (submission.py) against f521b46 (build/v_head);
# CTA pairs with that publish, and pairs without the copy to the peer (build/v_nocopy: wrong results, timing only)
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run3.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)" | tee -a $L
for i in 1 2; do
for m in build/v_head/submission.py submission.py; do
timeout 100 python3 tools/sm90_sweep.py --module $m auto 2>&1 | grep -v "Warning\|_warn_once" | tee -a $L
done
for m in submission.py build/v_nocopy/submission.py; do
timeout 100 python3 tools/sm90_sweep.py --module $m --shapes 2,3 "tile_n=128,narrow=64,pair_tokens=1" 2>&1 | grep -v "Warning\|_warn_once" | tee -a $L
done
done
