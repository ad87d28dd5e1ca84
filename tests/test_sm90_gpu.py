"""The sm_90a kernel through custom_kernel against an independent exact reference
(rtol = atol = 1e-3), including every E2M1 code and NaN-poisoned scale padding."""

import math
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from cases import Case as BaseCase
from cases import task_cases
from conftest import kernel_launches

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

pytestmark = pytest.mark.gpu

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def _require_sm90():
    if not torch.cuda.is_available():
        pytest.skip("needs an sm_90 GPU; no CUDA device here")
    cap = torch.cuda.get_device_capability()
    if cap != (9, 0):
        pytest.skip(f"needs an sm_90 GPU (H100/H200); this one is sm_{cap[0]}{cap[1]}")


def exact_reference(a, b, sfa, sfb):
    """Decode E2M1 nibbles (low first) and E4M3 scales, fp32 matmul (no TF32), fp16 out."""
    lut = torch.tensor(E2M1, device=a.device)

    def dec(x, sf):
        u = x.view(torch.uint8)[..., 0].long()
        v = torch.stack((lut[u & 15], lut[u >> 4]), -1).flatten(-2)
        return v * sf[..., 0].to(x.device).float().repeat_interleave(16, -1)

    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return (dec(a, sfa) @ dec(b, sfb).T).half()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev


@dataclass(frozen=True)
class Case(BaseCase):
    full_range: bool = False  # random bytes: every E2M1 code, not only the leaderboard's
    poison: bool = False  # 0xFF (NaN) in the scale padding rows


CASES = (
    [Case(c.id, c.m, c.n, c.k) for c in task_cases("tests")]
    + [Case(f"{c.id}-s{s}", c.m, c.n, c.k, seed=s) for c in task_cases("benchmarks") for s in (1153, 7)]
    + [
        Case("m1", (1,), (128,), (256,)),
        Case("m7-n7168", (7,), (7168,), (256,), full_range=True),
        Case("m129", (129,), (4096,), (512,), poison=True),
        Case("m1000-k7168", (1000,), (384,), (7168,), full_range=True, poison=True),
        Case("mixed", (1, 7, 129, 1000), (128, 200, 7168, 1000), (256, 1024, 512, 256)),
        Case("g16", (33,) * 16, (136,) * 16, (256,) * 16, poison=True),
        Case("bench1-full", (40, 76, 168, 72, 164, 148, 196, 160), (7168,) * 8, (2048,) * 8, seed=9, full_range=True),
    ]
)


