# Sixteenth session, call 4: compute-sanitizer racecheck and memcheck on the seven sanitizer
# cases (tools/sanitize_case.py) on the final code: its split schedules come from the
# changed host code
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run4.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)" | tee -a $L
for tool in racecheck memcheck; do
  timeout 240 compute-sanitizer --tool $tool --report-api-errors no python3 tools/sanitize_case.py > /tmp/san.txt 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|bit-exact|within|MISMATCH' /tmp/san.txt | tr '\n' ' ')" | tee -a $L
done
