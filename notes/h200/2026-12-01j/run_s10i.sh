# session 10, device run 9: the tidied epilogue (box-free wait in store_tile only; same K-loops) correctness, racecheck/memcheck
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run9.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader) $(git log --oneline -1 2>/dev/null)" | tee -a $L
timeout 330 python3 -m pytest -x -q -m gpu tests/test_gpu.py -p no:cacheprovider \
  -k "every_tile_width or token_width_phases or many_tiles_per_cta or benchmark_shapes_15_seeds or resets_its_flags or bitwise" 2>&1 | grep -v Warning | tail -8 | tee -a $L
for tool in racecheck memcheck; do timeout 110 compute-sanitizer --tool $tool --report-api-errors no python3 tools/sanitize_case.py > /tmp/san.txt 2>&1; echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|bit-exact|within|MISMATCH' /tmp/san.txt | tr '\n' ' ')" | tee -a $L; done
