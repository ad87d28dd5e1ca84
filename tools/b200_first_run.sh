#!/usr/bin/env bash
# The first run of the Blackwell kernel on a B200 (never done here: no B200 was at hand).
# Every step under a timeout, since the self-check catches wrong numbers but not a hang:
#   1. the edge shapes (tools/b200_edge_specs.txt: M 1..1000 with 40, 64, 65, 128, 129,
#      384; N 128..7168; K 256..7168; mixed K in one call) with the self-check on;
#   2. the same once under compute-sanitizer memcheck;
#   3. the GPU tests, then the 10 task.yml tests;
#   4. the benchmark with its baselines;
# then every fallback warning the runs printed (a kernel that silently fell back to
# torch._scaled_mm or the exact path would pass the tests but not be running).
# Run from the repository root: bash tools/b200_first_run.sh [OUT_DIR]. A step that fails
# or times out is reported and the script goes on; the log is OUT_DIR/b200_first_run.log.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT="${1:-${OUT:-/tmp/b200_out}}"; mkdir -p "$OUT"
LOG="$OUT/b200_first_run.log"
PY="${PYTHON:-python3}"
step() {  # step SECONDS LABEL COMMAND...
  local limit=$1 label=$2; shift 2
  echo "== $label" | tee -a "$LOG"
  timeout "$limit" "$@" >>"$LOG" 2>&1
  local rc=$?
  [ $rc -eq 124 ] && echo "   TIMED OUT after ${limit}s (a hang?)" | tee -a "$LOG"
  echo "   rc=$rc; $(tail -n 2 "$LOG" | tr '\n' ' ')" | tee -a "$LOG"
}
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader 2>&1)" | tee -a "$LOG"
step 300 "edge shapes, self-check on" env NVFP4_GEMM_SELF_CHECK=1 "$PY" eval.py test tools/b200_edge_specs.txt
step 600 "edge shapes under memcheck" env NVFP4_GEMM_SELF_CHECK=1 \
  compute-sanitizer --tool memcheck --target-processes all --report-api-errors no "$PY" eval.py test tools/b200_edge_specs.txt
step 900 "GPU tests" "$PY" -m pytest -q -m gpu tests/ -p no:cacheprovider
step 300 "task.yml tests" "$PY" eval.py test
step 600 "benchmark (kernel)" "$PY" eval.py benchmark --baselines --report "$OUT" --json "$OUT/bench.json"
echo "== fallback and self-check warnings (none expected):" | tee -a "$LOG"
grep -h "nvfp4 grouped GEMM:" "$LOG" | sort | uniq -c | tee -a "$OUT/warnings.txt" || echo "   none" | tee -a "$LOG"
