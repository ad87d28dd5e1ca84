#!/usr/bin/env bash
# The GPU verification of submission.py, on any CUDA machine (an H200, a B200). Logs and
# JSON go to $OUT (default /tmp/gpu_verify).
#
#   bash tools/gpu_verify.sh checks         GPU tests, eval.py test (kernel and torch paths),
#                                           compute-sanitizer memcheck and racecheck on
#                                           tools/sanitize_case.py, the max-active-clusters
#                                           query; on an sm_100 GPU first the edge shapes
#                                           (tools/b200_edge_specs.txt) with the self-check on,
#                                           and under memcheck; the watchdog's check of every
#                                           wait site (tools/watchdog_check.py)
#   bash tools/gpu_verify.sh bench [OLD.py] eval.py benchmark with its baselines and report;
#                                           with OLD.py also that file against this one in
#                                           alternating processes (new, old, old, new) and
#                                           their warm-call host time (tools/probes/host_ab.py)
#   bash tools/gpu_verify.sh regimes        eval.py benchmark with its baselines on
#                                           tools/regime_specs.txt (decode, MoE, prefill),
#                                           report and JSON in $OUT/regimes
#   bash tools/gpu_verify.sh audit          do the GPU tests fail without the kernel? the kernel
#                                           tests with its path sabotaged (NVFP4_GEMM_PATH=torch,
#                                           the DSL unimportable: tools/fallback_guard_check.py),
#                                           then against a build that never launches it
#                                           (tools/mutation_check.py --gpu): each must fail
#   bash tools/gpu_verify.sh b200           a B200's first hour in 25 minutes (B200_BUDGET_S):
#                                           the checks that matter most, then every legal
#                                           config timed (tools/sm100_sweep.py), then
#                                           eval.py benchmark; one file to send back,
#                                           $OUT/b200-summary.txt
#
# Every step runs under a timeout (a kernel that loses pipeline state hangs rather than
# fails) and reports its exit status; the script goes on. Fallback warnings are collected at
# the end: a kernel that silently fell back would pass the tests without running.
#
# Runs from the repository root with .venv/bin/python (the environment ./dev makes), or
# with $PYTHON: any Python with CUDA torch, the CuTe DSL (nvidia-cutlass-dsl) and pytest.
# Without a CUDA GPU visible to torch or without the DSL it says so and exits 2.
set -uo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  echo "usage: bash tools/gpu_verify.sh [checks | bench [OLD.py] | regimes | audit | b200]"
  sed -n '2,/^$/s/^# \{0,1\}//p' "$0" | sed -n '/^  *bash tools/,/^$/p'
  echo "Needs a CUDA GPU, with CUDA torch and the CuTe DSL in .venv/bin/python or \$PYTHON."
  exit 0
fi
export PYTHONUNBUFFERED=1
if [ -n "${PYTHON:-}" ]; then PY="$PYTHON"
elif [ -x .venv/bin/python ]; then PY=.venv/bin/python
else PY=python3; fi
if ! why=$("$PY" -c '
import sys
missing = []
try:
    import torch
except ImportError:
    missing.append("no torch")
else:
    if not torch.cuda.is_available():
        build = "" if torch.version.cuda else ", a CPU-only build"
        missing.append(f"torch {torch.__version__} sees no CUDA GPU{build}")
try:
    import cutlass.cute  # noqa: F401
except ImportError as e:
    missing.append(f"no CuTe DSL ({e})")
sys.exit("; ".join(missing) or None)
' 2>&1); then
  echo "tools/gpu_verify.sh needs CUDA torch and the CuTe DSL (nvidia-cutlass-dsl) in $PY" \
    "(set PYTHON to another): $why" >&2
  exit 2
fi
OUT="${OUT:-/tmp/gpu_verify}"; mkdir -p "$OUT"
EVAL="${EVAL:-eval.py}"
part="${1:-checks}"
LOG="$OUT/$part.log"
step() {  # step SECONDS LABEL COMMAND...
  local limit=$1 label=$2; shift 2
  echo "== $label" | tee -a "$LOG"
  timeout "$limit" "$@" >"$OUT/step.txt" 2>&1
  local rc=$?
  cat "$OUT/step.txt" >>"$LOG"
  [ $rc -eq 124 ] && echo "   TIMED OUT after ${limit}s" | tee -a "$LOG"
  echo "   rc=$rc; $(grep -E 'passed|failed|ERROR SUMMARY|RACECHECK SUMMARY|bit-exact|MISMATCH|geomean|clusters' "$OUT/step.txt" | tail -n 4 | tr '\n' ' ')" | tee -a "$LOG"
}
arch=$("$PY" -c "import torch; print('%d%d' % torch.cuda.get_device_capability())")
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader) (sm_$arch)" | tee -a "$LOG"

