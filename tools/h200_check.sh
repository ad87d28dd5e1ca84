#!/usr/bin/env bash
# The H200 verification batch (device tool): run from the repo root with carry [".device"].
#   bash tools/h200_check.sh [quick|full]
# Writes logs and JSON under $OUT; prints a short summary last.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/h200_out}"; mkdir -p "$OUT"
source .device/setup.sh >/dev/null || exit 1
mode="${1:-full}"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.used,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"

step() { echo "== $1"; }
step "pytest -m gpu (kernel path)"
python3 -m pytest -q -m gpu tests/ -p no:cacheprovider -x 2>&1 | tee "$OUT/pytest_gpu.txt" | tail -4
[ "$mode" = quick ] && exit 0
step "eval.py test"
python3 eval.py test 2>&1 | tee "$OUT/eval_test.txt" | tail -3
step "host overhead"
python3 tools/host_overhead.py --json "$OUT/host_overhead.json" 2>&1 | tee "$OUT/host_overhead.txt" | tail -6
step "soak"
python3 tools/soak.py --calls 10000 --json "$OUT/soak.json" > "$OUT/soak.txt" 2>&1; tail -22 "$OUT/soak.txt" | tr -d '\n' | cut -c1-600; echo
step "compute-sanitizer"
for tool in memcheck racecheck; do
  compute-sanitizer --tool $tool --error-exitcode 9 python3 eval.py test \
    "m: [40, 129]; n: [256, 128]; k: [256, 512]; g: 2; seed: 3" "m: [7]; n: [384]; k: [512]; g: 1; seed: 4" \
    > "$OUT/sanitizer_$tool.txt" 2>&1; echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer_$tool.txt" | tr '\n' ' ')"
done
step "eval.py benchmark --baselines"
python3 eval.py benchmark --baselines --report "$OUT" --json "$OUT/bench.json" 2>&1 | tee "$OUT/eval_bench.txt" | tail -12
