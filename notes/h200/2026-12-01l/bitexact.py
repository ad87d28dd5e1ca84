"""Runs one submission.py (argv[1]) on the task.yml tests and benchmarks, every tile width
forced once on the benchmarks, and saves the outputs (argv[2]); with argv[3] given, compares
them bit for bit with that earlier file."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))
from sm90_sweep import load_submission, parse  # noqa: E402

S = load_submission(sys.argv[1])
import torch  # noqa: E402

import eval as ev  # noqa: E402
import reference  # noqa: E402
from tests.cases import task_cases  # noqa: E402

outs, bad = {}, 0
chooser = S.choose_sm90_config
for spec in ["auto", "tile_n=128", "tile_n=192", "tile_n=256,stream_k=1", "tile_n=128,stream_k=1"]:
    S.choose_sm90_config = chooser if spec == "auto" else (lambda sizes, num_sms=0, cfg=parse(S, spec): cfg)
    S._runners.clear()
    S._last_runner = None
    for kind in ("tests", "benchmarks"):
        for case in task_cases(kind):
            data = ev._benchmark_inputs(ev.TestCase(dict(case.args()), ""))[0]
            out = [o.clone() for o in S.custom_kernel(data)]
            ref = reference.ref_kernel(ev._clone_data(data))
            ok = all(torch.allclose(o, r, rtol=1e-3, atol=1e-3) for o, r in zip(out, ref))
            bad += not ok
            outs[(spec, kind, case.id)] = [o.cpu() for o in out]
torch.save(outs, sys.argv[2])
print(f"{sys.argv[1]}: {len(outs)} cases, {bad} against the reference failed")
if len(sys.argv) > 3:
    old = torch.load(sys.argv[3])
    diff = [k for k in outs if not all(torch.equal(a, b) for a, b in zip(outs[k], old[k]))]
    print(f"bit-exact against {sys.argv[3]}: {len(outs) - len(diff)} of {len(outs)}; differ: {diff[:6]}")