if [ "$part" = checks ]; then
  step 120 "max-active-clusters query (1- and 2-CTA clusters)" "$PY" -c \
    "import torch, submission as s; torch.zeros(1, device='cuda'); print('clusters', [s.query_max_active_clusters(c, 0) for c in (1, 2)], 'SMs', torch.cuda.get_device_properties(0).multi_processor_count)"
  if [ "${arch:0:2}" = 10 ]; then
    step 300 "edge shapes, self-check on" env NVFP4_GEMM_SELF_CHECK=1 "$PY" "$EVAL" test tools/b200_edge_specs.txt
    step 600 "edge shapes under memcheck" env NVFP4_GEMM_SELF_CHECK=1 compute-sanitizer --tool memcheck \
      --target-processes all --report-api-errors no "$PY" "$EVAL" test tools/b200_edge_specs.txt
  fi
  step 400 "GPU tests" "$PY" -m pytest -q -m gpu ${GPU_TESTS:-tests/} -p no:cacheprovider
  step 90 "eval.py test" "$PY" "$EVAL" test
  step 120 "eval.py test, torch path" env NVFP4_GEMM_PATH=torch "$PY" "$EVAL" test
  for tool in memcheck racecheck; do
    step 200 "compute-sanitizer $tool" compute-sanitizer --tool $tool --report-api-errors no "$PY" tools/sanitize_case.py
  done
  # the self-checked launches' build, the one with the watchdog
  step 300 "compute-sanitizer memcheck, self-check on (the watchdog's build)" env NVFP4_GEMM_SELF_CHECK=1 \
    compute-sanitizer --tool memcheck --report-api-errors no "$PY" tools/sanitize_case.py
  step 900 "watchdog: each wait made to hang" "$PY" tools/watchdog_check.py
elif [ "$part" = audit ]; then
  step 900 "kernel tests with the kernel path sabotaged (each must fail)" "$PY" tools/fallback_guard_check.py
  step 900 "GPU tests against a build that never launches (each must fail)" "$PY" tools/mutation_check.py --gpu
elif [ "$part" = regimes ]; then
  mkdir -p "$OUT/regimes"
  step 400 "regime benchmark" "$PY" "$EVAL" benchmark --baselines tools/regime_specs.txt \
    --report "$OUT/regimes" --json "$OUT/regimes/regimes.json"
