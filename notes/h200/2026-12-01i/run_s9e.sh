# session 9, device run 5: wgmma groups left pending before a fragment is written (wgmma_wait 1 = HEAD, 2, 3)
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run5.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)" | tee -a $L
A="tile_n=128,narrow=64"; D="tile_n=256,stream_k=1,narrow=96/64"
timeout 200 python3 tools/sm90_sweep.py --shapes 2,3 $A $A,wgmma_wait=2 $A,wgmma_wait=3 $A $A,wgmma_wait=2 $A,wgmma_wait=3 2>&1 | grep -v "Warning\|_warn_once" | tee -a $L
timeout 200 python3 tools/sm90_sweep.py --shapes 0,1 $D $D,wgmma_wait=2 $D $D,wgmma_wait=2 2>&1 | grep -v "Warning\|_warn_once" | tee -a $L
