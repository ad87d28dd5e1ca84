"""Host-side logic shared by both kernels: the tile schedule, caches, path selection."""

import collections
import random
import warnings

import pytest
import torch

from nvfp4_gemm import binding, common, dispatch, schedule, sm90_config
from nvfp4_gemm.caches import LruCache
from nvfp4_gemm.common import ceil_div
from nvfp4_gemm.schedule import build_tile_schedule, split_tiles_by_width, tiles_per_group


def _random_sizes(rng, groups):
    ms = [rng.choice([0, 1, 7, 40, 127, 128, 129, 200, 256, 384, 1000]) for _ in range(groups)]
    return [(m, rng.choice([128, 256, 384, 3072, 4096, 7168]), rng.choice([256, 512, 7168]), 1) for m in ms]


@pytest.mark.parametrize("tile_m,tile_n", [(128, 128), (128, 256), (256, 128), (64, 128), (96, 192)])
@pytest.mark.parametrize("seed", range(6))
def test_schedule_covers_every_tile_once(tile_m, tile_n, seed):
    rng = random.Random(seed)
    sizes = _random_sizes(rng, rng.choice([1, 2, 8, 64]))
    schedule = build_tile_schedule(sizes, tile_m, tile_n)
    expected = {
        (g, i, j)
        for g, (m, n, _, _) in enumerate(sizes)
        for i in range(ceil_div(m, tile_m))
        for j in range(ceil_div(n, tile_n))
    }
    assert len(schedule) == len(expected) == sum(tiles_per_group(sizes, tile_m, tile_n))
    assert set(schedule) == expected


def test_schedule_orders_by_descending_work():
    sizes = [(64, 256, 1024, 1), (256, 256, 1024, 1), (1, 128, 1024, 1), (130, 128, 1024, 1)]
    schedule = build_tile_schedule(sizes, 128, 128)
    work = [sizes[g][2] * min(128, sizes[g][0] - i * 128) for g, i, _ in schedule]
    assert work == sorted(work, reverse=True)
    assert schedule[0][0] == 1  # the 256-row group's full tiles go first
    assert schedule[-1] == (2, 0, 0)  # the M = 1 tile goes last


def _tile_by_tile_schedule(sizes, tile_m, tile_n):
    """build_tile_schedule's definition, one tile at a time: every tile keyed by K x rows
    used, stably sorted by descending key (ties keep group order, then N-major order)."""
    tiles = [(k * min(tile_m, m - tm * tile_m), g, tm, tn)
             for g, (m, n, k, _) in enumerate(sizes)
             for tn in range(ceil_div(n, tile_n)) for tm in range(ceil_div(m, tile_m))]
    tiles.sort(key=lambda t: -t[0])
    return [(g, tm, tn) for _, g, tm, tn in tiles]


def _tile_by_tile_phased(sizes, tile_n, widths):
    """phased_tile_schedule's definition, one tile at a time: every tile in its phase
    (width_phase of the rows it uses), sorted by phase, descending K, group, N column, M
    tile."""
    tile_m = widths[0]
    tiles = sorted((schedule.width_phase(widths, min(tile_m, m - tm * tile_m)), -k, g, tn, tm)
                   for g, (m, n, k, _) in enumerate(sizes)
                   for tn in range(ceil_div(n, tile_n)) for tm in range(ceil_div(m, tile_m)))
    return [(g, tm, tn) for _, _, g, tn, tm in tiles], tuple(
        sum(1 for t in tiles if t[0] == p) for p in range(len(widths)))


