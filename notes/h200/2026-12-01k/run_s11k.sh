# Eleventh session, run 11: the GPU tests that exercise split schedules, and racecheck on
# the sanitizer cases, on the final balanced_units (target makespan).
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh > /tmp/setup.log 2>&1; tail -1 /tmp/setup.log
L=$OUT/run11.log
timeout 130 python3 -m pytest -q -m gpu tests/test_gpu.py -k "balanced or stream_k or token_width or benchmark_shape or task_tests or self_check" -p no:cacheprovider 2>&1 | tail -2 | tee -a $L
timeout 90 compute-sanitizer --tool racecheck --report-api-errors no python3 tools/sanitize_case.py > /tmp/san.txt 2>&1; echo "racecheck rc=$? $(grep -E 'RACECHECK SUMMARY|bit-exact|within|MISMATCH' /tmp/san.txt | tr '\n' ' ')" | tee -a $L
