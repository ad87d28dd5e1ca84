"""The masked op's tile plan on the CPU: its Python mirror (masked_plan.masked_tables, the
algorithm of the device plan kernel) against the Hopper leaderboard path's host schedule
for the same token counts, and the compiled masked kernels' PTX for sm_90a under both DSLs."""

import glob
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from cases import ROOT

from nvfp4_gemm.masked_plan import (
    MASKED_PLAN_THREADS,
    SplitCosts,
    group_plan,
    masked_grid,
    masked_rows,
    masked_schedule,
    masked_tables,
    split_cuts,
    walked_units,
)
from nvfp4_gemm.schedule import (
    RANGE_FIELDS,
    UNIT_FIXUP,
    UNIT_PARTIAL,
    UNIT_WHOLE,
    modeled_cta_us,
    phased_tile_schedule,
    round_robin_units,
)
from nvfp4_gemm.sm90_config import (
    SM90_PACKED_K_TILE,
    sm90_cost_model,
    sm90_makespan_us,
    sm90_offered_configs,
    sm90_work_schedule,
)

WHOLE_TILE_CONFIGS = [c for c in sm90_offered_configs(((1, 128, 256, 1),), 132) if not c.split_k]
SPLIT_CONFIGS = [c for c in sm90_offered_configs(((300, 4096, 7168, 1),) * 8, 132) if c.split_k]
EDGES = (0, 1, 31, 32, 33, 127, 128, 129)


