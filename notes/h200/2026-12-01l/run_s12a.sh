# Twelfth session, run 1: the PRMT decode (no F2FP per word, build/prmt) against HEAD
# (build/base): bit-exact on every task shape and tile width, then 2 alternating rounds of
# the chooser's configs on the four benchmarks, event time and kernel time.
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh > /tmp/setup.log 2>&1; tail -1 /tmp/setup.log
L=$OUT/run1.log
D=notes/h200/2026-12-01l
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)" | tee -a $L
timeout 150 python3 $D/bitexact.py build/base/submission.py /tmp/base.pt 2>&1 | grep -v "Warning\|_warn_once" | tail -2 | tee -a $L
timeout 150 python3 $D/bitexact.py build/prmt/submission.py /tmp/prmt.pt /tmp/base.pt 2>&1 | grep -v "Warning\|_warn_once" | tail -3 | tee -a $L
for i in 1 2; do
for m in base prmt; do
timeout 100 python3 tools/sm90_sweep.py --module build/$m/submission.py --kernel-time auto 2>&1 | grep -v "Warning\|_warn_once\|^  " | tee -a $L
done
done
