"""Nineteenth session: the fp16 fallback's time per call on the four benchmark shapes (CUDA
events around 10 calls after 2 warm-up calls, median of 5), its operands decoded by
Fp4RowDecoder against the torch decode, with the cuBLAS GEMMs alone (operands decoded
beforehand) for scale, and the kernel-decoded path's worst excess over the tolerance."""
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import reference  # noqa: E402
import submission as S  # noqa: E402
from tests.cases import task_cases  # noqa: E402

# the eighteenth session's event timing (CUDA events around 10 calls, median of 5)
_spec = importlib.util.spec_from_file_location("torch_paths", ROOT / "notes/h200/2026-12-02b/torch_paths.py")
_torch_paths = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_torch_paths)
per_call_us = _torch_paths.per_call_us


print("decoder:", S.fp4_decoder(torch.device("cuda")) is not None, flush=True)
for case in task_cases("benchmarks"):
    data = reference.generate_input(**case.args())
    problem = S.validate_inputs(data)
    expected = [c.clone() for c in reference.ref_kernel(data)]
    out = S.run_torch_fp16(data, problem)
    excess = max(((o.float() - e.float()).abs() - 1e-3 - 1e-3 * e.float().abs()).max().item() for o, e in zip(out, expected))
    torch_decode = per_call_us(lambda d=data, p=problem: S.run_torch_fp16(d, p, decode_kernel=False))
    kernel_decode = per_call_us(lambda d=data, p=problem: S.run_torch_fp16(d, p))
    groups = list(range(len(problem.sizes)))
    jobs, decoded = S.decode_jobs(data, problem, groups)
    decode_only = per_call_us(lambda j=jobs, dev=problem.device: S.launch_decoder(S.fp4_decoder(dev), j, dev))
    gemms = per_call_us(lambda d=decoded, cs=[abc[2] for abc in data[0]]: [torch.mm(a, b.T, out=c[:, :, 0]) for (a, b), c in zip(d.values(), cs)])
    print(f"G={case.g} N={case.n[0]} K={case.k[0]}: torch decode {torch_decode:.0f} us, kernel decode {kernel_decode:.0f} us "
          f"({torch_decode / kernel_decode:.1f}x); the decode launch alone {decode_only:.0f} us, the GEMMs alone {gemms:.0f} us; "
          f"worst |err| - tol {excess:.2e} (<= 0 passes)", flush=True)