@pytest.mark.parametrize("seed", range(40))
def test_tile_runs_give_the_tile_by_tile_order(seed):
    """build_tile_schedule and phased_tile_schedule sort runs of tiles, not tiles: the same
    order as their tile-by-tile definitions (K > 0), on problems with equal keys across
    groups; the phases are split_tiles_by_width's."""
    rng = random.Random(seed)
    sizes = [(rng.choice([0, 1, 64, 96, 128, 129, 192, 200, 256, 384, rng.randint(0, 700)]),
              rng.choice([0, 128, 256, 4096, rng.randint(1, 3000)]),
              rng.choice([256, 512, 768, 1024, rng.randint(1, 40) * 256]), 1)
             for _ in range(rng.randint(1, 12))]
    for tile_m, tile_n in ((128, 128), (128, 256), (96, 192)):
        rows = build_tile_schedule(sizes, tile_m, tile_n)
        assert rows == _tile_by_tile_schedule(sizes, tile_m, tile_n)
        widths = (96, 64, 32) if tile_m == 96 else rng.choice([(128, 96, 64), (128, 64), (128,)])
        phased, counts = schedule.phased_tile_schedule(sizes, tile_n, widths)
        assert (phased, counts) == _tile_by_tile_phased(sizes, tile_n, widths)
        assert split_tiles_by_width(phased, sizes, widths) == (phased, counts)
        assert sorted(phased) == sorted(rows)


def test_schedule_m1_and_empty_groups():
    assert build_tile_schedule([(1, 128, 256, 1)], 128, 128) == [(0, 0, 0)]
    assert build_tile_schedule([(0, 128, 256, 1), (1, 256, 256, 1)], 128, 128) == [(1, 0, 0), (1, 0, 1)]


@pytest.mark.parametrize("widths", [(128, 64), (128, 96, 64), (128, 96, 32), (128,)])
@pytest.mark.parametrize("seed", range(8))
def test_split_tiles_by_width_keeps_every_tile_in_its_narrowest_phase(seed, widths):
    rng = random.Random(seed)
    sizes = _random_sizes(rng, rng.choice([1, 2, 8, 64]))
    rows = build_tile_schedule(sizes, 128, 128)
    split, counts = split_tiles_by_width(rows, sizes, widths)
    assert sorted(split) == sorted(rows) and sum(counts) == len(rows)  # every tile once
    order = {r: i for i, r in enumerate(rows)}
    start = 0
    for p, n in enumerate(counts):
        phase = split[start:start + n]
        start += n
        used = [min(128, sizes[g][0] - tm * 128) for g, tm, _ in phase]
        # the narrowest width that holds the tile's rows
        assert all(u <= widths[p] for u in used)
        if p + 1 < len(widths):
            assert all(u > widths[p + 1] for u in used)
        # each phase keeps the schedule's order (descending work)
        assert [order[r] for r in phase] == sorted(order[r] for r in phase)


