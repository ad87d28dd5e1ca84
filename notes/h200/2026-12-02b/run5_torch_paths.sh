# Eighteenth session, call 5: the fp16 torch fallback (GPU tests, eval test through the
# torch path, time against the exact fp32 path).
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run5.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)" | tee -a $L
timeout 100 python3 -m pytest -q -m gpu tests/test_gpu.py -k fp16_fallback -p no:cacheprovider 2>&1 | tail -1 | tee -a $L
NVFP4_GEMM_PATH=torch timeout 60 python3 eval.py test 2>&1 | tail -1 | tee -a $L
timeout 100 python3 notes/h200/2026-12-02b/torch_paths.py 2>&1 | grep -v Warning | tee -a $L
