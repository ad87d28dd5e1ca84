"""One small custom_kernel call checked against the reference, for compute-sanitizer:
    compute-sanitizer --tool memcheck python tools/sanitize_case.py
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import reference  # noqa: E402
import submission  # noqa: E402

data = reference.generate_input(m=(40, 129), n=(256, 128), k=(256, 512), g=2, seed=3)
expected = [c.clone() for c in reference.ref_kernel(([tuple(t.clone() for t in g) for g in data[0]], data[1], data[2], data[3]))]
out = submission.custom_kernel(data)
torch.cuda.synchronize()
ok = all(torch.equal(o, e) for o, e in zip(out, expected))
print("path", submission.select_path(torch.device("cuda")), "bit-exact" if ok else "MISMATCH")
sys.exit(0 if ok else 1)