def _host_schedule(counts, grid, cfg):
    """The leaderboard path's whole-tile schedule (sm90_config._sm90_work_schedule's) for
    groups of the clamped counts, on the masked grid's CTAs."""
    sizes = [(m, grid.n, grid.k, 1) for m in masked_rows(counts, grid.max_m)]
    rows, phase_sizes = phased_tile_schedule(sizes, cfg.tile_n, cfg.widths)
    return round_robin_units(rows, phase_sizes, [grid.k // SM90_PACKED_K_TILE] * grid.groups, grid.grid)


def _patterns(groups, max_m, rng):
    yield (0,) * groups
    yield tuple(max_m if g == groups // 2 else 0 for g in range(groups))
    yield (max_m,) * groups
    yield tuple(EDGES[g % len(EDGES)] for g in range(groups))
    yield tuple(rng.choice((-7, 0, 1, max_m, max_m + 5, 2**31 - 1, rng.randint(0, max_m))) for _ in range(groups))


@pytest.mark.parametrize("cfg", WHOLE_TILE_CONFIGS, ids=lambda c: c.name)
def test_the_plan_is_the_host_schedule_of_the_same_counts(cfg):
    """Per CTA, the units the plan's tables make it walk and its phase starts are those of
    round_robin_units over phased_tile_schedule for the clamped counts: the device plan
    gives the GEMM the leaderboard path's own schedule. Edge counts, all empty, one full,
    all full, out of range; every config the chooser offers without split-K."""
    rng = random.Random(cfg.tile_n + len(cfg.widths))
    cases = 0
    for groups in (1, 3, 8, 64):
        for max_m in (1, 8, 16, 33, 128, 129, 512):
            for n in (256, 4096):
                grid = masked_grid(groups, max_m, n, 512, SM90_PACKED_K_TILE, cfg.tile_n, cfg.widths, 132)
                for counts in _patterns(groups, max_m, rng):
                    sizes, ranges, units = masked_tables(counts, grid)
                    host = _host_schedule(counts, grid, cfg)
                    assert walked_units(ranges, units, grid) == (host.cta_units, host.starts), (groups, max_m, counts)
                    assert len(units) == sum(map(len, host.cta_units))
                    assert all(0 <= row < grid.grid * grid.unit_stride for row in units)
                    assert sizes == [(m, n, 512, 1) for m in masked_rows(counts, max_m)]
                    assert all(len(r) == RANGE_FIELDS and r[len(cfg.widths) + 1:] == (0,) * (RANGE_FIELDS - len(cfg.widths) - 1)
                               for r in ranges)
                    cases += 1
    assert cases == 4 * 7 * 2 * 5


def test_the_launch_shape_depends_on_the_buffers_alone():
    """grid and unit_stride cover the upper bound of tiles, whatever the counts: a graph
    captured once holds every call's plan."""
    cfg = WHOLE_TILE_CONFIGS[0]
    grid = masked_grid(64, 8, 4096, 7168, SM90_PACKED_K_TILE, cfg.tile_n, cfg.widths, 132)
    assert grid.tiles_bound == 64 * 1 * 32 and grid.grid == 132
    assert grid.grid * grid.unit_stride >= grid.tiles_bound
    one = masked_grid(1, 1, 128, 256, SM90_PACKED_K_TILE, cfg.tile_n, cfg.widths, 132)
    assert (one.grid, one.unit_stride) == (1, 1)
    _, ranges, units = masked_tables([0], one)
    assert units == {} and ranges == [(0,) * RANGE_FIELDS]


def _split_grid(cfg, groups, max_m, n=4096, k=7168, sms=132):
    return masked_grid(groups, max_m, n, k, SM90_PACKED_K_TILE, cfg.tile_n, cfg.widths, sms,
                       SplitCosts.of(*sm90_cost_model(cfg)))


def _modeled_us(ws, cfg):
    """The slowest CTA's time by the config's cost model (schedule.modeled_cta_us)."""
    return max(modeled_cta_us(ws, *sm90_cost_model(cfg)))


def _prefill(groups, lo, hi, seed):
    rng = random.Random(seed)
    return [rng.randint(lo, hi) for _ in range(groups)]


@pytest.mark.parametrize("cfg", SPLIT_CONFIGS, ids=lambda c: c.name)
def test_a_split_plan_computes_every_tile_once_in_the_kernels_order(cfg):
    """Where the plan splits: every live tile's K-tiles exactly once, in one whole unit or
    a PARTIAL [0, kt) and a FIXUP [kt, K-tiles), each piece at least min_kt deep; the
    PARTIAL is the first unit CTA c walks, into slot c, and the FIXUP of slot c the last
    unit of CTA c + 1 (so a FIXUP waits only for the first unit of the CTA below it); each
    CTA walks its phases in order, each unit in its tile's phase; every row within the
    CTA's unit_stride. Where it does not split, the tables are the round robin's."""
    rng = random.Random(5)
    split_cases = 0
    for groups, max_m, n in ((8, 512, 4096), (8, 129, 4096), (16, 200, 2048), (3, 512, 4096), (64, 8, 4096),
                             (1, 4096, 7168)):
        grid = _split_grid(cfg, groups, max_m, n)
        patterns = [*_patterns(groups, max_m, rng), *(_prefill(groups, 1, max_m, s) for s in range(4))]
        for counts in patterns:
            sizes, ranges, units = masked_tables(counts, grid)
            rows = masked_rows(counts, max_m)
            ctas, starts = walked_units(ranges, units, grid)
            assert all(0 <= r < grid.grid * grid.unit_stride for r in units)
            assert all(r[len(cfg.widths)] - r[0] <= grid.unit_stride for r in ranges)
            live = {(g, tm, tn) for g, m in enumerate(rows) for tm in range(-(-m // cfg.tile_m))
                    for tn in range(-(-n // cfg.tile_n))}
            pieces = {}
            for c, (cta, st) in enumerate(zip(ctas, starts)):
                bounds = (*st, len(cta))
                for p in range(len(st)):
                    for u in cta[bounds[p]:bounds[p + 1]]:
                        m_tiles, full, last = group_plan(rows[u[0]], cfg.tile_m, cfg.widths)
                        assert p == (0 if u[1] < full else last), (counts, c, u)
                        pieces.setdefault(u[:3], []).append((c, cta.index(u), len(cta), *u[3:]))
            assert set(pieces) == live, counts
            for tile, got in pieces.items():
                if len(got) == 1:
                    assert got[0][3:] == (0, grid.k_tiles, UNIT_WHOLE, 0, -1), (counts, tile, got)
                    continue
                split_cases += 1
                (c0, i0, _, lo0, hi0, role0, slot0, _), (c1, i1, n1, lo1, hi1, role1, _, prev1) = sorted(got)
                assert (role0, role1, c1, slot0, prev1) == (UNIT_PARTIAL, UNIT_FIXUP, c0 + 1, c0, c0), (counts, got)
                assert (i0, i1) == (0, n1 - 1), (counts, got)
                assert lo0 == 0 and hi0 == lo1 and hi1 == grid.k_tiles and min(hi0, hi1 - lo1) >= 2, (counts, got)
    assert split_cases > 0


@pytest.mark.parametrize("cfg", SPLIT_CONFIGS, ids=lambda c: c.name)
def test_a_split_plan_is_modeled_as_fast_as_the_host_split(cfg):
    """The quantile cuts against the leaderboard path's bisection (k_range_units) on the
    same counts, by the config's cost model: within 3 %, and faster than the config's
    whole-tile round robin wherever the plan splits."""
    for groups, lo, hi, seed in ((8, 64, 512, 7), (8, 64, 512, 1), (16, 100, 200, 3), (8, 300, 512, 4)):
        counts = _prefill(groups, lo, hi, seed)
        grid = _split_grid(cfg, groups, hi)
        sizes = [(m, 4096, 7168, 1) for m in counts]
        ours = _modeled_us(masked_schedule(counts, grid), cfg)
        theirs = _modeled_us(sm90_work_schedule(sizes, cfg, 132), cfg)
        assert ours <= 1.03 * theirs, (counts, ours, theirs)
        assert ours < _modeled_us(_host_schedule(counts, grid, cfg), cfg), counts


def test_the_split_decision():
    """No split without live tiles, where a CTA's share is shorter than a tile (decode:
    fewer tiles than CTAs), or where whole tiles fill the waves evenly; a split where the
    last wave of whole tiles would run part full."""
    cfg = SPLIT_CONFIGS[0]
    grid = _split_grid(cfg, 8, 512)
    phases = len(cfg.widths)
    assert split_cuts([0] * phases, grid) is None
    assert split_cuts([100] + [0] * (phases - 1), grid) is None  # 100 tiles on 132 CTAs
    assert split_cuts([264] + [0] * (phases - 1), grid) is None  # exactly two waves
    cuts = split_cuts([300] + [0] * (phases - 1), grid)
    assert cuts is not None and len(cuts) == grid.grid + 1 and cuts == sorted(cuts)
    assert cuts[0] == 0 and cuts[-1] == 300 * grid.k_tiles


def test_the_chooser_takes_a_split_config_only_where_the_plan_splits():
    """Prefill-like buffers (8 groups of up to 512 rows, the hint at the bound or none): a
    split-K config, as the leaderboard path's chooser takes for those rows; 8 groups of 256
    (two waves of whole tiles, which the plan does not split) and decode (64 groups of 8):
    whole tiles."""
    pytest.importorskip("torch")
    from nvfp4_gemm.sm90_masked import choose_masked_config

    prefill = choose_masked_config(8, 512, 4096, 7168, 512, 132, split=True)
    assert prefill.split_k and choose_masked_config(8, 512, 4096, 7168, None, 132, split=True) == prefill, prefill
    assert not choose_masked_config(8, 512, 4096, 7168, 256, 132, split=True).split_k
    decode = choose_masked_config(64, 8, 4096, 7168, 8, 132, split=True)
    assert not decode.split_k, decode
    assert not choose_masked_config(8, 512, 4096, 7168, 512, 132).split_k  # the split plan is opt-in
    sizes = [(512, 4096, 7168, 1)] * 8
    whole = min((c for c in sm90_offered_configs(sizes, 132) if not c.split_k),
                key=lambda c: sm90_makespan_us(sizes, c, 132))
    assert sm90_makespan_us(sizes, prefill, 132) < sm90_makespan_us(sizes, whole, 132)


def test_counts_are_clamped_as_the_op_documents():
    assert masked_rows([-5, 0, 3, 8, 9, 2**31 - 1, -(2**31)], 8) == [0, 0, 3, 8, 8, 8, 0]


def test_the_split_plan_switch(monkeypatch):
    """NVFP4_GEMM_MASKED_SPLIT: unset or 1 on, 0 off, anything else a ValueError naming it."""
    pytest.importorskip("torch")
    from nvfp4_gemm.sm90_masked import MASKED_SPLIT_ENV, masked_split_enabled

    monkeypatch.delenv(MASKED_SPLIT_ENV, raising=False)
    assert masked_split_enabled()
    for value, on in (("0", False), ("1", True)):
        monkeypatch.setenv(MASKED_SPLIT_ENV, value)
        assert masked_split_enabled() == on
    monkeypatch.setenv(MASKED_SPLIT_ENV, "yes")
    with pytest.raises(ValueError, match=MASKED_SPLIT_ENV):
        masked_split_enabled()


def test_the_kernel_path_refuses_what_it_cannot_take():
    torch = pytest.importorskip("torch")
    from nvfp4_gemm.moe import MaskedProblem
    from nvfp4_gemm.sm90_masked import masked_kernel_refusal

    def t(nbytes=64, offset=0):
        return torch.zeros(nbytes + offset, dtype=torch.uint8)[offset:]

    ok = MaskedProblem(2, 8, 128, 512, torch.device("cpu"))
    assert masked_kernel_refusal(ok, t(), t(), t(), t()) is None
    assert "multiple of 256" in masked_kernel_refusal(MaskedProblem(2, 8, 128, 272, ok.device), t(), t(), t(), t())
    many = MaskedProblem(MASKED_PLAN_THREADS + 1, 8, 128, 512, ok.device)
    assert "groups" in masked_kernel_refusal(many, t(), t(), t(), t())
    assert "'sfb'" in masked_kernel_refusal(ok, t(), t(), t(), t(offset=8))


# ----------------------------------------------------------------------------------------
# the compiled kernels' PTX (sm_90a, no GPU): under the DSL here and under 4.5.2
# ----------------------------------------------------------------------------------------
_COMPILE = """
import sys
from nvfp4_gemm.sm90_config import make_sm90_config
from nvfp4_gemm.sm90_masked import compile_masked_sm90
compile_masked_sm90(make_sm90_config(**{cfg!r}))
"""


def _pythons():
    yield pytest.param(sys.executable, id="dsl-here")
    other = os.environ.get("NVFP4_DSL452_PYTHON")
    yield pytest.param(other, id="dsl-4.5.2", marks=pytest.mark.skipif(
        not other, reason="NVFP4_DSL452_PYTHON is not set (a python with nvidia-cutlass-dsl 4.5.2)"))


def _masked_ptx(tmp_path, python, cfg) -> dict:
    pytest.importorskip("cutlass")
    env = dict(os.environ, CUTE_DSL_ARCH="sm_90a", CUTE_DSL_KEEP="ptx", CUTE_DSL_DUMP_DIR=str(tmp_path))
    subprocess.run([python, "-c", _COMPILE.format(cfg=cfg)], check=True, env=env, cwd=ROOT, timeout=900)
    found = {}
    for path in glob.glob(str(tmp_path / "*.ptx")):
        name = Path(path).name
        kind = "plan" if "MaskedPlanKernel" in name else "init" if "init_on" in name else "gemm"
        assert kind not in found, name
        found[kind] = Path(path).read_text()
    assert set(found) == {"plan", "init", "gemm"}, sorted(found)
    return found


@pytest.mark.compile
@pytest.mark.slow
@pytest.mark.parametrize("python", list(_pythons()))
@pytest.mark.parametrize("cfg", [{"tile_n": 256, "tile_m": 32, "narrow": (16,), "mma_depth": 3}, {"tile_n": 256},
                                 {"tile_n": 256, "narrow": (64,), "split_k": True, "weights_early": False}],
                         ids=["decode", "tile_n256", "split_k"])
def test_the_masked_kernels_ptx(tmp_path, python, cfg):
    """The masked GEMM stores C with predicated 16-byte stores only (no TMA store, whose
    box would cover rows at or above masked_m), reads nothing before its grid dependency
    wait and prefetches only the host-written pointer table into L1 there (the plan
    kernel's tables to L2: the plan may still be writing them); no local memory. The plan
    kernel lets the GEMM launch early and syncs its block once per scan step (and, to
    publish its cuts, once more where it may split)."""
    ptx = _masked_ptx(tmp_path, python, cfg)
    gemm, plan = ptx["gemm"], ptx["plan"]
    assert "wgmma.mma_async" in gemm and "cp.async.bulk.tensor.2d.shared::cluster.global" in gemm
    assert "cp.async.bulk.tensor.2d.global.shared::cta" not in gemm
    assert "@p st.global.v4.b32" in gemm
    before = gemm[:gemm.index("griddepcontrol.wait;")]
    assert before.count("prefetch.global.L1") == 1 and before.count("prefetch.global.L2") == 4
    assert "ld.global" not in before
    for text in (gemm, plan, ptx["init"]):
        assert "ld.local" not in text and "st.local" not in text
    assert "griddepcontrol.launch_dependents" in plan and "griddepcontrol.wait" not in plan
    steps = MASKED_PLAN_THREADS.bit_length() - 1
    assert plan.count("bar.sync") + plan.count("barrier.sync") >= 2 * steps + 1 + ("split_k" in cfg)
    if "split_k" in cfg:  # the PARTIAL's release of its flag, the FIXUP's acquire and reset
        assert "fence.acq_rel.gpu;" in gemm
        assert "ld.acquire.gpu.global.u32" in gemm and "st.relaxed.gpu.global.u32" in gemm


# ----------------------------------------------------------------------------------------
# the Blackwell kernels: the schedule's mirror on the CPU, the kernels' PTX for sm_100a
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("tile", [(128, 256), (128, 128), (256, 128), (32, 128)], ids=lambda t: f"m{t[0]}n{t[1]}")
def test_the_sm100_plan_is_the_leaderboard_paths_order(tile):
    """masked_plan.sm100_masked_schedule (the Blackwell plan kernel's algorithm) gives, for
    the clamped counts, the rows of sm100_tile_order (columns_together over
    build_tile_schedule): every pattern, edge counts, out-of-range counts."""
    from nvfp4_gemm.masked_plan import sm100_masked_bound, sm100_masked_schedule
    from nvfp4_gemm.sm100 import sm100_tile_order

    tile_m, tile_n = tile
    rng = random.Random(tile_m * tile_n)
    cases = 0
    for groups in (1, 3, 8, 33):
        for max_m in (1, 31, 32, 33, 127, 128, 129, 256, 300):
            for n in (128, 300, 4096):
                for counts in _patterns(groups, max_m, rng):
                    rows, count = sm100_masked_schedule(counts, max_m, n, tile_m, tile_n)
                    sizes = [(m, n, 7168, 1) for m in masked_rows(counts, max_m)]
                    assert rows == [tuple(r) for r in sm100_tile_order(sizes, tile_m, tile_n)], (groups, max_m, counts)
                    assert count == len(rows) <= sm100_masked_bound(groups, max_m, n, tile_m, tile_n)
                    cases += 1
    assert cases == 4 * 9 * 3 * 5


def _sm100_masked_report(tmp_path, python, config):
    pytest.importorskip("cutlass")
    import json

    env = dict(os.environ, CUTE_DSL_ARCH="sm_100a", CUTE_DSL_KEEP="ptx,cubin", CUTE_DSL_DUMP_DIR=str(tmp_path))
    proc = subprocess.run([python, str(ROOT / "tools" / "sm100_compile_check.py"), "--config", config, "--out",
                           str(tmp_path), "--masked"], capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.compile
@pytest.mark.slow
@pytest.mark.parametrize("python", list(_pythons()))
@pytest.mark.parametrize("config", ["swap_2cta_m128n256", "swap_1cta_m32n128", "plain_1cta_m128n128"])
def test_the_sm100_masked_kernels_ptx(tmp_path, python, config):
    """The Blackwell masked GEMM (the config with direct stores) stores every tile's C by
    the predicated 16-byte stores (no TMA store, whose box would cover rows at or above
    masked_m), reads nothing in global memory and prefetches nothing into L1 before its
    grid dependency wait (the plan writes the schedule, its length and the sizes), keeps
    its TMEM alloc and dealloc paired, and nothing of the three kernels spills; the plan
    kernel lets the GEMM launch early."""
    report = _sm100_masked_report(tmp_path, python, config)
    kernels = report["kernels"]
    assert set(kernels) == {"plan", "init", "gemm"}, sorted(kernels)
    gemm, init, plan = kernels["gemm"], kernels["init"], kernels["plan"]
    assert report["has_block_scale_mma"] and gemm["tma_load"] > 0
    assert gemm["tma_store"] == 0 and (gemm["ld_shared_v4"], gemm["st_global_v4"]) == (4, 4), gemm
    assert gemm["pdl_wait"] == 1 and gemm["global_before_pdl_wait"] == 0
    assert gemm["l1_prefetch_before_pdl_wait"] == 0 and gemm["l2_prefetch_before_pdl_wait"] >= 2
    assert gemm["tcgen05_alloc"] == gemm["tcgen05_dealloc"] == 1
    assert init["tensormap_replace"] > 0 and gemm["tensormap_replace"] == 0
    assert report["ld_local"] == 0 and report["st_local"] == 0
    for kernel in (gemm, init, plan):
        for res in kernel["ptxas"].values():
            assert res["spill_stores"] == 0 and res["spill_loads"] == 0, res
    plan_ptx = Path(plan["ptx"]).read_text()
    assert "griddepcontrol.launch_dependents" in plan_ptx and "griddepcontrol.wait" not in plan_ptx


def test_the_pointer_rows_are_each_groups_own_addresses():
    """write_pointer_rows over group_bases: row g holds the addresses of a[g], b[g], group
    g's scale slices and out[g], as the per-group views have them (the CPU runs it)."""
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(ROOT / "tests"))
    from test_moe_op import make_inputs

    from nvfp4_gemm.masked_runner import group_bases, write_pointer_rows

    x = make_inputs(3, 40, 136, 512, seed=5)
    out = torch.zeros((3, 40, 136), dtype=torch.float16)
    ptrs = torch.empty((3, 5), dtype=torch.int64)
    write_pointer_rows(ptrs, group_bases(x.a, x.b, x.sfa, x.sfb, out))
    for g in range(3):
        want = [x.a[g].data_ptr(), x.b[g].data_ptr(), x.sfa[..., g].data_ptr(), x.sfb[..., g].data_ptr(),
                out[g].data_ptr()]
        assert ptrs[g].tolist() == want, g
