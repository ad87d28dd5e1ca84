"""Host-side math of the masked op's tile plan: the launch shape fixed by the buffers
(MaskedGrid: an upper bound of tiles, the persistent grid over it, the units table's rows
per CTA), and masked_tables, the plain-Python mirror of the device plan kernel
(sm90_masked.MaskedPlanKernel), which turns per-group token counts into the tables the
Hopper kernel walks.

The plan is the Hopper leaderboard path's whole-tile schedule (phased_tile_schedule, then
round_robin_units) made from counts that only the GPU knows:

  1. group g computes m_g = clamp(masked_m[g], 0, max_m) rows: ceil(m_g / tile_m) M tiles
     by ceil(N / tile_n) N tiles, its last M tile in the phase of the narrowest width
     that holds its rows (width_phase), the others in phase 0;
  2. an exclusive scan over the groups, per phase, gives each group's first row in its
     phase's runs (every group has the same K, so the runs are in group order), and the
     phases' sizes give each phase's first row of the whole schedule;
  3. schedule row i (a live tile) goes to CTA i % grid, at row (i % grid) * unit_stride
     + i // grid of the units table; CTA c's phase p starts at its first row i >= S_p,
     i.e. after ceil((S_p - c) / grid) of its rows.

A split-K config (MaskedGrid.split) may instead cut the live tiles' K-tiles into one
contiguous range per CTA (split_cuts), as the leaderboard path's k_range_units does with a
bisection on the host; on the GPU the cuts are the quantiles of the modeled time:

  4. the live tiles are laid out last phase first, each weighing a unit's cost and its
     K-tiles their phase's cost each; cut c (0 < c < grid) is the K-tile where the weight
     reaches c / grid of the total, moved to its tile's start or end where it would leave
     a piece of fewer than min_kt K-tiles;
  5. CTA c walks the tiles of [cut c, cut c + 1) backwards: its phases in the kernel's
     order, the head of the tile cut at its end first (a PARTIAL into workspace slot c),
     the tail of the tile cut at its start last (a FIXUP that adds slot c - 1). As in
     k_range_units, a FIXUP waits only for the first unit of the CTA below it.

The plan splits only where that is modeled faster than whole tiles and where each CTA's
share is longer than a tile, so that no tile is cut twice; otherwise it writes whole tiles.

Every size the launch depends on (grid, unit_stride, the tables' lengths) follows from
G, max_m, N and K alone, so a CUDA graph replays the plan and the GEMM for any counts.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from .common import ceil_div
from .schedule import (
    RANGE_FIELDS,
    UNIT_FIELDS,
    UNIT_FIXUP,
    UNIT_PARTIAL,
    UNIT_WHOLE,
    WorkSchedule,
    persistent_grid,
    width_phase,
)

# the plan kernel's block: one thread per group in its scan, so at most this many groups
MASKED_PLAN_THREADS = 1024
# the most CTAs a masked grid has: the plan keeps a cut per CTA in shared memory
MASKED_MAX_GRID = 1024


@dataclass(frozen=True)
class SplitCosts:
    """The split plan's cost model in integers (hundredths of a microsecond, from the
    config's sm90_cost_model): a K-tile of each phase, a unit, a split piece's fixup; and
    the fewest K-tiles a piece may have."""

    kt: tuple[int, ...]
    unit: int
    fixup: int
    min_kt: int = 2

    @classmethod
    def of(cls, kt_us, unit_us: float, fixup_us: float) -> SplitCosts:
        return cls(tuple(max(1, round(100 * x)) for x in kt_us), round(100 * unit_us), round(100 * fixup_us))


@dataclass(frozen=True)
class MaskedGrid:
    """The launch shape of a masked call: G groups of at most max_m rows, N x K, tiled
    tile_n weight rows by tile_m token rows (widths: the config's phase widths, widths[0]
    == tile_m), each tile k_tiles K-tiles deep; `grid` persistent CTAs over the upper bound
    of tiles (every group full), each with unit_stride rows of the units table."""

    groups: int
    max_m: int
    n: int
    k: int
    k_tiles: int
    tile_n: int
    widths: tuple[int, ...]
    grid: int
    unit_stride: int
    split: SplitCosts | None = None  # a split-K config's costs: the plan may cut tiles by K

    @property
    def slots(self) -> int:
        """Workspace slots (one per cut between two CTAs) of a split-K config, else 0."""
        return self.grid - 1 if self.split is not None else 0

    @property
    def tile_m(self) -> int:
        return self.widths[0]

    @property
    def m_tiles_bound(self) -> int:
        return ceil_div(self.max_m, self.tile_m)

    @property
    def n_tiles(self) -> int:
        return ceil_div(self.n, self.tile_n)

    @property
    def tiles_bound(self) -> int:
        """Tiles when every group has max_m rows: the plan kernel's loop bound."""
        return self.groups * self.m_tiles_bound * self.n_tiles


