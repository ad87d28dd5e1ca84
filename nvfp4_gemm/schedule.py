"""Host-side math of the static schedule: tile counts, the whole-tile order, token-width
phases, and the per-CTA work units of a persistent kernel (whole tiles, or split-K pieces:
round_robin_units, k_range_units, balanced_units), with the modeled time of each CTA."""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from .common import ceil_div


def tiles_per_group(sizes: Sequence[Sequence[int]], tile_m: int, tile_n: int) -> list[int]:
    """Output tiles of each group for a tile_m x tile_n tile (0 for an empty group)."""
    return [ceil_div(m, tile_m) * ceil_div(n, tile_n) for m, n, _, _ in sizes]


def tile_runs(
    sizes: Sequence[Sequence[int]], tile_m: int, tile_n: int
) -> list[tuple[int, list[tuple[int, int, int]]]]:
    """build_tile_schedule's order as runs of one group's tiles that use the same token
    rows: [(rows used, [(group, tm, tn), ...])]. A group has at most two runs, its
    full-height tiles and its last, shorter M tiles; with K > 0 the two have distinct sort
    keys (K x rows), so a stable sort of the tiles by key moves whole runs, and sorting the
    runs by (-key, group) gives the same order in O(groups log groups) plus the tiles."""
    runs = []
    for g, (m, n, k, _) in enumerate(sizes):
        m_tiles, n_tiles = ceil_div(m, tile_m), ceil_div(n, tile_n)
        if not m_tiles or not n_tiles:
            continue
        last = m - (m_tiles - 1) * tile_m
        full = m_tiles if last == tile_m else m_tiles - 1
        if full:
            tiles = [(g, tm, tn) for tn in range(n_tiles) for tm in range(full)]
            runs.append((-k * tile_m, g, 0, tile_m, tiles))
        if last != tile_m:
            runs.append((-k * last, g, 1, last, [(g, m_tiles - 1, tn) for tn in range(n_tiles)]))
    runs.sort(key=lambda r: r[:3])
    return [(rows, tiles) for _, _, _, rows, tiles in runs]


def build_tile_schedule(
    sizes: Sequence[Sequence[int]], tile_m: int, tile_n: int
) -> list[tuple[int, int, int]]:
    """The static persistent schedule: (group, tile index along M, tile index along N).

    Tiles are issued longest first (descending K x rows used, i.e. descending M for equal
    K; ties keep group order), so that the persistent CTAs' last wave holds the cheapest
    tiles. Within a group the M tiles of one N column are adjacent, so CTAs running
    together share B rows in L2. CTA i of a grid of P takes entries i, i + P, i + 2P, ...
    (Built from tile_runs.)
    """
    return [t for _, tiles in tile_runs(sizes, tile_m, tile_n) for t in tiles]


