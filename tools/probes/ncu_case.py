"""A few warm custom_kernel calls on benchmark shapes, as a target for Nsight Compute:

    ncu --kernel-name regex:Sm90Fp4GroupedGemm_object_at__TiledMMA --launch-skip 1 \\
        --launch-count 1 --section SpeedOfLight python3 tools/probes/ncu_case.py 0
    ncu ... python3 tools/probes/ncu_case.py --spec-file tools/regime_specs.txt 6

Arguments: indexes into task.yml's benchmarks (default 0 and 2), or into the cases of a
spec file with --spec-file.
"""

import argparse
import sys
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="tools/probes/ncu_case.py", description=__doc__.split("\n\n")[0],
        epilog="Needs a CUDA GPU (run under Nsight Compute).")
    ap.add_argument("cases", nargs="*", type=int)
    ap.add_argument("--spec-file", default=None, help="cases from this spec file instead of task.yml's benchmarks")
    return ap


if __name__ == "__main__":
    _parser().parse_args()  # --help and argument errors answer before torch loads

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

import reference  # noqa: E402
import submission  # noqa: E402
from harness import specs  # noqa: E402
from tests.cases import task_cases  # noqa: E402

args = _parser().parse_args()
if args.spec_file:
    cases = [test.args for test in specs.read_spec_file(args.spec_file)]
else:
    cases = [case.args() for case in task_cases("benchmarks")]
for i in args.cases or [0, 2]:
    data = reference.generate_input(**cases[i])
    for _ in range(3):
        submission.custom_kernel(data)
    torch.cuda.synchronize()
print("done")
