# Twelfth session, run 5: the final code's checks (GPU tests incl. the graph-capture ones,
# eval test, sanitizers, host time), the capture query's cost, and HEAD's host time in the
# same call for comparison.
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh > /tmp/setup.log 2>&1; tail -1 /tmp/setup.log
PART=checks bash tools/h200_final.sh
L=$OUT/final.log
python3 -m timeit -s "import torch, submission as S; torch.cuda.init()" "S.stream_is_capturing(0)" 2>&1 | sed 's/^/stream_is_capturing, default stream: /' | tee -a $L
python3 -m timeit -s "import torch, submission as S; torch.cuda.init(); s = torch.cuda.Stream(); torch.cuda.set_stream(s)" "S.stream_is_capturing(0)" 2>&1 | sed 's/^/stream_is_capturing, side stream: /' | tee -a $L
rm -rf /tmp/old && mkdir -p /tmp/old && cp -r *.py task.yml tests tools /tmp/old/ && cp build/base/submission.py /tmp/old/submission.py
(cd /tmp/old && timeout 60 python3 tools/host_overhead.py --calls 300 2>&1 | grep -v "Warning\|_warn_once" | tail -7 | sed 's/^/[HEAD] /' | tee -a $L)
