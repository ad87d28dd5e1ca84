#!/usr/bin/env bash
# The H200 verification batch (device tool), in two parts that each fit one device call:
#   bash tools/h200_check.sh part1   # GPU tests, eval.py test, host overhead, 10,000-call soak
#   bash tools/h200_check.sh part2   # compute-sanitizer memcheck/racecheck, benchmark + report
# Run from the repo root with carry [".device"]. $OUT gets the log, JSON figures and the
# report (the device tool returns at most 8 files).
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/h200_out}"; mkdir -p "$OUT"
part="${1:-part1}"
LOG="$OUT/$part.log"
source .device/setup.sh >>"$LOG" 2>&1 || { cat "$LOG"; exit 1; }
step() { echo "== $*" | tee -a "$LOG"; }
step "$(nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.used --format=csv,noheader)"
if [ "$part" = part1 ]; then
  step "pytest -m gpu"
  python3 -m pytest -q -m gpu tests/ -p no:cacheprovider 2>&1 | tee -a "$LOG" | tail -4
  step "eval.py test"
  python3 eval.py test 2>&1 | tee -a "$LOG" | tail -3
  step "host overhead"
  python3 tools/host_overhead.py --calls 2000 --json "$OUT/host_overhead.json" 2>&1 | tee -a "$LOG" | tail -5
  step "soak 10000 calls"
  python3 tools/soak.py --calls 10000 --json "$OUT/soak.json" >>"$LOG" 2>&1; echo "soak rc=$?" | tee -a "$LOG"
  python3 -c "import json; r = json.load(open('$OUT/soak.json')); print({k: r[k] for k in ('seconds', 'checks', 'check_failures', 'host_python_bytes_growth', 'device_bytes_growth', 'max_rss_mib_start', 'max_rss_mib_end', 'cache_sizes')})" | tee -a "$LOG"
else
  step "host overhead breakdown"
  python3 tools/host_overhead.py --calls 1000 --breakdown --json "$OUT/host_overhead.json" 2>&1 | tee -a "$LOG" | tail -9
  step "compute-sanitizer"
  for tool in memcheck racecheck; do
    compute-sanitizer --tool $tool --target-processes all --error-exitcode 9 python3 eval.py test \
      "m: [40, 129]; n: [256, 128]; k: [256, 512]; g: 2; seed: 3" "m: [7]; n: [384]; k: [512]; g: 1; seed: 4" \
      > "$OUT/san.txt" 2>&1
    echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|passed, ' "$OUT/san.txt" | tr '\n' ' ')" | tee -a "$LOG"
    tail -4 "$OUT/san.txt" >> "$LOG"; rm -f "$OUT/san.txt"
  done
  step "eval.py benchmark --baselines"
  python3 eval.py benchmark --baselines --report "$OUT" --json "$OUT/bench.json" 2>&1 | tee -a "$LOG" | tail -12
fi
