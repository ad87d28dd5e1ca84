# session 9, device run 9: RS (HEAD) against an SS ablation (build/v_ss: the token ring as wgmma A, decoded weights into a sink; wrong results, timing only)
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run9.log
A="tile_n=128,narrow=64"
for m in submission.py build/v_ss/submission.py submission.py build/v_ss/submission.py; do
timeout 80 python3 tools/sm90_sweep.py --module $m --kernel-time --shapes 2,3 $A 2>&1 | grep -v "Warning\|_warn_once" | tee -a $L
done
