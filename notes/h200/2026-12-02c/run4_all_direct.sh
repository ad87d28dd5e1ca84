# Nineteenth session, call 4: every tile (not only a CTA's last) stores C by 16-byte stores
# (build/variant/all_direct: `last = u >= 0`), alternating with the committed code.
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh >/dev/null 2>&1
L=$OUT/run4.log
rm -rf /tmp/var && mkdir -p /tmp/var && cp -r *.py task.yml tests /tmp/var/ && cp build/variant/all_direct/submission.py /tmp/var/submission.py
bench_new() { timeout 80 python3 eval.py benchmark 2>&1 | grep -E "^G=|geometric" | sed "s/^/[last-only $1] /" | tee -a $L; }
bench_var() { (cd /tmp/var && timeout 80 python3 eval.py benchmark 2>&1 | grep -E "^G=|geometric" | sed "s/^/[all-direct $1] /" | tee -a $L); }
bench_var 1; bench_new 1; bench_new 2; bench_var 2
