# Nineteenth session, call 2: a CTA's last tile stores C with 16-byte stores from the
# staging box instead of a TMA store (store_box_vectors). GPU suite on it, then the
# leaderboard benchmark alternating with HEAD 0caecb2 (build/old/0caecb2) in separate processes.
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run2.log
echo "== $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)" | tee -a $L
timeout 240 python3 -m pytest -q -m gpu tests/ -p no:cacheprovider 2>&1 | tail -3 | tee -a $L
timeout 40 python3 eval.py test 2>&1 | tail -1 | tee -a $L
rm -rf /tmp/old && mkdir -p /tmp/old && cp -r *.py task.yml tests /tmp/old/ && cp build/old/0caecb2/submission.py /tmp/old/submission.py
bench_new() { timeout 80 python3 eval.py benchmark --json $OUT/bench_new$1.json 2>&1 | grep -E "^G=|geometric" | sed "s/^/[new $1] /" | tee -a $L; }
bench_old() { (cd /tmp/old && timeout 80 python3 eval.py benchmark --json $OUT/bench_old$1.json 2>&1 | grep -E "^G=|geometric" | sed "s/^/[old $1] /" | tee -a $L); }
bench_new 1; bench_old 1; bench_old 2; bench_new 2
