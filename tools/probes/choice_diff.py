"""Which problems two submission.py files give different Hopper configs (CPU only), and a
spec file of a sample of them to time on a GPU. For changes to the chooser or its cost
model, whose effect lies where the choice changes:

    python tools/probes/choice_diff.py build/old/submission.py submission.py --spec-out changed.txt
    python tools/probes/kernel_ab.py build/old/submission.py submission.py --spec-file changed.txt

The corpus is tools/probes/schedule_equivalence.py's (the task's problems and 160 seeded random
ones) on 132 SMs. Per kind of change (old config -> new), the most frequent first, up to
three of its problems (a seeded sample where there are more), leaving out those of more
than 2e11 multiply-adds, go to the spec file as eval.py spec lines.
"""

import argparse
import collections
import random
import sys
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="tools/probes/choice_diff.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Runs on the CPU (no GPU).")
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--spec-out", help="write a sample of the changed problems here")
    return ap


if __name__ == "__main__":
    _parser().parse_args()  # --help and argument errors answer before torch loads

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tools.probes.host_ab import load  # noqa: E402
from tools.probes.schedule_equivalence import problems  # noqa: E402

MAX_MACS = 2e11  # a case that a GPU times in well under a second a round


def label(cfg) -> str:
    """tile_n / tile_m / narrow widths, "s" where split."""
    return f"{cfg.tile_n}/{cfg.tile_m}/{'-'.join(map(str, cfg.narrow))}{'s' if cfg.split_k else ''}"


def spec_line(problem, seed: int) -> str:
    m, n, k = ([s[i] for s in problem] for i in range(3))
    return f"m: {m}; n: {n}; k: {k}; g: {len(problem)}; seed: {seed}"


def main() -> int:
    args = _parser().parse_args()
    corpus = problems()
    old, new = load(args.old, "choice_old"), load(args.new, "choice_new")
    changed = collections.defaultdict(list)
    for p in corpus:
        a, b = label(old.choose_sm90_config(p, 132)), label(new.choose_sm90_config(p, 132))
        if a != b:
            changed[(a, b)].append(p)
    print(f"{len(corpus)} problems, {sum(map(len, changed.values()))} choices changed")
    rng = random.Random(1)
    lines = []
    for (a, b), ps in sorted(changed.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(ps):3d} x {a} -> {b}")
        for p in ps if len(ps) <= 3 else rng.sample(ps, 3):
            if sum(m * n * k for m, n, k, _ in p) <= MAX_MACS:
                lines.append(spec_line(p, len(lines) + 1))
    if args.spec_out:
        Path(args.spec_out).write_text("\n".join(lines) + "\n")
        print(f"{len(lines)} spec lines -> {args.spec_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
