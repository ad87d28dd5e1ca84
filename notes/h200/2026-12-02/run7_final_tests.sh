# Seventeenth session, call 7: GPU tests and eval test on the final code (validation compares torch.Size)

set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run7.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)" | tee -a $L
timeout 300 python3 -m pytest -q -m gpu tests/ -p no:cacheprovider 2>&1 | tail -2 | tee -a $L
timeout 60 python3 eval.py test 2>&1 | tail -1 | tee -a $L
