"""Eighteenth session: the torch fallbacks' time per call on the four benchmark shapes (CUDA
events around 10 calls after 2 warm-up calls, median of 5), fp32 exact against fp16, and
the fp16 path's worst excess over the leaderboard's tolerance against ref_kernel."""
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import reference  # noqa: E402
import submission as S  # noqa: E402
from tests.cases import task_cases  # noqa: E402


def per_call_us(fn, calls=10):
    for _ in range(2):
        fn()
    samples = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(samples)


if __name__ == "__main__":
    for case in task_cases("benchmarks"):
        data = reference.generate_input(**case.args())
        problem = S.validate_inputs(data)
        expected = [c.clone() for c in reference.ref_kernel(data)]
        out = S.run_torch_fp16(data, problem)
        excess = max(((o.float() - e.float()).abs() - 1e-3 - 1e-3 * e.float().abs()).max().item() for o, e in zip(out, expected))
        exact = per_call_us(lambda d=data, p=problem: S.run_torch_exact(d, p))
        fp16 = per_call_us(lambda d=data, p=problem: S.run_torch_fp16(d, p))
        print(f"G={case.g} N={case.n[0]} K={case.k[0]}: exact fp32 {exact:.0f} us, fp16 {fp16:.0f} us "
              f"({exact / fp16:.1f}x); fp16 worst |err| - tol {excess:.2e} (<= 0 passes)", flush=True)
