# Thirteenth session, prepared for the next device call (not run: no machine was lent).
# 1. correctness first: 96-row token tiles at tile_n 192 (GPU test, 4 cases), one build for
#    every group count, the cross-stream wait and the capture tests; stop if any fails
#    (a kernel that loses pipeline state hangs: every step is under a timeout)
# 2. the wholly out-of-bounds TMA box probe (the Blackwell review's open question)
# 3. the new config's K-tile cost, one tile per CTA (for SM90_KTILE_US_96_TOKENS)
# 4. two alternating rounds, event time and kernel time: the chooser against tile_n 192 at
#    96 tokens, whole and stream-K
#   run: {"command": "bash notes/h200/2026-12-01m/run_s13a.sh", "carry": [".device"]}
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh > /tmp/setup.log 2>&1; tail -1 /tmp/setup.log
L=$OUT/run1.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)" | tee -a $L
if ! timeout 150 python3 -m pytest -q -m gpu tests/test_sm90_gpu.py -k tile_m_96 -p no:cacheprovider 2>&1 | tail -3 | tee -a $L | grep -q "4 passed"; then
  echo "== tile_m 96 failed: stopping" | tee -a $L; exit 1
fi
timeout 120 python3 -m pytest -q -m gpu tests/test_gpu.py -k "group_count or busy_stream or capture" -p no:cacheprovider 2>&1 | tail -3 | tee -a $L
timeout 60 python3 tools/tma_oob_probe.py 2>&1 | tail -20 | tee -a $L
timeout 90 python3 tools/sm90_ktile_cost.py --tile-n 192 --tile-m 96 --widths 96,64,32 2>&1 | tee -a $L
for i in 1 2; do
timeout 110 python3 tools/sm90_sweep.py --kernel-time auto "tile_n=192,tile_m=96,narrow=64/32" \
  "tile_n=192,tile_m=96,narrow=64/32,stream_k=1" 2>&1 | grep -v "Warning\|_warn_once" | tee -a $L
done