def masked_grid(groups: int, max_m: int, n: int, k: int, k_tile: int, tile_n: int,
                widths: Sequence[int], num_sms: int, split: SplitCosts | None = None) -> MaskedGrid:
    """The launch shape for these buffers on a GPU of num_sms SMs (one CTA an SM), for a
    kernel of k_tile-deep K-tiles (K a multiple of it); split: a split-K config's costs.
    A split CTA's share is at most a grid's share of every tile at the dearest phase plus
    the cuts' moves, which holds at most that over a tile at the cheapest phase, plus the
    two pieces at its ends."""
    bound = groups * ceil_div(max_m, widths[0]) * ceil_div(n, tile_n)
    grid = persistent_grid(bound, num_sms)
    assert grid <= MASKED_MAX_GRID, grid
    k_tiles = k // k_tile
    stride = max(1, ceil_div(bound, grid))
    if split is not None:
        assert len(split.kt) == len(widths), (split, widths)
        w_max, w_min = max(split.kt), min(split.kt)
        share = ceil_div(bound * (k_tiles * w_max + split.unit), grid) + 2 * split.min_kt * w_max
        stride = max(stride, ceil_div(share, k_tiles * w_min + split.unit) + 2)
    return MaskedGrid(groups, max_m, n, k, k_tiles, tile_n, tuple(widths), grid, stride, split)


def group_plan(m: int, tile_m: int, widths: Sequence[int]) -> tuple[int, int, int]:
    """(M tiles, those in phase 0, the phase of the last M tile) of a group of m rows: the
    full tiles are in phase 0, and so is the last one where no narrow width holds it."""
    m_tiles = ceil_div(m, tile_m)
    if not m_tiles:
        return 0, 0, 0
    last = width_phase(widths, m - (m_tiles - 1) * tile_m)
    return m_tiles, m_tiles if last == 0 else m_tiles - 1, last


def phase_counts(m: int, grid: MaskedGrid) -> list[int]:
    """Tiles group g (of m rows) has in each phase: its full-height tiles' columns in
    phase 0, its last, narrower M tile's in that tile's phase."""
    m_tiles, full, last = group_plan(m, grid.tile_m, grid.widths)
    counts = [0] * len(grid.widths)
    counts[0] = full * grid.n_tiles
    if m_tiles and last:
        counts[last] += grid.n_tiles
    return counts


def masked_rows(masked_m: Sequence[int], max_m: int) -> list[int]:
    """The rows each group computes: its count clamped to 0 .. max_m."""
    return [min(max(int(m), 0), max_m) for m in masked_m]


def hinted_rows(expected_m: int | None, max_m: int) -> int:
    """The rows a group is taken to have when choosing a config: the hint clamped to
    1 .. max_m, max_m without one."""
    return max_m if expected_m is None else min(max(int(expected_m), 1), max_m)


