"""Times Hopper kernel configs on the four benchmark shapes with the leaderboard's timing
(15 inputs per shape, L2 flushed, one event pair around the 15 calls) and checks each
result against the exact reference once. For config experiments on the H200:

    python tools/sm90_sweep.py "tile_n=128,stages=4" "stages=6,token_buffers=2" ...
"""

import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import eval as ev  # noqa: E402
import reference  # noqa: E402
import submission as S  # noqa: E402
from tests.cases import task_cases  # noqa: E402


def parse(spec: str) -> S.Sm90Config:
    kw = {}
    for item in filter(None, spec.split(",")):
        key, value = item.split("=")
        kw[key.strip()] = int(value)
    return S.Sm90Config(**kw)


def main() -> int:
    specs = sys.argv[1:] or [""]
    cases = task_cases("benchmarks")
    for spec in specs:
        cfg = parse(spec)
        if not S.sm90_config_is_legal(cfg):
            print(f"{spec or 'default'}: illegal {cfg}")
            continue
        S.choose_sm90_config = lambda sizes, cfg=cfg: cfg
        S._runners.clear()
        S._last_runner = None
        times = []
        for case in cases:
            test = ev.TestCase(dict(case.args()), "")
            data_list = ev._benchmark_inputs(test)
            out = S.custom_kernel(data_list[0])
            ref = reference.ref_kernel(ev._clone_data(data_list[0]))
            ok = all(torch.allclose(o, r, rtol=1e-3, atol=1e-3) for o, r in zip(out, ref))
            stats = ev.time_calls(S.custom_kernel, data_list, False, None, 30, 2e9)
            times.append(stats.mean / 1e3)
            print(f"  {spec or 'default'} {case.id}: {stats.mean / 1e3:.2f} us {'ok' if ok else 'MISMATCH'}")
        geo = math.exp(sum(map(math.log, times)) / len(times))
        print(f"{spec or 'default'}: " + " / ".join(f"{t:.1f}" for t in times) + f"  geomean {geo:.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
