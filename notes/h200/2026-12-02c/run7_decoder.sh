# Nineteenth session, call 7: the fp16 fallback's decode kernel (Fp4RowDecoder): its GPU
# tests and the fallback's, eval test through the torch path, time against the torch decode.
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run7.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)" | tee -a $L
timeout 120 python3 -m pytest -q -m gpu tests/test_gpu.py -k "decoder or fp16_fallback or capture" -p no:cacheprovider 2>&1 | tail -2 | tee -a $L
NVFP4_GEMM_PATH=torch timeout 60 python3 eval.py test 2>&1 | tail -1 | sed 's/^/[torch path] /' | tee -a $L
timeout 100 python3 notes/h200/2026-12-02c/decode_paths.py 2>&1 | grep -v Warning | tee -a $L