def split_cuts(totals: Sequence[int], grid: MaskedGrid) -> list[int] | None:
    """Step 4's cuts for phases of totals[p] live tiles: grid + 1 positions in K-tiles
    along the tiles laid out last phase first (cut 0 at 0, cut grid at the end); a tile of
    phase q weighs the unit's cost, at its start, and its K-tiles' at q's cost each. None
    where the plan writes whole tiles: no split costs, no live tile, a CTA's share not
    longer than a tile (plus a K-tile each side for the rounding), or no gain over the
    round robin's ceil(live / grid) tiles a CTA. Integer arithmetic, as the kernel's."""
    s, kts, ctas = grid.split, grid.k_tiles, grid.grid
    live = sum(totals)
    if s is None or live == 0:
        return None
    tile_w = [kts * w + s.unit for w in s.kt]
    total = sum(t * w for t, w in zip(totals, tile_w))
    share = total // ctas
    whole = ceil_div(live, ctas) * tile_w[0]
    if share < max(tile_w) + 2 * max(s.kt) or share + s.unit + 2 * s.fixup >= whole:
        return None
    cuts = [0]
    for c in range(1, ctas):
        target, pos = c * total // ctas, 0
        for q in reversed(range(len(totals))):  # the phase blocks in layout order
            block = totals[q] * tile_w[q]
            if target < block:
                t, rest = divmod(target, tile_w[q])
                pos += t * kts + max(rest - s.unit, 0) // s.kt[q]
                break
            target -= block
            pos += totals[q] * kts
        j, kt = divmod(pos, kts)
        if kt < s.min_kt:
            pos = j * kts
        elif kt > kts - s.min_kt:
            pos = (j + 1) * kts
        cuts.append(pos)
    cuts.append(live * kts)
    return cuts