@pytest.mark.parametrize("split_k", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_hopper_schedule_of_96_row_token_tiles_covers_every_k_tile_once(seed, split_k):
    """sm90_work_schedule at tile_n 192 with 96-token tiles (phases 96 / 64 / 32): every
    K-tile of every tile once, each unit in the phase of its tile's used rows."""
    rng = random.Random(seed)
    sizes = _random_sizes(rng, rng.choice([1, 2, 8, 64]))
    cfg = sm90_config.make_sm90_config(192, tile_m=96, narrow=(64, 32), split_k=split_k)
    ws = sm90_config.sm90_work_schedule(sizes, cfg, 132)
    covered = collections.Counter()
    for c, cta in enumerate(ws.ctas):
        for u, p in zip(cta, ws.phases(c)):
            used = min(96, sizes[u.group][0] - 96 * u.tm)
            assert used <= cfg.widths[p] and (p + 1 == len(cfg.widths) or used > cfg.widths[p + 1])
            covered.update((u.group, u.tm, u.tn, kt) for kt in range(u.kt0, u.kt1))
    expected = collections.Counter((g, tm, tn, kt) for g, tm, tn in build_tile_schedule(sizes, 96, 192)
                                   for kt in range(sizes[g][2] // 128))
    assert covered == expected


def test_split_tiles_by_width_benchmark_shape():
    # G=8 N=4096: the last M tiles of M = 176, 160 and the M = 64 group use <= 64 rows;
    # M = 80, 72, 96 and the 248-row group's second tile (120 rows) need more
    sizes = [(m, 4096, 7168, 1) for m in (80, 176, 128, 72, 64, 248, 96, 160)]
    rows = build_tile_schedule(sizes, 128, 128)
    split, counts = split_tiles_by_width(rows, sizes, (128, 64))
    assert len(split) == 11 * 32 and counts == (8 * 32, 3 * 32)
    assert {g for g, _, _ in split[counts[0]:]} == {1, 4, 7}
    split, counts = split_tiles_by_width(rows, sizes, (128, 96, 64))
    assert counts == (5 * 32, 3 * 32, 3 * 32)
    assert {g for g, _, _ in split[counts[0]:counts[0] + counts[1]]} == {0, 3, 6}


def _benchmark_like(rng, groups):
    n = rng.choice([512, 3072, 4096, 7168])
    k = rng.choice([256, 1536, 2048, 4096, 7168])
    return [(rng.choice([1, 7, 40, 64, 72, 129, 192, 248, 384, 1000]), n, k, 1) for _ in range(groups)]


_WIDTH_COST = {128: 1.0, 96: 0.8, 64: 0.6, 32: 0.4}  # us per K-tile, by token width


def _units(sizes, split_k, tile_n=128, grid=132, widths=(128, 96, 64), unit_us=2.0, fixup_us=0.6):
    rows = build_tile_schedule(sizes, 128, tile_n)
    rows, counts = split_tiles_by_width(rows, sizes, widths)
    k_tiles = [k // 128 for _, _, k, _ in sizes]
    if split_k:
        kt_us = [_WIDTH_COST[w] for w in widths]
        gen = schedule.balanced_units if split_k == "balanced" else schedule.k_range_units
        ws = gen(rows, counts, k_tiles, grid, kt_us, unit_us, fixup_us)
    else:
        ws = schedule.round_robin_units(rows, counts, k_tiles, min(grid, len(rows)))
    return rows, schedule.phase_of_rows(counts), k_tiles, ws


@pytest.mark.parametrize("split_k", [False, True, "balanced"])
@pytest.mark.parametrize("seed", range(12))
def test_work_units_cover_every_k_tile_once(seed, split_k):
    rng = random.Random(seed)
    sizes = _benchmark_like(rng, rng.choice([1, 2, 8, 16, 64]))
    widths = rng.choice([(128, 64), (128, 96, 64), (128, 96, 32), (128,)])
    rows, phase_of, k_tiles, ws = _units(sizes, split_k, rng.choice([128, 256]), widths=widths)
    phase = dict(zip(rows, phase_of))
    assert len(ws.ctas) <= 132 and len(ws.starts) == len(ws.ctas)
    covered = collections.Counter()
    for c, cta in enumerate(ws.ctas):
        # the kernel's loops, one per phase: each unit in its tile's phase, ascending
        assert [phase[(u.group, u.tm, u.tn)] for u in cta] == ws.phases(c)
        assert ws.phases(c) == sorted(ws.phases(c))
        for u in cta:
            assert 0 <= u.kt0 < u.kt1 <= k_tiles[u.group]
            covered.update((u.group, u.tm, u.tn, kt) for kt in range(u.kt0, u.kt1))
    expected = collections.Counter((g, tm, tn, kt) for g, tm, tn in rows for kt in range(k_tiles[g]))
    assert covered == expected
    ranges, units = ws.tables()
    p = len(widths)
    assert all(len(r) == schedule.RANGE_FIELDS for r in ranges)
    assert [units[r[0]:r[p]] for r in ranges] == [list(c) for c in ws.ctas]
    assert [tuple(x - r[0] for x in r[:p]) for r in ranges] == list(ws.starts)
    # CTA c's units at row c * unit_stride (the kernel prefetches that row before its ranges)
    assert [r[0] for r in ranges] == [c * ws.unit_stride for c in range(len(ws.ctas))]
    assert len(units) == len(ws.ctas) * ws.unit_stride >= sum(map(len, ws.ctas))


@pytest.mark.parametrize("seed", range(12))
def test_k_range_pieces_wait_only_for_a_lower_ctas_first_unit(seed):
    # the kernel's deadlock-freedom argument (k_range_units): a FIXUP on CTA c waits for
    # one PARTIAL, which is the first unit of a CTA below c, of the same tile, ending
    # where the FIXUP starts; every slot is written once and read once
    rng = random.Random(100 + seed)
    sizes = _benchmark_like(rng, rng.choice([1, 2, 8, 16]))
    _, _, k_tiles, ws = _units(sizes, True, rng.choice([128, 256]))
    partial_at = {}
    for c, cta in enumerate(ws.ctas):
        for j, u in enumerate(cta):
            if u.role == schedule.UNIT_PARTIAL:
                assert j == 0 and u.kt0 == 0 and u.slot not in partial_at
                partial_at[u.slot] = (c, u)
    assert sorted(partial_at) == list(range(ws.num_slots))
    fixups = 0
    for c, cta in enumerate(ws.ctas):
        for j, u in enumerate(cta):
            if u.role == schedule.UNIT_FIXUP:
                fixups += 1
                pc, p = partial_at[u.prev]
                assert pc < c and j == len(cta) - 1
                assert (p.group, p.tm, p.tn, p.kt1) == (u.group, u.tm, u.tn, u.kt0)
                assert u.kt1 == k_tiles[u.group]
            elif u.role == schedule.UNIT_WHOLE:
                assert (u.kt0, u.kt1) == (0, k_tiles[u.group])
    assert fixups == ws.num_slots


@pytest.mark.parametrize("seed", range(16))
def test_balanced_pieces_wait_only_for_a_lower_takers_partial(seed):
    # balanced_units's deadlock-freedom argument: the CTAs holding PARTIALs (takers) hold
    # no FIXUP and come first; a FIXUP waits for one PARTIAL of its tile on a lower CTA,
    # which ends where the FIXUP starts; per phase, PARTIALs run first and FIXUPs last
    rng = random.Random(300 + seed)
    sizes = _benchmark_like(rng, rng.choice([1, 2, 8, 16]))
    grid = rng.choice([132, 40, 7])
    _, _, k_tiles, ws = _units(sizes, "balanced", rng.choice([128, 256]), grid=grid)
    partial_at, rank = {}, {schedule.UNIT_PARTIAL: 0, schedule.UNIT_WHOLE: 1, schedule.UNIT_FIXUP: 2}
    for c, cta in enumerate(ws.ctas):
        keys = [(p, rank[u.role]) for u, p in zip(cta, ws.phases(c))]
        assert keys == sorted(keys)
        for u in cta:
            if u.role == schedule.UNIT_PARTIAL:
                assert u.kt0 == 0 and u.slot not in partial_at
                partial_at[u.slot] = (c, u)
    assert sorted(partial_at) == list(range(ws.num_slots))
    takers = {c for c, _ in partial_at.values()}
    assert takers == set(range(len(takers)))  # the first CTAs
    fixups = 0
    for c, cta in enumerate(ws.ctas):
        for u in cta:
            if u.role == schedule.UNIT_FIXUP:
                fixups += 1
                pc, p = partial_at[u.prev]
                assert pc < c and c not in takers
                assert (p.group, p.tm, p.tn, p.kt1) == (u.group, u.tm, u.tn, u.kt0) and p.kt1 >= 2
                assert u.kt1 == k_tiles[u.group] and u.kt1 - u.kt0 >= 2
            elif u.role == schedule.UNIT_WHOLE:
                assert (u.kt0, u.kt1) == (0, k_tiles[u.group])
    assert fixups == ws.num_slots


def test_balanced_splits_only_the_long_tiles_of_a_one_wave_shape():
    # shape 2 of task.yml at tile_n 128: 72 full tiles set the makespan, 48 narrow ones and
    # 12 idle CTAs take their heads; one split per full tile, none of the narrow ones
    sizes = [(192, 3072, 4096, 1), (320, 3072, 4096, 1)]
    widths = (128, 96, 64)
    cost = ([_WIDTH_COST[w] for w in widths], 1.8, 0.6)
    rr = max(schedule.modeled_cta_us(_units(sizes, False, widths=widths, unit_us=1.8)[3], *cost))
    _, _, _, bal = _units(sizes, "balanced", widths=widths, unit_us=1.8)
    _, _, _, sk = _units(sizes, True, widths=widths, unit_us=1.8)
    assert max(schedule.modeled_cta_us(bal, *cost)) < 0.9 * rr
    assert bal.num_slots == 72 < sk.num_slots
    split = {(u.group, u.tm, u.tn) for cta in bal.ctas for u in cta if u.role != schedule.UNIT_WHOLE}
    assert all(tm < (1 if g == 0 else 2) for g, tm, _ in split)  # full tiles only


def test_balanced_brings_every_cta_under_one_target():
    # G = 1, M = 300 at tile_n 128: 64 full tiles and 32 of 44 rows on 132 CTAs. Each full
    # tile gives just the head that brings it to the common makespan, and the takers
    # (36 idle CTAs first, the fullest that fits) stay under it: the greedy first version
    # gave its first heads half a tile each and ran 28.7 us on the H200, this one 26.3
    sizes = [(300, 4096, 4096, 1)]
    widths = (128, 96, 64)
    kt = [_WIDTH_COST[w] for w in widths]
    _, _, _, bal = _units(sizes, "balanced", widths=widths, unit_us=1.0, fixup_us=0.8)
    loads = schedule.modeled_cta_us(bal, kt, 1.0, 0.8)
    whole = 32 * 1.0 + 1.0
    heads = [u.kt1 - u.kt0 for cta in bal.ctas for u in cta if u.role == schedule.UNIT_PARTIAL]
    assert bal.num_slots == 64 and max(heads) - min(heads) <= 1  # every full tile gives alike
    assert max(loads) < 0.8 * whole and max(loads) - min(loads) < 0.25 * max(loads)


def test_balanced_keeps_an_even_shape_whole():
    # shape 3: 128 equal tiles on 132 CTAs; a split could only move work to the 4 idle
    # CTAs without shortening the other 124, so nothing is split
    sizes = [(128, 4096, 1536, 1), (384, 4096, 1536, 1)]
    _, _, _, bal = _units(sizes, "balanced")
    assert bal.num_slots == 0 and all(len(c) == 1 for c in bal.ctas)


def test_k_range_balances_the_benchmark_shape():
    # shape 0 of task.yml: the round robin leaves 2 full + 1 narrow tile on 88 of 132 CTAs
    sizes = [(m, 4096, 7168, 1) for m in (80, 176, 128, 72, 64, 248, 96, 160)]
    widths = (128, 64)
    cost = ([_WIDTH_COST[w] for w in widths], 1.8, 0.6)
    rr = schedule.modeled_cta_us(_units(sizes, False, widths=widths, unit_us=1.8)[3], *cost)
    sk = schedule.modeled_cta_us(_units(sizes, True, widths=widths, unit_us=1.8)[3], *cost)
    assert max(rr) > 1.05 * sum(rr) / len(rr)
    assert max(sk) < 1.02 * sum(sk) / len(sk) and max(sk) < 0.95 * max(rr)


def test_k_range_keeps_small_problems_whole():
    # one tile, enough CTAs: split in two at most, and never into pieces below min_kt
    _, _, _, ws = _units([(64, 128, 1024, 1)], True)
    pieces = [u for cta in ws.ctas for u in cta]
    assert len(pieces) <= 2 and all(u.kt1 - u.kt0 >= 2 for u in pieces)


def test_lru_cache_bounded_and_counts():
    cache = LruCache(maxsize=2)
    assert cache.get("a") is None and cache.misses == 1
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1 and cache.hits == 1  # "a" becomes most recent
    cache.put("c", 3)  # evicts "b", the least recently used
    assert "b" not in cache and "a" in cache and len(cache) == 2
    assert cache.get_or_create("d", lambda: 4) == 4 and len(cache) == 2
    calls = []
    assert cache.get_or_create("d", lambda: calls.append(1)) == 4 and calls == []


def test_select_path_on_cpu_is_torch(monkeypatch):
    monkeypatch.delenv(common.PATH_ENV, raising=False)
    dispatch._device_paths.clear()
    assert dispatch.select_path(torch.device("cpu")) == "torch"


@pytest.mark.parametrize("forced", ["sm100", "sm90"])
def test_forced_gpu_path_on_cpu_warns_once_and_runs_torch(monkeypatch, forced):
    monkeypatch.setenv(common.PATH_ENV, forced)
    dispatch._device_paths.clear()
    common._warned.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert dispatch.select_path(torch.device("cpu")) == "torch"
        assert dispatch.select_path(torch.device("cpu")) == "torch"
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and f"NVFP4_GEMM_PATH={forced}" in messages[0]


def test_bad_path_env_is_a_clear_error(monkeypatch):
    monkeypatch.setenv(common.PATH_ENV, "fastest")
    dispatch._device_paths.clear()
    with pytest.raises(ValueError, match="NVFP4_GEMM_PATH='fastest'"):
        dispatch.select_path(torch.device("cpu"))


def _runs_to_completion(ws: schedule.WorkSchedule, resident: int) -> bool:
    """Plays a schedule as the kernel runs it: CTAs dispatched in index order onto
    `resident` SM slots, each walking its units in order; a PARTIAL sets its slot's flag
    when done, a FIXUP cannot finish before its flag is set (its CTA holds the slot while
    it waits). False on a deadlock: every resident CTA waits and none can move."""
    pending = list(range(len(ws.ctas)))
    running: dict[int, int] = {}  # CTA -> index of its next unit
    flags: set[int] = set()
    while pending or running:
        while pending and len(running) < resident:
            running[pending.pop(0)] = 0
        moved = False
        for c in list(running):
            units = ws.ctas[c]
            while running[c] < len(units):
                u = units[running[c]]
                if u.role == schedule.UNIT_FIXUP and u.prev not in flags:
                    break
                if u.role == schedule.UNIT_PARTIAL:
                    flags.add(u.slot)
                running[c] += 1
                moved = True
            if running[c] == len(units):
                del running[c]
                moved = True
        if not moved:
            return False
    return True


@pytest.mark.parametrize("gen", [True, "balanced"])
@pytest.mark.parametrize("seed", range(10))
def test_split_schedules_finish_on_any_number_of_resident_ctas(seed, gen):
    # the kernel's deadlock-freedom argument, played out: with CTAs dispatched in index
    # order, a split schedule finishes even when only a few CTAs fit on the GPU at once
    # (another kernel holding SMs), not only when all of them are resident
    ws = _random_split_schedule(seed, gen)
    for resident in (1, 2, 5, len(ws.ctas)):
        assert _runs_to_completion(ws, resident), (resident, ws.num_slots)


def _random_split_schedule(seed, gen):
    rng = random.Random(500 + seed)
    sizes = _benchmark_like(rng, rng.choice([1, 2, 8, 16]))
    return _units(sizes, gen, rng.choice([128, 256]), grid=rng.choice([132, 40, 11, 7]))[3]


@pytest.mark.parametrize("gen", [True, "balanced"])
def test_the_random_split_schedules_do_split(gen):
    # the completion test above means something only if its schedules hold split pieces
    assert sum(_random_split_schedule(seed, gen).num_slots > 0 for seed in range(10)) >= 5


def test_the_completion_check_catches_a_deadlock():
    # a FIXUP that waits for a PARTIAL placed after it on a higher CTA, with one CTA
    # resident at a time: the check must say no
    u = schedule.WorkUnit
    bad = schedule.WorkSchedule(
        cta_units=((u(0, 0, 0, 4, 8, schedule.UNIT_FIXUP, 0, 0),), (u(0, 0, 0, 0, 4, schedule.UNIT_PARTIAL, 0, -1),)),
        starts=((0,), (0,)), num_slots=1)
    assert not _runs_to_completion(bad, 1) and _runs_to_completion(bad, 2)


def test_int32_rows_matches_torch_tensor():
    """The schedule tables' packing (int32_rows) gives torch.tensor's int32 table, negative
    fields (a FIXUP's prev of -1) and work units included."""
    units = [schedule.WorkUnit(3, 1, 7, 0, 28), schedule.WorkUnit(0, 0, 2, 4, 9, 2, 0, 5)]
    assert torch.equal(binding.int32_rows(units), torch.tensor(units, dtype=torch.int32))
    ranges = [(0, 2, 2, 3), (5, 5, 6, 8)]
    assert torch.equal(binding.int32_rows(ranges), torch.tensor(ranges, dtype=torch.int32))
    assert binding.int32_rows([]).numel() == 0