elif [ "$part" = b200 ]; then
  # Each step's limit is cut to what is left of the budget; the limits add up to it.
  SUMMARY="$OUT/b200-summary.txt"
  budget=${B200_BUDGET_S:-1500}
  begin=$SECONDS
  {
    echo "b200 verification of $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%FT%TZ)"
    echo "$(nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader) (sm_$arch)"
    "$PY" -c "import cutlass, torch; print('nvidia-cutlass-dsl', cutlass.__version__, '/ torch', torch.__version__)" 2>&1
  } >"$SUMMARY"
  bstep() {  # bstep SECONDS LABEL COMMAND...: step under what is left of the budget, into the summary
    local limit=$1 label=$2 left=$((budget - (SECONDS - begin))); shift 2
    [ "$left" -lt "$limit" ] && limit=$left
    if [ "$limit" -lt 10 ]; then
      echo "== $label: SKIPPED, the ${budget}s budget is spent" | tee -a "$LOG" "$SUMMARY"; return
    fi
    local t0=$SECONDS
    step "$limit" "$label" "$@"
    { echo; echo "== $label (limit ${limit}s, took $((SECONDS - t0))s)"; tail -n 1 "$LOG"; } >>"$SUMMARY"
  }
  bstep 60 "max-active-clusters query" "$PY" -c \
    "import torch, submission as s; torch.zeros(1, device='cuda'); print('clusters', [s.query_max_active_clusters(c, 0) for c in (1, 2)], 'SMs', torch.cuda.get_device_properties(0).multi_processor_count)"
  grep -h "^clusters" "$OUT/step.txt" >>"$SUMMARY" 2>/dev/null
  bstep 240 "edge shapes, self-check on" env NVFP4_GEMM_SELF_CHECK=1 "$PY" "$EVAL" test tools/b200_edge_specs.txt
  bstep 90 "eval.py test, self-check on" env NVFP4_GEMM_SELF_CHECK=1 "$PY" "$EVAL" test
  bstep 300 "GPU tests" "$PY" -m pytest -q -m gpu ${GPU_TESTS:-tests/} -p no:cacheprovider
  grep -h -E "^(FAILED|ERROR) " "$OUT/step.txt" | head -n 20 >>"$SUMMARY"
  bstep 150 "compute-sanitizer memcheck" compute-sanitizer --tool memcheck --report-api-errors no "$PY" tools/sanitize_case.py
  bstep 420 "sweep of every legal config (tools/sm100_sweep.py)" "$PY" tools/sm100_sweep.py --json "$OUT/sweep.json"
  cp "$OUT/step.txt" "$OUT/sweep.txt" 2>/dev/null
  { echo; cat "$OUT/sweep.txt"; } >>"$SUMMARY" 2>/dev/null
  bstep 200 "benchmark" "$PY" "$EVAL" benchmark --json "$OUT/bench.json"
  { echo; tail -n 30 "$OUT/step.txt"; } >>"$SUMMARY" 2>/dev/null
  echo "== total $((SECONDS - begin))s of ${budget}s" | tee -a "$LOG" "$SUMMARY"
elif [ "$part" = bench ]; then
  OLD="${2:-}"
  if [ -z "$OLD" ]; then
    step 300 "benchmark" "$PY" "$EVAL" benchmark --baselines --report "$OUT" --json "$OUT/bench.json"
  else
    for side in new old; do
      rm -rf "/tmp/ab_$side" && mkdir -p "/tmp/ab_$side"
      cp "$EVAL" "/tmp/ab_$side/eval.py" && cp reference.py utils.py task.py task.yml "/tmp/ab_$side/"
    done
    cp submission.py /tmp/ab_new/ && cp "$OLD" /tmp/ab_old/submission.py
    i=0
    for side in new old old new; do
      i=$((i + 1))
      (cd "/tmp/ab_$side" && step 150 "benchmark $i: $side" "$PY" eval.py benchmark --json "$OUT/bench_${i}_$side.json")
    done
    step 240 "warm-call host time, old against new" "$PY" tools/probes/host_ab.py "$OLD" submission.py --rounds 6 --calls 500
  fi
fi
echo "== fallback and self-check warnings (none expected):" | tee -a "$LOG"
grep -h "nvfp4 grouped GEMM:" "$LOG" | sort | uniq -c | tee -a "$LOG" || true
if [ "$part" = b200 ]; then
  { echo; echo "== fallback and self-check warnings (none expected):"
    grep -h "nvfp4 grouped GEMM:" "$LOG" | sort | uniq -c; } >>"$SUMMARY"
  echo "send back: $SUMMARY"
fi
rm -f "$OUT/step.txt"
