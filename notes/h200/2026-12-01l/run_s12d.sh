# Twelfth session, run 4: CUDA graph capture. The new GPU tests (and the ones they share
# code with) on the fix; the eviction test on HEAD's submission (expected to fault); the
# cost of the capture query on the fast path; direct launch against graph replay.
set -uo pipefail
export PYTHONUNBUFFERED=1
source .device/setup.sh > /tmp/setup.log 2>&1; tail -1 /tmp/setup.log
L=$OUT/run4.log
D=notes/h200/2026-12-01l
timeout 200 python3 -m pytest -q -m gpu tests/test_gpu.py -k "capture or task_tests or self_check or reallocated or new_values" -p no:cacheprovider 2>&1 | tail -3 | tee -a $L
rm -rf /tmp/old && mkdir -p /tmp/old && cp -r *.py task.yml tests /tmp/old/ && cp build/base/submission.py /tmp/old/submission.py
(cd /tmp/old && timeout 120 python3 -m pytest -q -m gpu tests/test_gpu.py -k "captured_kernel_replays" -p no:cacheprovider 2>&1 | grep -E "passed|failed|Error|illegal" | head -4 | sed 's/^/[HEAD] /' | tee -a $L)
python3 -m timeit -s "import torch; torch.cuda.init(); f = torch.cuda.is_current_stream_capturing" "f()" 2>&1 | sed 's/^/is_current_stream_capturing: /' | tee -a $L
timeout 60 python3 tools/host_overhead.py --calls 300 2>&1 | grep -v "Warning\|_warn_once" | tail -7 | tee -a $L
timeout 200 python3 $D/graph_bench.py 2>&1 | grep -v "Warning\|_warn_once" | tee -a $L