def _make(case):
    from reference import generate_input

    data = generate_input(list(case.m), list(case.n), list(case.k), len(case.m), case.seed)
    if case.full_range:
        gen = torch.Generator(device="cuda").manual_seed(case.seed)
        for a, b, _c in data[0]:
            for t in (a, b):
                u = t.view(torch.uint8)
                u.copy_(torch.randint(0, 256, u.shape, dtype=torch.uint8, device="cuda",
                                      generator=gen))
    if case.poison:
        for (sfa_r, sfb_r), (m, n, k, _l) in zip(data[2], data[3]):
            for t, mn in ((sfa_r, m), (sfb_r, n)):
                rows = math.ceil(mn / 128) * 128
                if rows == mn:
                    continue
                rr = torch.arange(mn, rows).unsqueeze(1).expand(-1, k // 16).flatten()
                jj = torch.arange(k // 16).unsqueeze(0).expand(rows - mn, -1).flatten()
                t.view(torch.uint8)[rr % 32, (rr % 128) // 32, rr // 128, jj % 4, jj // 4, 0] = 0xFF
    return data


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_sm90_matches_exact_reference(case):
    _require_sm90()
    import warnings

    import submission

    assert submission.select_path(torch.device("cuda")) == "sm90"
    data = _make(case)
    before = kernel_launches()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a fallback would not test the kernel
        submission.custom_kernel(data)
    assert kernel_launches() == before + 1
    _check_outputs(data)


def _ran_once(runner, data, problem, config):
    """runner.run on data: one kernel launch more, the config kept, and the returned list the
    call's own c tensors (what _check_outputs then reads)."""
    before = runner.launches
    out = runner.run(data, problem, config)
    assert runner.launches == before + 1 and not runner.rejected, runner.rejected
    assert len(out) == len(data[0]) and all(o is abc[2] for o, abc in zip(out, data[0]))


def _check_outputs(data):
    torch.cuda.synchronize()
    for g, ((a, b, c), (sfa, sfb)) in enumerate(zip(data[0], data[1])):
        ref = exact_reference(a, b, sfa, sfb).float()
        out = c[..., 0].float()
        bad = ~((out - ref).abs() <= 1e-3 + 1e-3 * ref.abs())
        if bad.any():
            i, j = torch.nonzero(bad)[0].tolist()
            pytest.fail(f"group {g}: {int(bad.sum())} bad, first ({i},{j}) "
                        f"out {out[i, j].item()} ref {ref[i, j].item()}")


# 96-row token tiles start 0, 96, 64 and 32 rows into a 128-row scale atom (M = 300), end
# in the next atom or past the group's last one (M = 200, 129, 40, 1: the clamped copy),
# with every phase (96, 64, 32) and N not a multiple of 192
TILE_M96 = Case("tile-m96", (300, 40, 200, 129, 1), (512, 256, 384, 200, 128), (512, 256, 768, 256, 512),
                full_range=True, poison=True)


# 32-token tiles start 0, 32, 64 and 96 rows into a scale atom and in the next (M = 300),
# groups of 1-32 tokens (the width-16 and width-32 phases), N not a multiple of 256 nor
# of 8 (the element-wise C store), every E2M1 code, NaN in the scale padding
TILE_M32 = Case("tile-m32", (1, 7, 16, 17, 32, 300, 40), (256, 512, 200, 384, 4096, 512, 100),
                (512, 256, 768, 256, 2048, 512, 256), full_range=True, poison=True)


@pytest.mark.parametrize("num_sms", [3, 132])
def test_decode_tile(num_sms):
    """The decode tile (tile_n 256, 32 tokens, a width-16 phase; both consumer WGs decode
    the tokens, one word of 2 or 1 chunks per thread) through a runner with the config
    forced."""
    _require_sm90()
    import submission

    cfg = submission.make_sm90_config(256, **submission.SM90_DECODE_TILE)
    assert submission.sm90_config_is_legal(cfg) and cfg.tile_m == 32
    data = _make(TILE_M32)
    runner = submission.GroupedGemmRunner(submission.sm90_backend(), num_sms=num_sms)
    _ran_once(runner, data, submission.validate_inputs(data), cfg)
    _check_outputs(data)


@pytest.mark.parametrize("split_k", [False, True], ids=["whole", "split_k"])
@pytest.mark.parametrize("num_sms", [3, 132])
def test_tile_m_96_with_three_decoding_warpgroups(num_sms, split_k):
    """tile_n 192 at 96 tokens (all three consumer WGs decode tokens, two scale atoms per
    token tile) through a runner with the config forced, on a grid where CTAs walk many
    tiles of every phase and on one where most run one; NaN in the scale padding."""
    _require_sm90()
    import submission

    cfg = submission.make_sm90_config(192, tile_m=96, narrow=(64, 32), split_k=split_k)
    assert submission.sm90_config_is_legal(cfg) and cfg.decoder_threads == 384
    data = _make(TILE_M96)
    runner = submission.GroupedGemmRunner(submission.sm90_backend(), num_sms=num_sms)
    _ran_once(runner, data, submission.validate_inputs(data), cfg)
    _check_outputs(data)


@pytest.mark.parametrize("num_sms", [3, 132])
@pytest.mark.parametrize("kw", [{"tile_n": 128}, {"tile_n": 128, "split_k": True}, {"tile_n": 256, "tile_m": 32, "narrow": (16,), "mma_depth": 3}],
                         ids=["tile_n128", "tile_n128_split_k", "decode"])
def test_weights_early(kw, num_sms):
    """weights_early (the next K-tile's weights loaded, and the stage released, in the first
    group) on the configs where it is legal, forced through a runner, on a grid where CTAs
    walk many tiles and units and on one where most run one; every E2M1 code, NaN in the
    scale padding."""
    _require_sm90()
    import submission

    cfg = submission.make_sm90_config(**kw, weights_early=True)
    assert submission.sm90_config_is_legal(cfg) and cfg.weights_early
    data = _make(TILE_M32 if cfg.tile_m == 32 else TILE_M96)
    runner = submission.GroupedGemmRunner(submission.sm90_backend(), num_sms=num_sms)
    _ran_once(runner, data, submission.validate_inputs(data), cfg)
    _check_outputs(data)


# Two members of one size class (every M rounds up to the same multiple of 16): their last
# tiles use other rows of the same phases, and the tile counts are equal
CLASS_MEMBERS = (
    Case("class-a", (3, 17, 97, 129, 290), (256, 200, 384, 4096, 512), (512, 256, 768, 2048, 512),
         full_range=True, poison=True),
    Case("class-b", (16, 30, 112, 140, 300), (256, 200, 384, 4096, 512), (512, 256, 768, 2048, 512),
         seed=5, full_range=True, poison=True),
)


@pytest.mark.parametrize("num_sms", [3, 132])
@pytest.mark.parametrize("kw", [None, {"tile_n": 256, "tile_m": 32, "narrow": (16,)},
                                {"tile_n": 192, "tile_m": 96, "narrow": (64, 32), "split_k": True}],
                         ids=["chosen", "decode", "tile_m96_split_k"])
def test_members_of_a_size_class_share_the_plan_and_schedule(kw, num_sms):
    """Two problems of one size class through one runner: the second reuses the first's
    config and schedule (built for the class's sizes), with its own sizes in its pointer
    table, and both match the exact reference; chosen by the runner, and forced to the
    decode tile and to 96-row split pieces."""
    _require_sm90()
    import submission

    runner = submission.GroupedGemmRunner(submission.sm90_backend(), num_sms=num_sms)
    sizes = [tuple((m, n, k, 1) for m, n, k in zip(c.m, c.n, c.k)) for c in CLASS_MEMBERS]
    assert sizes[0] != sizes[1] and runner.size_class(sizes[0]) == runner.size_class(sizes[1])
    forced = None if kw is None else submission.make_sm90_config(**kw)
    for case in CLASS_MEMBERS:
        data = _make(case)
        problem = submission.validate_inputs(data)
        config = forced if forced is not None else runner.plan(problem)[0]
        assert config is not None and submission.sm90_config_is_legal(config)
        _ran_once(runner, data, problem, config)
        _check_outputs(data)
    assert len(runner.schedules) == 1 and len(runner.pointers) == 2
    assert runner.plans.hits == (1 if forced is None else 0)
