"""Problem cases as small dataclasses with ids."""

import dataclasses
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    m: tuple
    n: tuple
    k: tuple
    seed: int = 1111

    @property
    def g(self) -> int:
        return len(self.m)

    def args(self) -> dict:
        return {"m": self.m, "n": self.n, "k": self.k, "g": self.g, "seed": self.seed}


def task_cases(kind: str) -> list[Case]:
    doc = yaml.safe_load((ROOT / "task.yml").read_text())
    return [
        Case(f"{kind}{i}", tuple(e["m"]), tuple(e["n"]), tuple(e["k"]), e["seed"])
        for i, e in enumerate(doc[kind])
    ]


ODD_CASES = [
    Case("m1", (1,), (128,), (256,)),
    Case("m7_not_mult8", (7,), (256,), (512,)),
    Case("m129", (129,), (128,), (256,)),
    Case("m1000_n384", (1000,), (384,), (256,)),
    Case("one_group_k_min", (128,), (128,), (256,)),
    Case("k_not_mult256", (64,), (128,), (96,)),
    Case("sixteen_groups", tuple(range(8, 136, 8)), (128,) * 16, (256,) * 16),
    Case("empty_group", (0, 64), (128, 128), (256, 256)),
]


def sm90_made_fields(submission, tile_n: int, **kw) -> dict:
    """The fields that `submission`'s make_sm90_config sets for tile_n (stages, mma_depth,
    weights_early), with kw, as changes to another config (dataclasses.replace of a
    planned one, whose own choices may not be legal at this tile_n)."""
    cfg = submission.make_sm90_config(tile_n, **kw)
    return {"tile_n": tile_n, "stages": cfg.stages, "mma_depth": cfg.mma_depth,
            "weights_early": cfg.weights_early, **kw}