def columns_together(rows: Sequence[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """rows with each weight column's M tiles (same group and N tile) moved up to the
    column's first tile, the columns in the order of their first tiles.

    For a kernel whose tile costs what a full one costs whatever token rows it uses (the
    Blackwell MMA runs its whole token width), build_tile_schedule's separate run of a
    group's last, shorter M tiles buys no balance and costs the column's weights a second
    read from DRAM: that run starts a wave or more later, after more DRAM traffic than L2
    holds. Kept adjacent, the column's tiles run on neighbouring clusters at once and read
    the weights once (python tools/call_model.py --changes: 34 MB fewer on shape 0)."""
    columns: dict[tuple[int, int], list] = {}
    for g, tm, tn in rows:
        columns.setdefault((g, tn), []).append((g, tm, tn))
    return [t for tiles in columns.values() for t in tiles]


def width_phase(widths: Sequence[int], used: int) -> int:
    """The phase of a tile that uses `used` token rows: the narrowest width that holds them
    (widths descending, widths[0] the tile's height)."""
    return max(i for i, w in enumerate(widths) if w >= used)


def split_tiles_by_width(
    rows: Sequence[tuple[int, int, int]], sizes: Sequence[Sequence[int]], widths: Sequence[int]
) -> tuple[list[tuple[int, int, int]], tuple[int, ...]]:
    """(schedule, tiles per phase): the tiles grouped into phases by the token rows they use.
    widths[0] is the tile's height and the later widths narrower, descending; a tile goes to
    the phase of the narrowest width that holds its used rows (the last M tile of a group,
    or a whole small group, can be narrow). Each phase keeps the schedule's order; a kernel
    may run each phase with an MMA of that width. With CTA i taking entries i, i + P, ... of
    the concatenation, each phase continues the previous one's round robin."""
    phases = [[] for _ in widths]
    for g, tm, tn in rows:
        phases[width_phase(widths, min(widths[0], sizes[g][0] - tm * widths[0]))].append((g, tm, tn))
    return [r for ph in phases for r in ph], tuple(len(ph) for ph in phases)


def phased_tile_runs(
    sizes: Sequence[Sequence[int]], tile_n: int, widths: Sequence[int]
) -> list[list[list[tuple[int, int, int]]]]:
    """Per phase (split_tiles_by_width's, at tile_m = widths[0]), its runs of tiles in
    schedule order: one run per group that has tiles in the phase, its tiles N column by N
    column with a column's M tiles adjacent (CTAs running together share the column's
    weight rows in L2); the runs by descending K, ties in group order.

    A tile's cost in a phase is its K-tiles at the phase's cost per K-tile: the wgmma runs
    at the phase's width and every token row of the tile is decoded whatever M is, so the
    rows a tile uses play no part in the order. The schedule thus depends on M only through
    each group's tile count and its last tile's phase (size_class)."""
    tile_m = widths[0]
    phases = [[] for _ in widths]
    for g, (m, n, k, _) in enumerate(sizes):
        m_tiles, n_tiles = ceil_div(m, tile_m), ceil_div(n, tile_n)
        if not m_tiles or not n_tiles:
            continue
        last = width_phase(widths, m - (m_tiles - 1) * tile_m)
        full = m_tiles if last == 0 else m_tiles - 1
        if full:
            phases[0].append((-k, g, [(g, tm, tn) for tn in range(n_tiles) for tm in range(full)]))
        if last:
            phases[last].append((-k, g, [(g, m_tiles - 1, tn) for tn in range(n_tiles)]))
    return [[tiles for _, _, tiles in sorted(ph, key=lambda run: run[:2])] for ph in phases]


def phased_tile_schedule(
    sizes: Sequence[Sequence[int]], tile_n: int, widths: Sequence[int]
) -> tuple[list[tuple[int, int, int]], tuple[int, ...]]:
    """(schedule, tiles per phase): phased_tile_runs concatenated, phase 0 first. With CTA i
    taking entries i, i + P, ... each phase continues the previous one's round robin. The
    config choice builds this for every candidate of a new problem."""
    phases = phased_tile_runs(sizes, tile_n, widths)
    return ([t for ph in phases for tiles in ph for t in tiles],
            tuple(sum(map(len, ph)) for ph in phases))


def size_class(sizes: Sequence[Sequence[int]], quantum: int) -> tuple[tuple[int, int, int, int], ...]:
    """sizes with every M rounded up to a multiple of `quantum`. Where every tile height and
    phase width a kernel offers is a multiple of quantum, a group's tile count and its last
    tile's phase are the same at M and at the rounded M, so both sizes get the same phased
    schedule and the same modeled costs: a config choice and schedule made for the class
    serve every member (GroupedGemmRunner.plan). A decode step's 1-8 tokens per group are
    one class at quantum 16."""
    return tuple((-(-m // quantum) * quantum, n, k, l) for m, n, k, l in sizes)


def phase_of_rows(phase_sizes: Sequence[int]) -> list[int]:
    """The phase of each schedule row, from split_tiles_by_width's tiles per phase."""
    return [p for p, n in enumerate(phase_sizes) for _ in range(n)]


# Work units: the per-CTA lists a persistent kernel walks (whole tiles, or split-K pieces)
UNIT_WHOLE = 0  # all of a tile's K-tiles: store C
UNIT_PARTIAL = 1  # the first K range of a tile split in two: fp32 sums -> its workspace slot
UNIT_FIXUP = 2  # the rest of the tile: + the PARTIAL's slot -> C
UNIT_FIELDS = 8
MAX_PHASES = 3  # token widths a kernel runs one after the other (split_tiles_by_width)
RANGE_FIELDS = MAX_PHASES + 1  # a CTA's phase starts and end in WorkSchedule.tables


class WorkUnit(NamedTuple):
    """One unit of a CTA's list, as tests and tools read it. The schedule generators build
    the same fields as plain tuples (WorkSchedule.cta_units): CPython's garbage collector
    stops tracking a tuple of ints after its first collection, never a NamedTuple, and a
    cached schedule holds hundreds of units. Tracked objects that live on in caches count
    towards the next full collection, which walks every object of the process (about 0.2 s
    for a bare torch process on a 2-core CPU): a few hundred per new problem size cost
    milliseconds per call on average (measured: python tools/probes/host_overhead.py --new-sizes)."""

    group: int
    tm: int  # tile index along M
    tn: int  # tile index along N
    kt0: int  # K-tiles [kt0, kt1) of the tile
    kt1: int
    role: int = UNIT_WHOLE
    slot: int = 0  # PARTIAL: the workspace slot (and arrival flag) it writes
    prev: int = -1  # FIXUP: the slot it waits for and adds (-1: none)


@dataclass(frozen=True)
class WorkSchedule:
    """Per CTA, its units in processing order, phase by phase (split_tiles_by_width: full
    tiles first, then each narrower width); `starts[c][p]` is CTA c's first unit of phase
    p, and len(cta_units[c]) its end."""

    cta_units: tuple[tuple[tuple[int, ...], ...], ...]  # WorkUnit's fields, as plain tuples
    starts: tuple[tuple[int, ...], ...]
    num_slots: int  # workspace slots of partial sums, one per PARTIAL (0: nothing is split)

    @property
    def ctas(self) -> tuple[tuple[WorkUnit, ...], ...]:
        """cta_units as WorkUnits, made on each access (for tests and tools)."""
        return tuple(tuple(map(WorkUnit._make, cta)) for cta in self.cta_units)

    def phases(self, c: int) -> list[int]:
        """The phase of each of CTA c's units."""
        bounds = self.starts[c] + (len(self.cta_units[c]),)
        return [p for p in range(len(bounds) - 1) for _ in range(bounds[p], bounds[p + 1])]

    @property
    def unit_stride(self) -> int:
        """Units table rows per CTA: CTA c's units start at row c * unit_stride, so that a
        kernel can fetch its first unit before it has read its ranges row."""
        return max(1, max(map(len, self.cta_units), default=0))

    def tables(self) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
        """(ranges, units): CTA c walks units[r[p]:r[p + 1]] in phase p = 0, 1, .. of
        r = ranges[c] = (phase starts .., end), padded with zeros to RANGE_FIELDS. CTA c's
        units begin at row c * unit_stride; the rows after its last are zeros, never walked."""
        ranges, units = [], []
        pad = (0,) * UNIT_FIELDS
        stride = self.unit_stride  # a max over the CTAs: once, not per CTA
        for c, (cta, starts) in enumerate(zip(self.cta_units, self.starts)):
            base = c * stride
            row = tuple(base + s for s in starts) + (base + len(cta),)
            ranges.append(row + (0,) * (RANGE_FIELDS - len(row)))
            units.extend(cta)
            units.extend([pad] * (stride - len(cta)))
        return ranges, units


def _phase_starts(phases: Sequence[int], num_phases: int) -> tuple[int, ...]:
    """Where each phase begins in a CTA's units, given their phases (ascending)."""
    return tuple(bisect.bisect_left(phases, p) for p in range(num_phases))


def round_robin_units(
    rows: Sequence[tuple[int, int, int]], phase_sizes: Sequence[int], k_tiles: Sequence[int], grid: int
) -> WorkSchedule:
    """Whole tiles, schedule row i on CTA i % grid (the phases continue one round robin).
    k_tiles[g]: K-tiles of group g."""
    units = [(g, tm, tn, 0, k_tiles[g], UNIT_WHOLE, 0, -1) for g, tm, tn in rows]
    phase = phase_of_rows(phase_sizes)
    ctas = tuple(tuple(units[c::grid]) for c in range(grid))
    starts = tuple(_phase_starts(phase[c::grid], len(phase_sizes)) for c in range(grid))
    return WorkSchedule(ctas, starts, 0)


def _fill_k_ranges(items, budget: float, max_ctas: int, unit_us: float, fixup_us: float, min_kt: int):
    """Greedy fill of CTAs, in order, with the items (K-tiles, us per K-tile, the whole
    tile's cost) until each CTA's modeled time reaches `budget`. A piece costs its K-tiles,
    plus unit_us, plus fixup_us where the tile is split (storing or adding the partial
    sums). A tile is split at most once, into a head that ends a CTA and a tail that starts
    the next, each of at least min_kt K-tiles. Returns each CTA's share of the items as
    (first item, its first K-tile, end item, its end K-tile), the end exclusive, or None if
    more than max_ctas CTAs, or a piece longer than the budget, would be needed. The
    bisection calls this some 14 times per schedule, so a tile that fits whole (the common
    case, the loop's first test) allocates nothing."""
    ctas = []
    first, first_kt, load, empty = 0, 0, 0.0, True
    for j, (kts, per_kt, whole) in enumerate(items):
        if load + whole <= budget:
            load += whole
            empty = False
            continue
        kt = 0
        while True:
            # (conditionals, not min / max: this runs once per CTA per fill)
            head = int((budget - load - unit_us - fixup_us) // per_kt)
            if head > kts - min_kt:
                head = kts - min_kt
            min_head = kts - int((budget - unit_us - fixup_us) // per_kt)  # the tail fits a CTA
            if head >= (min_head if min_head > min_kt else min_kt):
                kt = head  # this CTA ends with the tile's first K-tiles
            elif empty:
                return None
            ctas.append((first, first_kt, j, kt))
            if len(ctas) == max_ctas:
                return None
            tail = (kts - kt) * per_kt + unit_us + (fixup_us if kt else 0.0)
            if tail <= budget:
                first, first_kt, load, empty = j, kt, tail, False
                break
            if kt:  # a tail that does not fit even a fresh CTA
                return None
            first, first_kt, load, empty = j, 0, 0.0, True
    if not empty:
        ctas.append((first, first_kt, len(items), 0))
    return ctas


# Relative precision of the split generators' bisections (k_range_units' budget,
# balanced_units' makespan): 1e-4 is 0.01 us on a 100 us problem, far finer than the cost
# model. Each halving is a greedy fill in Python over every tile, the bulk of the
# host's cost for problem sizes it has not seen; 1e-4 needs ~13 where 1e-7 needed ~24.
# Against 1e-7: the benchmark shapes' schedules are the same; 65 of the 348 cases of
# tools/probes/schedule_equivalence.py differ, with makespans at most 8.4e-5 longer.
SPLIT_REL_TOL = 1e-4


def _k_range_items(rows, phase_sizes, k_tiles, kt_us, unit_us):
    """(phase of each row, the rows in fill order, their K-tiles, the fill's items): the
    work laid out last phase first, each phase in schedule order."""
    phase = phase_of_rows(phase_sizes)
    order = sorted(range(len(rows)), key=lambda i: -phase[i])  # stable: each phase in order
    kts = [k_tiles[rows[i][0]] for i in order]
    items = [(k, kt_us[phase[i]], k * kt_us[phase[i]] + unit_us) for i, k in zip(order, kts)]
    return phase, order, kts, items


def k_range_fits(budget: float, rows, phase_sizes, k_tiles, grid, kt_us, unit_us, fixup_us,
                  min_kt: int = 2) -> bool:
    """Whether k_range_units' greedy fill (its arguments follow budget) fits `budget`;
    when it does not, that schedule's slowest CTA takes longer than `budget`. Why: the
    schedule is the fill at a budget H where it fits, and its slowest CTA L is at most H.
    The fill makes the same decisions at every budget in [L, H], so it fits at L, and
    where it fits at a budget it fits at every larger one (as the bisection assumes). So
    budget < L. The config choice rules out a split candidate by one fill this way,
    without building its schedule."""
    items = _k_range_items(rows, phase_sizes, k_tiles, kt_us, unit_us)[3]
    return _fill_k_ranges(items, budget, grid, unit_us, fixup_us, min_kt) is not None


def k_range_units(
    rows: Sequence[tuple[int, int, int]],
    phase_sizes: Sequence[int],
    k_tiles: Sequence[int],
    grid: int,
    kt_us: Sequence[float],
    unit_us: float,
    fixup_us: float,
    min_kt: int = 2,
) -> WorkSchedule:
    """K-range: the schedule's K-tiles cut into at most `grid` contiguous ranges of equal
    modeled time (kt_us[p]: us per K-tile in phase p), a tile split at most once, where a
    CTA's share ends.

    The work is laid out last phase first, so that each CTA's range, walked backwards,
    holds its pieces phase by phase in the kernel's order. A split tile's pieces lie on
    consecutive CTAs: the head (a PARTIAL: its fp32 sums to a workspace slot, then the
    slot's flag) ends one CTA's range, the tail (the FIXUP: waits for the flag, adds the
    slot, stores C) starts the next one's. Walked backwards, a CTA's range starts with its
    PARTIAL and ends with its FIXUP. So a FIXUP waits only for the CTA below it, and only
    for the first thing that CTA does: no cycle, and no wait on a CTA that is not yet
    resident when CTAs are dispatched in index order. The sum is always tail + head: the
    result does not depend on timing.
    """
    phase, order, kts, items = _k_range_items(rows, phase_sizes, k_tiles, kt_us, unit_us)
    total = sum(k * c + unit_us for k, c, _ in items)
    # the lowest budget that fits in `grid` CTAs, by bisection; it lies within one piece of
    # the mean, so the search starts there when that fits (else from the whole), and it
    # stops once the budget is known to SPLIT_REL_TOL
    lo = total / grid
    hi = lo + max(k * c for k, c, _ in items) + unit_us + fixup_us
    best = _fill_k_ranges(items, hi, grid, unit_us, fixup_us, min_kt)
    if best is None:
        hi = total + unit_us + fixup_us
        best = _fill_k_ranges(items, hi, grid, unit_us, fixup_us, min_kt)
    for _ in range(40):
        if hi - lo <= SPLIT_REL_TOL * hi:
            break
        mid = (lo + hi) / 2
        filled = _fill_k_ranges(items, mid, grid, unit_us, fixup_us, min_kt)
        if filled is None:
            lo = mid
        else:
            hi, best = mid, filled
    # a split tile's head ends CTA c and its tail starts CTA c + 1; one workspace slot per
    # split tile, numbered in schedule row order
    heads = sorted((order[j], c) for c, (_, _, j, kt) in enumerate(best) if kt)
    slot_of = {c: slot for slot, (_, c) in enumerate(heads)}  # the CTA holding each head
    ctas, starts = [], []
    for c, (j0, kt0, j1, kt1) in enumerate(best):
        units, phases = [], []
        for j in range(min(j1, len(items) - 1), j0 - 1, -1):  # the range walked backwards
            lo_kt, hi_kt = kt0 if j == j0 else 0, kt1 if j == j1 else kts[j]
            if hi_kt == lo_kt:
                continue  # the range ends at this tile's start
            if j == j1:
                role = (UNIT_PARTIAL, slot_of[c], -1)
            elif j == j0 and kt0:
                role = (UNIT_FIXUP, 0, slot_of[c - 1])
            else:
                role = (UNIT_WHOLE, 0, -1)
            units.append((*rows[order[j]], lo_kt, hi_kt, *role))
            phases.append(phase[order[j]])
        ctas.append(tuple(units))
        starts.append(_phase_starts(phases, len(phase_sizes)))
    return WorkSchedule(tuple(ctas), tuple(starts), len(heads))


def balanced_units(
    rows: Sequence[tuple[int, int, int]],
    phase_sizes: Sequence[int],
    k_tiles: Sequence[int],
    grid: int,
    kt_us: Sequence[float],
    unit_us: float,
    fixup_us: float,
    min_kt: int = 2,
) -> WorkSchedule:
    """Whole tiles longest first onto the least loaded CTA (LPT), then split pieces that
    bring every CTA under the lowest modeled makespan T found by bisection: a CTA above T
    gives the first K-tiles of its longest whole tiles, just enough of them, as PARTIALs
    to CTAs that stay under T (the fullest that fits: the idle ones are kept for the big
    heads), keeping the rest as the FIXUP. Unlike k_range_units, only the tiles that make
    a CTA long are split (once each), not one tile at every CTA boundary.

    Deadlock freedom: the givers and the takers are disjoint and the takers come first in
    CTA order. A taker holds no FIXUP, so it waits for nothing; a FIXUP waits only for a
    lower CTA's PARTIAL, as in k_range_units. Within each phase a CTA runs its PARTIALs
    first and its FIXUPs last, so that a PARTIAL is done early and a FIXUP seldom waits."""
    phase = phase_of_rows(phase_sizes)
    cost = [k_tiles[g] * kt_us[phase[i]] + unit_us for i, (g, _, _) in enumerate(rows)]
    lpt: list[list[list[int]]] = [[] for _ in range(grid)]  # [row, kt0, kt1, role, slot]
    lpt_load = [0.0] * grid
    least = [(0.0, c) for c in range(grid)]  # (load, CTA): the least loaded, lowest index first
    for i in sorted(range(len(rows)), key=lambda i: -cost[i]):
        _, c = heapq.heappop(least)
        lpt[c].append([i, 0, k_tiles[rows[i][0]], UNIT_WHOLE, 0])
        lpt_load[c] += cost[i]
        heapq.heappush(least, (lpt_load[c], c))

    # what every split_under call starts from, sorted once: the CTAs that may take a head,
    # by (load, -index) (the last one at most `room` is the fullest that fits, the lowest
    # index among equals); the CTAs from the most loaded; each CTA's tiles longest first
    lpt_open = sorted((lpt_load[t], -t) for t in range(grid))
    lpt_by_load = sorted(range(grid), key=lambda c: (-lpt_load[c], c))
    lpt_longest = [sorted(range(len(cta)), key=lambda j: -cost[cta[j][0]]) for cta in lpt]

    def split_under(target):
        """The LPT pieces with every CTA brought under `target`, or None."""
        pieces = [[list(p) for p in cta] for cta in lpt]
        load = list(lpt_load)
        takers: set[int] = set()
        givers: set[int] = set()
        open_ = list(lpt_open)
        splits = 0
        for c in lpt_by_load:
            if load[c] <= target:
                break
            if c in takers:
                return None
            for tile in [pieces[c][j] for j in lpt_longest[c]]:  # all whole: c took no head
                if load[c] <= target:
                    break
                per = kt_us[phase[tile[0]]]
                head = max(min_kt, math.ceil((load[c] + fixup_us - target) / per - 1e-9))
                if head > tile[2] - min_kt:
                    continue
                room = target - head * per - unit_us - fixup_us
                # c itself never fits (its load is above target > room); givers are out of open_
                j = bisect.bisect_right(open_, (room, math.inf)) - 1
                if j < 0:
                    continue
                t = -open_.pop(j)[1]
                if c not in givers:
                    del open_[bisect.bisect_left(open_, (load[c], -c))]
                tile[1], tile[3], tile[4] = head, UNIT_FIXUP, splits
                pieces[t].append([tile[0], 0, head, UNIT_PARTIAL, splits])
                splits += 1
                load[c] += fixup_us - head * per
                load[t] += head * per + unit_us + fixup_us
                bisect.insort(open_, (load[t], -t))
                givers.add(c)
                takers.add(t)
            if load[c] > target:
                return None
        return pieces, givers, takers

    best = (lpt, set(), set())
    lo, hi = sum(lpt_load) / grid, max(lpt_load)
    for _ in range(24):
        if hi - lo <= SPLIT_REL_TOL * hi:
            break
        mid = (lo + hi) / 2
        found = split_under(mid)
        if found is None:
            lo = mid
        else:
            hi, best = mid, found
    pieces, givers, takers = best
    num_slots = sum(1 for cta in pieces for p in cta if p[3] == UNIT_PARTIAL)
    order = sorted(range(grid), key=lambda c: (c not in takers, c in givers, c))
    rank = {UNIT_PARTIAL: 0, UNIT_WHOLE: 1, UNIT_FIXUP: 2}
    ctas, starts = [], []
    for c in order:
        if not pieces[c]:
            continue
        units = sorted(pieces[c], key=lambda p: (phase[p[0]], rank[p[3]]))
        ctas.append(tuple(
            (*rows[i], kt0, kt1, role, slot if role == UNIT_PARTIAL else 0,
             slot if role == UNIT_FIXUP else -1)
            for i, kt0, kt1, role, slot in units
        ))
        starts.append(_phase_starts([phase[p[0]] for p in units], len(phase_sizes)))
    return WorkSchedule(tuple(ctas), tuple(starts), num_slots)


def modeled_cta_us(ws: WorkSchedule, kt_us: Sequence[float], unit_us: float,
                   fixup_us: float) -> list[float]:
    """Each CTA's modeled time under the same accounting as k_range_units."""
    loads = []
    for c, cta in enumerate(ws.cta_units):
        t = 0.0
        for (_, _, _, kt0, kt1, role, _, _), p in zip(cta, ws.phases(c)):
            t += (kt1 - kt0) * kt_us[p] + unit_us
            if role != UNIT_WHOLE:
                t += fixup_us
        loads.append(t)
    return loads


def persistent_grid(num_tiles: int, num_sms: int, ctas_per_tile: int = 1, ctas_per_sm: int = 1) -> int:
    """CTAs of the persistent launch: as many as can be resident at once (ctas_per_sm per
    SM), never more than the tiles need, a whole number of CTA clusters of ctas_per_tile."""
    resident = (num_sms * ctas_per_sm // ctas_per_tile) * ctas_per_tile
    return max(min(num_tiles * ctas_per_tile, resident), ctas_per_tile)