def masked_tables(masked_m: Sequence[int], grid: MaskedGrid):
    """(sizes, ranges, units) as the plan kernel writes them: sizes[g] = (m_g, N, K, 1)
    rows; ranges[c] = CTA c's phase starts and end (absolute rows of the units table, zero
    past the config's phases); units: {row: unit fields}, only the rows the plan writes
    (the others keep whatever they held and are never walked)."""
    rows = masked_rows(masked_m, grid.max_m)
    counts = [phase_counts(m, grid) for m in rows]
    phases = len(grid.widths)
    # step 2: per phase, every group's first row among the phase's, and the phases' starts
    offsets, totals = [], [0] * phases
    for c in counts:
        offsets.append(list(totals))
        totals = [t + x for t, x in zip(totals, c)]
    starts = [sum(totals[:p]) for p in range(phases)]
    live = sum(totals)
    cuts = split_cuts(totals, grid)
    # step 4's layout: phase q's tiles start at tile layout[q], the later phases first
    layout = [sum(totals[q + 1:]) for q in range(phases)]
    kts, stride = grid.k_tiles, grid.unit_stride
    units = {}
    for g, m in enumerate(rows):
        m_tiles, full, last = group_plan(m, grid.tile_m, grid.widths)
        # the upper bound's tiles of the group, as the kernel's threads take them
        for r in range(grid.m_tiles_bound * grid.n_tiles):
            tn, tm = divmod(r, grid.m_tiles_bound)
            if tm >= m_tiles:
                continue
            if tm < full:
                p, j = 0, tn * full + tm
            else:
                p, j = last, tn
            i = starts[p] + offsets[g][p] + j
            if cuts is None:
                units[(i % grid.grid) * stride + i // grid.grid] = (g, tm, tn, 0, kts, UNIT_WHOLE, 0, -1)
                continue
            # step 5: the CTA whose range holds the tile's first K-tile, and the next one
            # where the tile is cut
            t = layout[p] + i - starts[p]
            c = bisect.bisect_right(cuts, t * kts, 0, grid.grid) - 1
            end = cuts[c + 1]
            kt1 = min(end - t * kts, kts)
            if kt1 == kts:
                units[c * stride + (end - 1) // kts - t] = (g, tm, tn, 0, kts, UNIT_WHOLE, 0, -1)
            else:
                units[c * stride + (end - 1) // kts - t] = (g, tm, tn, 0, kt1, UNIT_PARTIAL, c, -1)
                units[(c + 1) * stride + (cuts[c + 2] - 1) // kts - t] = (g, tm, tn, kt1, kts, UNIT_FIXUP, 0, c)
    ranges = []
    for c in range(grid.grid):
        base = c * stride
        if cuts is None:
            row = [base + (s - c + grid.grid - 1) // grid.grid for s in starts]
            row.append(base + (live - c + grid.grid - 1) // grid.grid)
        else:
            lo, hi = cuts[c], cuts[c + 1]
            first, last_tile = lo // kts, (hi - 1) // kts
            count = last_tile - first + 1 if hi > lo else 0
            # phase p starts after the CTA's tiles of the earlier phases, the layout's last
            row = [base + (min(max(last_tile - max(first, layout[p - 1]) + 1, 0), count) if p else 0)
                   for p in range(phases)]
            row.append(base + count)
        ranges.append(tuple(row + [0] * (RANGE_FIELDS - len(row))))
    sizes = [(m, grid.n, grid.k, 1) for m in rows]
    assert all(len(u) == UNIT_FIELDS for u in units.values())
    return sizes, ranges, units


def walked_units(ranges, units, grid: MaskedGrid):
    """Per CTA, (its units in the order it walks them, its phase starts relative to its
    first row): the plan's tables read back as WorkSchedule's cta_units and starts."""
    phases = len(grid.widths)
    ctas, starts = [], []
    for r in ranges:
        ctas.append(tuple(units[i] for i in range(r[0], r[phases])))
        starts.append(tuple(s - r[0] for s in r[:phases]))
    return tuple(ctas), tuple(starts)


def masked_schedule(masked_m: Sequence[int], grid: MaskedGrid) -> WorkSchedule:
    """The plan's tables for these counts read back as a WorkSchedule (each CTA's units in
    the order it walks them, its phase starts): what schedule.modeled_cta_us costs."""
    _, ranges, units = masked_tables(masked_m, grid)
    ctas, starts = walked_units(ranges, units, grid)
    return WorkSchedule(ctas, starts, grid.slots)


# ----------------------------------------------------------------- the Blackwell kernel's
# The sm_100a GEMM walks one flat schedule (group, tile along M, tile along N), cluster c
# taking rows c, c + clusters, ...: the leaderboard path's sm100_tile_order, i.e.
# columns_together(build_tile_schedule(...)). With every group's K and N the same, that
# order is
#   A. the groups with a full-height M tile, in group order, each column by column with
#      all of the column's M tiles (its shorter last one included) together;
#   B. then the groups of one shorter tile (0 < m < tile_m), by rows descending, ties in
#      group order, each column by column.
# The plan writes those rows and, at row `bound` (the upper bound of tiles), their count.


def sm100_masked_bound(groups: int, max_m: int, n: int, tile_m: int, tile_n: int) -> int:
    """Schedule rows when every group has max_m rows: the plan kernel's loop bound and the
    table's length less its count row."""
    return groups * ceil_div(max_m, tile_m) * ceil_div(n, tile_n)


def sm100_group_place(rows: Sequence[int], tile_m: int) -> tuple[list[int], list[int], int]:
    """(each group's first schedule row in section A or -1, each section-B group's rank by
    (rows descending, group) or -1, the count of section A's groups' M tiles per column):
    step 2 of the plan, for rows already clamped."""
    offsets, rank, a_tiles = [], [], 0
    for m in rows:
        tiles = ceil_div(m, tile_m)
        offsets.append(a_tiles if m >= tile_m else -1)
        a_tiles += tiles if m >= tile_m else 0
    for g, m in enumerate(rows):
        short = 0 < m < tile_m
        rank.append(sum(1 for h, x in enumerate(rows) if 0 < x < tile_m and (x > m or (x == m and h < g)))
                    if short else -1)
    return offsets, rank, a_tiles


def sm100_masked_schedule(masked_m: Sequence[int], max_m: int, n: int, tile_m: int,
                          tile_n: int) -> tuple[list[tuple[int, int, int]], int]:
    """(the schedule rows the plan writes, their count) for these counts: the mirror of
    sm100_masked.MaskedSm100PlanKernel, row i at index i."""
    rows = masked_rows(masked_m, max_m)
    n_tiles = ceil_div(n, tile_n)
    offsets, rank, a_tiles = sm100_group_place(rows, tile_m)
    a_rows = a_tiles * n_tiles
    placed = {}
    m_bound = ceil_div(max_m, tile_m)
    for g, m in enumerate(rows):
        m_tiles = ceil_div(m, tile_m)
        for r in range(m_bound * n_tiles):  # the upper bound's tiles, as the kernel's threads take them
            tn, tm = divmod(r, m_bound)
            if tm >= m_tiles:
                continue
            if offsets[g] >= 0:
                i = offsets[g] * n_tiles + tn * m_tiles + tm
            else:
                i = a_rows + rank[g] * n_tiles + tn
            placed[i] = (g, tm, tn)
    count = len(placed)
    assert sorted(placed) == list(range(count))
    return [placed[i] for i in range(count)], count
