#!POPCORN leaderboard nvfp4_group_gemm
#!POPCORN gpu B200
"""NVFP4 block-scaled grouped GEMM for GPU MODE's `nvfp4_group_gemm` (one file, drop-in).

Contract (per group g, L == 1):
    c[m, n] = fp16( sum_k  a[m, k] * sfa[m, k // 16]  *  b[n, k] * sfb[n, k // 16] )
with a: [M, K/2, 1] and b: [N, K/2, 1] E2M1 (two per byte, low nibble first, K-major),
sfa / sfb: E4M3 scales, one per 16 K values, read from the blocked ("reordered") tensors
(32, 4, ceil(MN/128), 4, ceil(K/64), 1) on the GPU, c: [M, N, 1] fp16, written in place.
Products are accumulated in fp32 and rounded once to fp16.

Paths, chosen at the first call for each device (never at import):
    sm_100 (B200)  -> Sm100BlockScaledGroupedGemm: tcgen05 kind::mxf4nvf4 block-scaled MMA
    sm_90 (H100/H200) -> Sm90Fp4GroupedGemm: wgmma with the FP4 decode fused into the main loop
    anything else  -> run_torch_fallback: decode (Fp4RowDecoder, or torch ops) + cuBLAS fp16
                      GEMM with fp32 sums on other CUDA GPUs (run_torch_fp16), decode + fp32
                      matmul elsewhere (run_torch_exact); both within the leaderboard's
                      tolerance
`NVFP4_GEMM_PATH=auto|sm100|sm90|torch` forces a path. A shape outside a kernel's
`can_implement`, a missing CuTe DSL or a failed compile falls back to the torch path with
one warning naming the reason. The Blackwell kernel's first launch per config and problem
size is checked against the exact path (a mismatch retires the config, with a warning);
`NVFP4_GEMM_SELF_CHECK=1|0` turns that check on for every kernel, or off.

Layout of this file:
    1. Inputs: validation (validate_inputs -> GroupedProblem)
    2. Host-side math: tile counts, the static tile schedule, per-CTA work units (K-range)
    3. Torch paths (run_torch_exact, run_torch_fp16, run_torch_fallback)
    4. Caches (LruCache)
    5. Kernel runner: the host wrapper both kernels share (GroupedGemmRunner)
    6. CuTe DSL launch glue (pointers, bound launches, launch errors)
    7. Blackwell kernel (Sm100BlockScaledGroupedGemm, Sm100Config)
    8. Hopper kernel (Sm90Fp4GroupedGemm, Sm90Config)
    8b. FP4 decode kernel of the CUDA fallback (Fp4RowDecoder), any GPU the DSL targets
    9. Dispatch (custom_kernel)
"""

from __future__ import annotations

import bisect
import ctypes
import dataclasses
import enum
import functools
import heapq
import math
import operator
import os
import struct
import threading
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, NamedTuple

import torch


class _MissingDsl:
    """Stands in for the CuTe DSL's modules when nvidia-cutlass-dsl is not installed, so
    that this file still imports and the exact torch path still runs. Decorators return
    the function unchanged; any other use yields another stand-in (kernels never run)."""

    def __getattr__(self, name):
        return self

    def __getitem__(self, item):
        return self

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return self


try:
    import cutlass
    import cutlass.cute as cute
    import cutlass.pipeline as pipeline
    import cutlass.utils as utils
    import cutlass.utils.blackwell_helpers as sm100_utils
    import cutlass.utils.blockscaled_layout as blockscaled_utils
    import cutlass.utils.hopper_helpers as sm90_utils
    from cutlass._mlir.dialects import llvm
    from cutlass.cute.nvgpu import cpasync, tcgen05
    from cutlass.cute.runtime import make_ptr
    from cutlass.cutlass_dsl import Float32, Int32, Int64, Uint32, dsl_user_op

    try:  # DSL >= 4.8 moved these helpers; 4.5.x has them under cutlass.utils only.
        from cutlass.tensor_utils import LayoutEnum, TensorMapManager, TensorMapUpdateMode
    except ImportError:
        from cutlass.utils import LayoutEnum, TensorMapManager, TensorMapUpdateMode

    _DSL_IMPORT_ERROR = None
except ImportError as e:  # the exact torch path still works
    _DSL_IMPORT_ERROR = e
    cutlass = cute = pipeline = utils = sm100_utils = blockscaled_utils = _MissingDsl()
    sm90_utils = llvm = cpasync = tcgen05 = make_ptr = _MissingDsl()
    Float32 = Int32 = Int64 = Uint32 = dsl_user_op = _MissingDsl()
    LayoutEnum = TensorMapManager = TensorMapUpdateMode = _MissingDsl()

try:
    from task import input_t, output_t
except ImportError:  # used outside the leaderboard harness
    input_t = output_t = Any

SF_VEC_SIZE = 16  # one E4M3 scale per 16 consecutive K values
PATH_ENV = "NVFP4_GEMM_PATH"
SELF_CHECK_ENV = "NVFP4_GEMM_SELF_CHECK"
PATHS = ("auto", "sm100", "sm90", "torch")


def ceil_div(a: int, b: int) -> int:
    return (a + b - 1) // b


# ======================================================================================
# 1. Inputs
# ======================================================================================
_FP4_DTYPES = (torch.float4_e2m1fn_x2, torch.uint8)


@dataclasses.dataclass(frozen=True)
class GroupedProblem:
    """A validated call: sizes per group and the device everything lives on.

    `kernel_layout` is True when every tensor has the dense layout the TMA-based kernels
    address (K-major A/B rows, N-contiguous C rows, the blocked scale allocation) and A, B
    and both scales start on 16 bytes (TMA and bulk copies fault on anything else); else
    `layout_issue` names the first group and field that break it. The exact torch path
    takes any strides. `c_misaligned` names the first C that no TMA store can address (not
    16-byte aligned): the Hopper kernel stores such a C element by element, the Blackwell
    kernel does not take it.
    """

    sizes: tuple[tuple[int, int, int, int], ...]
    device: torch.device
    kernel_layout: bool
    layout_issue: str = ""
    c_misaligned: str = ""


def _fail(group: int, field: str, message: str) -> None:
    raise ValueError(f"group {group}: field '{field}': {message}")


def _blocked_scale_shape(rows: int, k: int) -> tuple[int, ...]:
    return (32, 4, ceil_div(rows, 128), 4, ceil_div(k // SF_VEC_SIZE, 4), 1)


def _blocked_scale_strides(rows: int, k: int) -> tuple[int, ...]:
    """Element strides of the leaderboard's permuted view of an (L, rest_mn, rest_k, 32, 4, 4)
    allocation (the L stride is left out: L == 1)."""
    rest_k = ceil_div(k // SF_VEC_SIZE, 4)
    return (16, 4, rest_k * 512, 1, 512)


def _size_value(g: int, name: str, value) -> int:
    """An integer size (a Python int, or any integer type with __index__, as numpy's); a
    bool, float or string is an error naming the group and the size."""
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        _fail(g, "problem_sizes", f"{name} = {value!r} is not an integer")
    return operator.index(value)


def _check_sizes(g: int, size: Sequence[int]) -> tuple[int, int, int, int]:
    if not isinstance(size, (tuple, list)) or len(size) != 4:
        _fail(g, "problem_sizes", f"expected (M, N, K, L), got {tuple(size) if isinstance(size, (tuple, list)) else size!r}")
    m, n, k, l = (_size_value(g, name, v) for name, v in zip("MNKL", size))
    if l != 1:
        _fail(g, "problem_sizes", f"L = {l}; only L == 1 is supported")
    if m < 0 or n < 0:
        _fail(g, "problem_sizes", f"M = {m}, N = {n}; sizes must not be negative")
    if k <= 0 or k % SF_VEC_SIZE != 0:
        _fail(g, "problem_sizes", f"K = {k} must be a positive multiple of {SF_VEC_SIZE}")
    return m, n, k, l


def _check_tensor(g, field, t, dtypes, shape, device) -> None:
    if not isinstance(t, torch.Tensor):
        _fail(g, field, f"expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        names = " or ".join(str(d) for d in dtypes)
        _fail(g, field, f"dtype {t.dtype}, expected {names}")
    if t.shape != shape:  # a torch.Size compares with a tuple as a tuple
        _fail(g, field, f"shape {tuple(t.shape)}, expected {shape} from problem_sizes")
    if t.device != device:
        _fail(g, field, f"on {t.device}, but group 0's 'a' is on {device}; mixed devices")


def validate_inputs(data) -> GroupedProblem:
    """Check a call's data against its problem_sizes; raise ValueError naming group and field.

    The CPU copies of the scales (data[1]) are not read by any path and are not checked.
    """
    if not isinstance(data, (tuple, list)) or len(data) != 4:
        raise ValueError("data must be (abc_tensors, sfasfb_tensors, sfasfb_reordered, sizes)")
    abc_tensors, _, sf_reordered, problem_sizes = data
    for name, part in (("abc_tensors", abc_tensors), ("sfasfb_reordered", sf_reordered),
                       ("problem_sizes", problem_sizes)):
        if not isinstance(part, (tuple, list)):
            raise ValueError(f"{name} must be a list with one entry per group, got {type(part).__name__}")
    num_groups = len(problem_sizes)
    if num_groups == 0:
        raise ValueError("empty group list: problem_sizes has no groups")
    if len(abc_tensors) != num_groups or len(sf_reordered) != num_groups:
        raise ValueError(
            f"{num_groups} problem sizes but {len(abc_tensors)} (a, b, c) tuples and "
            f"{len(sf_reordered)} reordered scale tuples"
        )
    first = abc_tensors[0][0] if isinstance(abc_tensors[0], (tuple, list)) and abc_tensors[0] else None
    device = first.device if isinstance(first, torch.Tensor) else None
    sizes = []
    layout_issue = c_misaligned = ""
    for g in range(num_groups):
        m, n, k, l = _check_sizes(g, problem_sizes[g])
        if not isinstance(abc_tensors[g], (tuple, list)) or len(abc_tensors[g]) != 3:
            _fail(g, "abc_tensors", "expected an (a, b, c) tuple")
        if not isinstance(sf_reordered[g], (tuple, list)) or len(sf_reordered[g]) != 2:
            _fail(g, "sfasfb_reordered", "expected an (sfa, sfb) tuple")
        a, b, c = abc_tensors[g]
        sfa, sfb = sf_reordered[g]
        _check_tensor(g, "a", a, _FP4_DTYPES, (m, k // 2, l), device)
        _check_tensor(g, "b", b, _FP4_DTYPES, (n, k // 2, l), device)
        _check_tensor(g, "c", c, (torch.float16,), (m, n, l), device)
        _check_tensor(g, "sfa_reordered", sfa, (torch.float8_e4m3fn,), _blocked_scale_shape(m, k), device)
        _check_tensor(g, "sfb_reordered", sfb, (torch.float8_e4m3fn,), _blocked_scale_shape(n, k), device)
        if not layout_issue:
            layout_issue = _layout_issue(g, a, b, c, sfa, sfb, m, n, k)
        if not c_misaligned and c.data_ptr() % 16:
            c_misaligned = f"group {g}: c starts at {c.data_ptr() % 16} bytes past a 16-byte boundary"
        sizes.append((m, n, k, l))
    return GroupedProblem(tuple(sizes), device, not layout_issue, layout_issue, c_misaligned)


def _layout_issue(g, a, b, c, sfa, sfb, m, n, k) -> str:
    """Why group g's tensors are not what the kernels' TMA descriptors and bulk copies can
    address, or "" when they are."""
    strides = (("a", a, (k // 2, 1)), ("b", b, (k // 2, 1)), ("c", c, (n, 1)),
               ("sfa_reordered", sfa, _blocked_scale_strides(m, k)),
               ("sfb_reordered", sfb, _blocked_scale_strides(n, k)))
    for field, t, dense in strides:
        if t.stride()[:len(dense)] != dense:
            return f"group {g}: {field} has strides {t.stride()}, not the dense {dense}"
    for field, t in (("a", a), ("b", b), ("sfa_reordered", sfa), ("sfb_reordered", sfb)):
        if t.data_ptr() % 16:
            return f"group {g}: {field} starts at {t.data_ptr() % 16} bytes past a 16-byte boundary"
    return ""


# ======================================================================================
# 2. Host-side math: tiles and the static schedule
# ======================================================================================
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
    """Per phase, its runs of tiles (tile_runs at tile_m = widths[0]) in schedule order:
    every tile of a run uses the same rows, so it has one phase, and a stable partition of
    the runs by phase keeps each phase in schedule order."""
    phases = [[] for _ in widths]
    for rows, tiles in tile_runs(sizes, widths[0], tile_n):
        phases[width_phase(widths, rows)].append(tiles)
    return phases


def phased_tile_schedule(
    sizes: Sequence[Sequence[int]], tile_n: int, widths: Sequence[int]
) -> tuple[list[tuple[int, int, int]], tuple[int, ...]]:
    """split_tiles_by_width(build_tile_schedule(sizes, widths[0], tile_n), sizes, widths),
    run by run (phased_tile_runs). The config choice builds this for every candidate of a
    new problem."""
    phases = phased_tile_runs(sizes, tile_n, widths)
    return ([t for ph in phases for tiles in ph for t in tiles],
            tuple(sum(map(len, ph)) for ph in phases))


def phase_of_rows(phase_sizes: Sequence[int]) -> list[int]:
    """The phase of each schedule row, from split_tiles_by_width's tiles per phase."""
    return [p for p, n in enumerate(phase_sizes) for _ in range(n)]


# --------------------------------------------------------------------------------------
# Work units: the per-CTA lists a persistent kernel walks (whole tiles, or split-K pieces)
# --------------------------------------------------------------------------------------
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
    milliseconds per call on average (notes/measurements.md, seventeenth session)."""

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
# tools/schedule_equivalence.py differ, with makespans at most 8.4e-5 longer.
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


# ======================================================================================
# 3. Torch paths: exact fp32 (any device, the self-check's reference), fp16 GEMMs (CUDA)
# ======================================================================================
# E2M1 code -> value: sign bit 3, exponent bits 2..1 (bias 1), mantissa bit 0.
_E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
_e2m1_tables: dict[torch.device, torch.Tensor] = {}


def _e2m1_table(device: torch.device) -> torch.Tensor:
    """The 16 code values on `device`, cached once copied there."""
    table = _e2m1_tables.get(device)
    if table is None:
        table = _e2m1_tables[device] = torch.tensor(_E2M1_VALUES, dtype=torch.float32, device=device)
    return table


def _blocked_scales(sf_blocked: torch.Tensor, rows: int, k: int, dtype=torch.float32) -> torch.Tensor:
    """(rows, K/16) scales (exact in fp32 and fp16) out of a blocked (32, 4, rest_m, 4,
    rest_k, 1) view, whose element [r % 32, (r % 128) // 32, r // 128, j % 4, j // 4, 0] is
    row r's scale j: one permute and copy, no index tensors."""
    scales = sf_blocked.permute(2, 1, 0, 4, 3, 5).reshape(-1, sf_blocked.shape[4] * 4)
    return scales[:rows, :k // SF_VEC_SIZE].to(dtype)


def _dequantize_rows(packed: torch.Tensor, sf_blocked: torch.Tensor, k: int) -> torch.Tensor:
    """(rows, K/2) packed E2M1 and its blocked scales -> (rows, K) float32, exact."""
    rows = packed.shape[0]
    u8 = packed.view(torch.uint8).to(torch.int64)
    codes = torch.stack((u8 & 0xF, u8 >> 4), dim=-1).reshape(rows, k)
    values = _e2m1_table(packed.device)[codes]
    scales = _blocked_scales(sf_blocked, rows, k)
    return (values.view(rows, k // SF_VEC_SIZE, SF_VEC_SIZE) * scales.unsqueeze(-1)).view(rows, k)


def run_torch_exact(data, problem: GroupedProblem, out: Sequence[torch.Tensor] | None = None) -> list[torch.Tensor]:
    """Reference-grade path for any device: one group's dequantized operands at a time,
    fp32 products and sums (TF32 off), one rounding to fp16, written into c (or into
    `out`, tensors shaped like the c's, which are then left alone)."""
    abc_tensors, _, sf_reordered, _ = data
    outs = [abc[2] for abc in abc_tensors] if out is None else list(out)
    saved_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for (a, b, _), (sfa, sfb), (m, n, k, _), c in zip(abc_tensors, sf_reordered, problem.sizes, outs):
            if m == 0 or n == 0:
                continue
            a_f32 = _dequantize_rows(a[:, :, 0], sfa, k)
            b_f32 = _dequantize_rows(b[:, :, 0], sfb, k)
            c[:, :, 0] = torch.mm(a_f32, b_f32.T).to(torch.float16)
            del a_f32, b_f32
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved_tf32
    return outs


_e2m1_pair_tables: dict[torch.device, torch.Tensor] = {}


def _e2m1_pair_table(device: torch.device) -> torch.Tensor:
    """(256,) int32: packed byte -> its two fp16 values' bits (low code in the low half, as
    a little-endian (rows, K) fp16 view reads them). Made by ops on the device from the
    16-value table; cached."""
    table = _e2m1_pair_tables.get(device)
    if table is None:
        values = _e2m1_table(device).to(torch.float16).view(torch.int16).to(torch.int32) & 0xFFFF
        byte = torch.arange(256, device=device)
        table = _e2m1_pair_tables[device] = values[byte & 0xF] | (values[byte >> 4] << 16)
    return table


def _dequantize_rows_f16(packed: torch.Tensor, sf_blocked: torch.Tensor, k: int) -> torch.Tensor:
    """(rows, K/2) packed E2M1 and its blocked scales -> (rows, K) float16, exact: a product
    of an E2M1 value and an E4M3 scale has at most 6 significant bits and lies within
    2^-10 .. 2688, inside fp16's normal range. One gather per packed byte (two values) and
    one multiply per value."""
    rows = packed.shape[0]
    pairs = _e2m1_pair_table(packed.device)[packed.view(torch.uint8).reshape(-1).to(torch.int32)]
    values = pairs.view(torch.float16).view(rows, k // SF_VEC_SIZE, SF_VEC_SIZE)
    scales = _blocked_scales(sf_blocked, rows, k, torch.float16)
    return (values * scales.unsqueeze(-1)).view(rows, k)


DECODE_BATCH_BYTES = 256 << 20  # fp16 bytes Fp4RowDecoder fills per launch (decode_batches)
_e4m3_pair_tables: dict[torch.device, torch.Tensor] = {}


def _e4m3_pair_table(device: torch.device) -> torch.Tensor:
    """(256,) int32: an E4M3 byte -> the fp16 bits of its value in both halves (the f16x2
    multiplier of Fp4RowDecoder; NaN for 0x7F and 0xFF). Made on the device; cached."""
    table = _e4m3_pair_tables.get(device)
    if table is None:
        codes = torch.arange(256, dtype=torch.int32, device=device).to(torch.uint8)
        bits = codes.view(torch.float8_e4m3fn).to(torch.float16).view(torch.int16).to(torch.int32) & 0xFFFF
        table = _e4m3_pair_tables[device] = bits | (bits << 16)
    return table


def decode_batches(sizes: Sequence[Sequence[int]], groups: Sequence[int],
                   limit: int | None = None) -> list[list[int]]:
    """`groups` in order, cut into runs whose fp16 operands ((M + N) x K x 2 bytes) stay
    within `limit` (DECODE_BATCH_BYTES by default; a group larger than that runs alone):
    what one decode launch fills before its GEMMs run and free it."""
    limit = DECODE_BATCH_BYTES if limit is None else limit
    batches: list[list[int]] = []
    used = limit + 1
    for g in groups:
        m, n, k, _ = sizes[g]
        need = (m + n) * k * 2
        if used + need > limit:
            batches.append([])
            used = 0
        batches[-1].append(g)
        used += need
    return batches


def decode_jobs(data, problem: GroupedProblem, groups: Sequence[int]):
    """(Fp4RowDecoder's job rows, {group: (a16, b16)}): each operand of `groups` with the
    fp16 tensor it is decoded into."""
    abc_tensors, _, sf_reordered, _ = data
    jobs, outputs = [], {}
    for g in groups:
        m, n, k, _ = problem.sizes[g]
        (a, b, _), (sfa, sfb) = abc_tensors[g], sf_reordered[g]
        a16 = torch.empty((m, k), dtype=torch.float16, device=problem.device)
        b16 = torch.empty((n, k), dtype=torch.float16, device=problem.device)
        for packed, sf, out, rows in ((a, sfa, a16, m), (b, sfb, b16, n)):
            jobs.append((packed.data_ptr(), sf.data_ptr(), out.data_ptr(), rows * (k // SF_VEC_SIZE),
                         k // SF_VEC_SIZE, ceil_div(k, 64)))
        outputs[g] = (a16, b16)
    return jobs, outputs


def run_torch_fp16(data, problem: GroupedProblem, decode_kernel: bool = True) -> list[torch.Tensor]:
    """The fallback on a CUDA device without one of our kernels: each group's operands
    decoded to fp16 (exact), then cuBLAS fp16 GEMM with fp32 accumulation and one rounding
    to fp16, as the reference rounds. Only the order of the fp32 sums differs from
    run_torch_exact; fp16 partial sums are kept out (allow_fp16_reduced_precision_reduction
    off), since a split-K reduction in fp16 would round each partial. Written into each
    group's c.

    The decode is one Fp4RowDecoder launch per batch of groups (decode_batches) where the
    inputs have the kernels' layout and the CuTe DSL compiles for this GPU; else, or with
    decode_kernel=False, torch ops per group (_dequantize_rows_f16). Both give the same
    bits."""
    abc_tensors, _, sf_reordered, _ = data
    groups = [g for g, (m, n, _, _) in enumerate(problem.sizes) if m and n]
    decoder = None
    if decode_kernel and problem.kernel_layout and problem.device.type == "cuda":
        decoder = fp4_decoder(problem.device)
    matmul = torch.backends.cuda.matmul
    saved = matmul.allow_fp16_reduced_precision_reduction
    matmul.allow_fp16_reduced_precision_reduction = False
    try:
        for batch in decode_batches(problem.sizes, groups):
            decoded = None
            if decoder is not None:
                jobs, decoded = decode_jobs(data, problem, batch)
                launch_decoder(decoder, jobs, problem.device)
            for g in batch:
                (a, b, c), (sfa, sfb), k = abc_tensors[g], sf_reordered[g], problem.sizes[g][2]
                if decoded is None:
                    a16 = _dequantize_rows_f16(a[:, :, 0], sfa, k)
                    b16 = _dequantize_rows_f16(b[:, :, 0], sfb, k)
                else:
                    a16, b16 = decoded.pop(g)
                if c.is_contiguous():
                    torch.mm(a16, b16.T, out=c[:, :, 0])
                else:
                    c[:, :, 0] = a16 @ b16.T
                del a16, b16
    finally:
        matmul.allow_fp16_reduced_precision_reduction = saved
    return [abc[2] for abc in abc_tensors]


def run_torch_fallback(data, problem: GroupedProblem) -> list[torch.Tensor]:
    """The torch path a call falls back to: fp16 GEMMs on CUDA (run_torch_fp16), where fp32
    ones without TF32 run at a small fraction of the tensor cores' rate; the fp32 path
    elsewhere (run_torch_exact, which is also the self-check's reference)."""
    if problem.device is not None and problem.device.type == "cuda":
        return run_torch_fp16(data, problem)
    return run_torch_exact(data, problem)


# The leaderboard's tolerance (reference.check_implementation), used by the self-check
SELF_CHECK_RTOL = 1e-3
SELF_CHECK_ATOL = 1e-3


def first_mismatch(outputs: Sequence[torch.Tensor], expected: Sequence[torch.Tensor]) -> str | None:
    """None when every output is within the leaderboard's tolerance of the expected one
    (and has NaN / inf exactly where it does), else what is wrong, naming the group."""
    for g, (got, want) in enumerate(zip(outputs, expected)):
        if got.numel() == 0:
            continue
        got32, want32 = got.float(), want.float()
        bad = ~torch.isclose(got32, want32, rtol=SELF_CHECK_RTOL, atol=SELF_CHECK_ATOL, equal_nan=True)
        count = int(bad.sum())
        if count:
            idx = tuple(int(i) for i in bad.nonzero()[0])
            return (f"group {g}: {count} of {got.numel()} elements of c off by more than "
                    f"rtol = atol = {SELF_CHECK_RTOL:g} (first at {idx}: {float(got32[idx])} "
                    f"against {float(want32[idx])})")
    return None


# ======================================================================================
# 4. Caches
# ======================================================================================
def _touch(data: OrderedDict, key) -> None:
    """Mark key most recently used, unless another thread (or a weakref callback) has just
    removed it."""
    try:
        data.move_to_end(key)
    except KeyError:
        pass


class LruCache:
    """A bounded mapping that evicts the least recently used entry; counts hits and misses.

    Lookups may run on several threads at once, and beside a put on another thread or a
    weakref callback's pop (the runner serializes its puts; see GroupedGemmRunner): an
    entry that leaves between a lookup's get and its move_to_end is still returned."""

    def __init__(self, maxsize: int):
        self.maxsize = maxsize
        self._data: OrderedDict = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key):
        value = self._data.get(key)
        if value is None:
            self.misses += 1
            return None
        _touch(self._data, key)
        self.hits += 1
        return value

    def put(self, key, value) -> None:
        self._data[key] = value
        _touch(self._data, key)
        while len(self._data) > self.maxsize:
            try:
                self._data.popitem(last=False)
            except KeyError:  # emptied by another thread meanwhile
                break

    def get_or_create(self, key, create: Callable[[], Any]):
        value = self.get(key)
        if value is None:
            value = create()
            self.put(key, value)
        return value

    def pop(self, key) -> None:
        self._data.pop(key, None)

    def clear(self) -> None:
        self._data.clear()
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key) -> bool:
        return key in self._data


class HashedLruCache(LruCache):
    """An LRU cache for the fast paths' long tuple keys (a call's tensor ids, or its
    tensors' layouts): one tuple hash per lookup. Python does not cache a tuple's hash,
    and OrderedDict.get + move_to_end would hash the key twice, so items are filed under
    the key's hash as (key, value); a lookup is one hash, one int-keyed probe and one
    tuple comparison. Two keys with the same hash simply replace each other. The item of
    the latest hit is checked first, by comparison alone: a benchmark repeats one call."""

    def __init__(self, maxsize: int):
        super().__init__(maxsize)
        self._latest = None  # (key, value) of the latest hit

    def get(self, key):
        latest = self._latest
        if latest is not None and latest[0] == key:
            self.hits += 1
            return latest[1]
        h = hash(key)
        item = self._data.get(h)
        if item is None or item[0] != key:
            self.misses += 1
            return None
        _touch(self._data, h)
        self.hits += 1
        self._latest = item
        return item[1]

    def put(self, key, value) -> None:
        latest = self._latest
        if latest is not None:
            _touch(self._data, hash(latest[0]))  # its hits by comparison count as use
        self._latest = None
        super().put(hash(key), (key, value))

    def pop(self, key) -> None:
        h = hash(key)
        item = self._data.get(h)
        if item is not None and item[0] == key:
            self._data.pop(h, None)
            if item is self._latest:
                self._latest = None

    def clear(self) -> None:
        super().clear()
        self._latest = None

    def __contains__(self, key) -> bool:
        item = self._data.get(hash(key))
        return item is not None and item[0] == key


# ======================================================================================
# 5. Kernel runner: the host wrapper both kernels share
# ======================================================================================
@functools.lru_cache(maxsize=16)
def call_key_function(groups: int) -> Callable[[Any], tuple]:
    """The call key of a call with `groups` groups: the ids of its a, b, c of every group,
    then of its reordered sfa, sfb, then its sizes, as one flat tuple. Raises ValueError or
    TypeError where data does not unpack into that many groups of that arity (the caller's
    miss). Sizes given as lists still build a key; hashing it raises TypeError.

    One star-unpacking of map(id, ...): 0.57 us at 2 groups and 1.65 at 8 on the 2-core CI
    CPU (measured: timeit of each on a leaderboard-shaped call). Code generated per group count ran in 0.27 and
    1.08 us, but executing generated code is what the leaderboard's KernelGuard refuses."""
    size = 6 * groups  # 5 tensors and the sizes per group

    def call_key(data):
        abc, _, sfr, sizes = data
        key = (*map(id, chain(*abc, *sfr)), *sizes)
        if len(key) != size:
            raise ValueError(f"not {groups} groups of 3 and 2 tensors and sizes")
        return key

    return call_key


@dataclasses.dataclass(frozen=True)
class KernelBackend:
    """What the runner needs from one kernel family (Blackwell or Hopper).

    choose_config(sizes, num_sms) -> config; can_implement(config, sizes) -> (ok, reason);
    tile_shape(config) -> (tile_m, tile_n) along the problem's M and N;
    compile(config) -> CompiledKernels, one build for every group count (the count is a
    launch argument); num_desc: descriptors per group;
    grid(config, num_tiles, num_sms, device_index) -> CTAs of the persistent launch
    (device_index None: no device, as in the CPU tests);
    schedule(sizes, config, num_sms) -> HostSchedule, where the kernel walks per-CTA work
    units (None: the whole-tile round robin of build_tile_schedule, in rows "schedule");
    self_check: whether the runner checks a config's first launch on each problem size
    against the exact path (NVFP4_GEMM_SELF_CHECK=1 / 0 overrides it).
    """

    name: str
    choose_config: Callable
    can_implement: Callable
    tile_shape: Callable
    compile: Callable
    num_desc: int
    grid: Callable = lambda config, num_tiles, num_sms, device_index: persistent_grid(num_tiles, num_sms)
    schedule: Callable | None = None
    # check each (config, sizes)'s first launch against the exact path (GroupedGemmRunner.run)
    self_check: bool = False
    needs_aligned_c: bool = False  # C only through TMA stores (GroupedProblem.c_misaligned)


@dataclasses.dataclass
class CompiledKernels:
    """Launchers of one compiled config, on torch tensors, on the default CUDA queue.

    init(ptrs, sizes, tensormaps): writes the per-group TMA descriptors (once per pointers).
    prepare(sizes, ptrs, tensormaps, sched: TileSchedule, scratch: SplitKScratch | None)
    -> launch: binds the kernel arguments once; launch() then runs all groups.
    """

    init: Callable
    prepare: Callable
    info: dict = dataclasses.field(default_factory=dict)  # e.g. shared memory per CTA


@dataclasses.dataclass(frozen=True)
class HostSchedule:
    """A backend's static schedule on the host: int rows of each table the kernel reads,
    the grid, and the split-K scratch that each pointer table needs (0: none)."""

    tables: dict  # name -> list of equal-length int tuples
    num_tiles: int  # rows of the work list
    grid: int
    workspace_floats: int = 0  # fp32 partial sums
    num_flags: int = 0  # int32 arrival flags, zero between calls
    unit_stride: int = 0  # units table rows per CTA (WorkSchedule.unit_stride), where used


@dataclasses.dataclass
class TileSchedule:
    """Device copy of a HostSchedule's tables and of the sizes, per (sizes, config)."""

    sizes: torch.Tensor  # (G, 4) int32
    tables: dict  # name -> (rows, fields) int32 device tensor
    host: HostSchedule  # the grid, the tile count and the split-K scratch sizes (no rows)

    @property
    def schedule(self) -> torch.Tensor:
        """The whole-tile round robin's rows: group, tile index along M, along N."""
        return self.tables["schedule"]


@dataclasses.dataclass
class SplitKScratch:
    """Split-K scratch of one pointer table: partial sums and their arrival flags. The
    kernel's FIXUP units reset each flag they consumed, so the flags are zeroed only once,
    here; every call runs on the default CUDA queue, so one table's calls are ordered like
    any writes to its C."""

    partials: torch.Tensor  # fp32
    flags: torch.Tensor  # int32


@dataclasses.dataclass
class PointerTable:
    """Device pointer table and TMA descriptors of one set of pointers, and the ready launch.

    The launch holds raw device addresses of everything here and of the schedule's tables,
    so the table keeps its TileSchedule alive: the schedules cache may evict that entry
    while a call entry still launches this table.
    """

    ptrs: torch.Tensor  # (G, 5) int64: a, b, sfa_reordered, sfb_reordered, c
    tensormaps: torch.Tensor  # (G, num_desc, 16) int64, written once by the init kernel
    launch: Callable[[], None]
    scratch: SplitKScratch | None = None
    schedule: TileSchedule | None = None


@dataclasses.dataclass
class CallEntry:
    """A call seen before: same tensor objects and sizes. Holds weak references only; the
    entry is dropped as soon as one of its tensors is freed, so a recycled id never hits."""

    table: PointerTable
    outputs: list
    refs: list


def group_pointers(data, sizes) -> tuple[tuple[int, ...], ...]:
    """(a, b, sfa_reordered, sfb_reordered, c) addresses per non-empty group."""
    abc, _, sfr, _ = data
    return tuple(
        (a.data_ptr(), b.data_ptr(), sfa.data_ptr(), sfb.data_ptr(), c.data_ptr())
        for (a, b, c), (sfa, sfb), (m, n, _, _) in zip(abc, sfr, sizes)
        if m and n
    )


class LayoutMiss(NamedTuple):
    """What a call that missed both fast paths has read already: its tensors' layout fields
    (GroupedGemmRunner.layout_fields), for the slow path to store its layout key without
    reading 5 x G tensors' metadata again. Made and used within one call, on its own data."""

    fields: list


class GroupedGemmRunner:
    """Validation-free fast path for repeated calls plus the cached slow path.

    Caches, all bounded LRU:
      compiled:  config -> CompiledKernels (one per config, whatever the group count)
      plans:     sizes -> (config, None) or (None, reason); the config choice can model the
                 schedule (milliseconds of Python), so it runs once per problem sizes
      schedules: (sizes, config) -> TileSchedule
      pointers:  (config, sizes, pointers) -> PointerTable (descriptors built once)
      calls:     ids of the call's tensors and its sizes -> CallEntry
      layouts:   address, dtype, shape and strides of the call's tensors, and its sizes ->
                 the pointers key (new tensor objects over an earlier call's memory)
      checked:   (config, sizes) whose first launch passed the self-check
    No cache holds anything derived from input values, nor a reference that keeps an
    input alive.

    The self-check (backend.self_check, or NVFP4_GEMM_SELF_CHECK=1): the first launch of
    a config on each problem size is compared with the exact path on that call's inputs.
    A mismatch rejects the config for the process (plan() then returns the reason, and the
    caller falls back) and the call returns the exact result. It catches wrong numbers,
    not a hang or a device fault.

    Every launch, upload and init kernel goes to the default CUDA queue, as the leaderboard's
    harness runs: an upload or descriptor build is ordered before the launches that read it
    without any event. CUDA graph capture is not supported (a capture needs another queue).

    A launch error that leaves the CUDA context usable (KernelLaunchError, not sticky)
    retires the config for the process, like a failed self-check; a sticky one propagates.

    Threads: the slow path (plan and run: the choice, compiles, schedules, tables and
    every cache put) holds the runner's lock, so two threads never build the same thing
    or interleave puts. The fast paths take no lock: their lookups tolerate a concurrent
    put or pop (LruCache), and a launch is bound once (bind_launch).
    """

    def __init__(self, backend: KernelBackend, num_sms: int, maxsize: int = 64,
                 self_check: bool | None = None, device_index: int | None = None,
                 other_devices: bool = True):
        self.backend = backend
        self.num_sms = num_sms
        # the CUDA device whose context the kernels live in (None: no device, as in the CPU
        # tests); a call made while another device is current runs under a device guard.
        # other_devices=False: the process sees no other device (then none can be current,
        # and the warm path skips the query, 0.18 us on the H200's host)
        self.device_index = device_index
        self._guarded = device_index is not None and other_devices
        self.self_check = backend.self_check if self_check is None else self_check
        self.compiled = LruCache(16)
        self.plans = LruCache(maxsize)
        self.schedules = LruCache(maxsize)
        self.pointers = LruCache(maxsize)
        self.calls = HashedLruCache(maxsize)
        self.layouts = HashedLruCache(maxsize)
        self.checked = LruCache(maxsize)
        self.rejected: dict = {}  # config -> why it is not used again (self-check, launch error)
        self._lock = threading.RLock()  # the slow path's (run may re-enter under a device guard)

    @staticmethod
    def call_key(data) -> tuple | None:
        """ids of every tensor the kernel touches, then the sizes: one flat tuple
        (call_key_function), or None where it cannot be built or hashed."""
        try:
            key = call_key_function(len(data[0]))(data)
            hash(key)
        except (TypeError, ValueError, LookupError):  # not a call's structure; sizes as lists
            return None
        return key

    def run_cached(self, data):
        """The outputs (a list) of a call seen before, launched; else a LayoutMiss for the
        slow path, or None. The key is built as by call_key and hashed once, by the lookup."""
        try:
            entry = self.calls.get(call_key_function(len(data[0]))(data))
        except (TypeError, ValueError, LookupError):  # not a call's structure; sizes as lists
            return None
        if entry is None:
            return self.run_same_layout(data)
        if self._other_device_current():
            with torch.cuda.device(self.device_index):
                return self.run_cached(data)
        entry.table.launch()
        return list(entry.outputs)

    @staticmethod
    def layout_fields(data) -> list | None:
        """(address, dtype, shape, strides) of every tensor the kernel touches, in call_key's
        order; None where data is not made of tensors with storage. Reading 5 x G tensors'
        metadata is most of a layout key's cost."""
        try:
            abc, _, sfr, _ = data
            return [(t.data_ptr(), t.dtype, t.shape, t.stride()) for t in chain(*abc, *sfr)]
        except (AttributeError, TypeError, ValueError, RuntimeError):
            return None

    @staticmethod
    def layout_key(data, stored: bool = False, fields: list | None = None) -> tuple | None:
        """The layout fields (layout_fields, or `fields` read earlier in this same call),
        then the sizes; None where data is not made of tensors with storage, or its sizes are
        not hashable (validation then says what is wrong, or the call takes the slow path). A
        key to be stored has each shape as a tuple, equal to the torch.Size of a lookup's
        key and of the same hash: the garbage collector stops tracking a tuple of ints,
        never a torch.Size (see WorkUnit). Only a stored key is hashed here; a lookup's is
        hashed once, by the cache."""
        if fields is None:
            fields = GroupedGemmRunner.layout_fields(data)
            if fields is None:
                return None
        try:
            sizes = data[3]
            if not stored:
                return (*fields, *sizes)
            key = (*((p, d, tuple(shape), st) for p, d, shape, st in fields), *sizes)
            hash(key)
            return key
        except (TypeError, ValueError, LookupError):
            return None

    def run_same_layout(self, data):
        """The launch for new tensor objects over the memory of an earlier call, or a
        LayoutMiss: what a framework passes when it rebuilds its argument lists, or when the
        caching allocator hands the same blocks back. Address, dtype, shape and strides equal
        to a call that was validated (and self-checked) decide everything validation and the
        descriptors depend on; CUDA addresses are unique across a process's devices. An
        entry names the pointer table's key, not the table, so the pointers LRU alone bounds
        the descriptors and split-K scratch kept; no tensor is referenced, and a stale entry
        is harmless: other tensors at those addresses with that layout are addressed by the
        same descriptors."""
        fields = self.layout_fields(data)
        key = None if fields is None else self.layout_key(data, fields=fields)
        if key is None:
            return None
        try:
            table_key = self.layouts.get(key)
        except TypeError:  # sizes given as lists: no fast path for this call
            return None
        table = None if table_key is None else self.pointers.get(table_key)
        if table is None:
            return LayoutMiss(fields)
        if self._other_device_current():
            with torch.cuda.device(self.device_index):
                return self.run_same_layout(data)
        table.launch()
        return [abc[2] for abc in data[0]]

    def _other_device_current(self) -> bool:
        """Whether the current CUDA device is not the runner's: the kernel's module and the
        default queue it launches on are the runner's device's, so both paths then run under
        its guard."""
        return self._guarded and torch._C._cuda_getDevice() != self.device_index

    def plan(self, problem: GroupedProblem):
        """(config, None) when the kernel takes this problem, else (None, reason)."""
        sizes = tuple(s for s in problem.sizes if s[0] and s[1])
        if not problem.kernel_layout:
            return None, f"inputs are not in the dense layout the TMA descriptors address ({problem.layout_issue})"
        if self.backend.needs_aligned_c and problem.c_misaligned:
            return None, f"the kernel stores C by TMA only ({problem.c_misaligned})"
        if not sizes:
            return None, "every group is empty"
        with self._lock:
            config, reason = self.plans.get_or_create(sizes, lambda: self._plan(sizes))
        if config in self.rejected:
            return None, f"{config} {self.rejected[config]}"
        return config, reason

    def _plan(self, sizes):
        config = self.backend.choose_config(sizes, self.num_sms)
        ok, reason = self.backend.can_implement(config, sizes)
        return (config, None) if ok else (None, reason)

    def run(self, data, problem: GroupedProblem, config, miss: LayoutMiss | None = None) -> list:
        """Slow path: compile, schedule and descriptors through their caches, then launch.
        `miss`: what this call's fast-path lookups read (run_cached's LayoutMiss). Raises
        KernelLaunchError where the launch fails (a config whose launch fails with the
        context still usable is retired, see plan)."""
        with self._lock:
            return self._run(data, problem, config, miss)

    def _run(self, data, problem: GroupedProblem, config, miss: LayoutMiss | None = None) -> list:
        if self._other_device_current():
            with torch.cuda.device(self.device_index):
                return self._run(data, problem, config, miss)
        b = self.backend
        sizes = tuple(s for s in problem.sizes if s[0] and s[1])
        ptrs = group_pointers(data, problem.sizes)
        check = self.self_check and (config, sizes) not in self.checked
        compiled = self.compiled.get_or_create(config, lambda: b.compile(config))
        sched = self.schedules.get_or_create(
            (sizes, config), lambda: self._make_schedule(sizes, config, problem.device)
        )
        table = self.pointers.get_or_create(
            (config, sizes, ptrs),
            lambda: self._make_table(config, compiled, sched, ptrs, problem.device),
        )
        try:
            table.launch()
        except KernelLaunchError as e:
            if not e.sticky:
                self.rejected[config] = f"could not launch ({e})"
                self.pointers.pop((config, sizes, ptrs))
            raise
        outputs = [abc[2] for abc in data[0]]
        if check:
            exact = run_torch_exact(data, problem, [torch.empty_like(c) for c in outputs])
            wrong = first_mismatch(outputs, exact)
            if wrong is not None:
                self.rejected[config] = f"failed its self-check ({wrong})"
                warn_once(f"{b.name} kernel {config} failed its self-check on sizes {list(sizes)}: "
                          f"{wrong}; this config is not used again in this process")
                for c, e in zip(outputs, exact):
                    c.copy_(e)
                return outputs
            self.checked.put((config, sizes), True)
        key = self.call_key(data)
        if key is not None:
            self._remember_call(key, data, table)
        layout = self.layout_key(data, stored=True, fields=None if miss is None else miss.fields)
        if layout is not None:
            self.layouts.put(layout, (config, sizes, ptrs))
        return outputs

    def host_schedule(self, sizes, config) -> HostSchedule:
        b = self.backend
        if b.schedule is not None:
            return b.schedule(sizes, config, self.num_sms)
        rows = build_tile_schedule(sizes, *b.tile_shape(config))
        return HostSchedule({"schedule": rows}, len(rows), b.grid(config, len(rows), self.num_sms, self.device_index))

    def _make_schedule(self, sizes, config, device) -> TileSchedule:
        host = self.host_schedule(sizes, config)
        tables = {name: to_device_async(int32_rows(rows), device)
                  for name, rows in host.tables.items()}
        sizes_dev = to_device_async(torch.tensor(sizes, dtype=torch.int32), device)
        # the host rows are not kept: uploaded, they are only garbage for the collector to walk
        return TileSchedule(sizes_dev, tables, dataclasses.replace(host, tables={}))

    def _make_table(self, config, compiled, sched, ptrs, device) -> PointerTable:
        ptr_dev = to_device_async(torch.tensor(ptrs, dtype=torch.int64), device)
        # 128-byte descriptors must be 64-byte aligned; torch allocations are 256-byte aligned.
        # The init kernel writes every byte of them.
        tensormaps = torch.empty((len(ptrs), self.backend.num_desc, 16), dtype=torch.int64, device=device)
        compiled.init(ptr_dev, sched.sizes, tensormaps)
        scratch = None
        if sched.host.num_flags:
            scratch = SplitKScratch(
                torch.empty(sched.host.workspace_floats, dtype=torch.float32, device=device),
                torch.zeros(sched.host.num_flags, dtype=torch.int32, device=device),
            )
        table = PointerTable(ptr_dev, tensormaps, None, scratch, sched)
        table.launch = compiled.prepare(sched.sizes, ptr_dev, tensormaps, sched, scratch)
        return table

    def _remember_call(self, key, data, table) -> None:
        calls = self.calls

        def forget(_ref, key=key):
            calls.pop(key)

        tensors = list(chain(*data[0], *data[2]))
        refs = [weakref.ref(t, forget) for t in tensors]
        calls.put(key, CallEntry(table, [abc[2] for abc in data[0]], refs))


def int32_rows(rows: Sequence[Sequence[int]]) -> torch.Tensor:
    """A host table's rows (tuples of equal length) as an int32 (rows, fields) tensor, packed
    by one struct call: ~20 ns per value, where torch.tensor on a list of tuples takes ~110
    and an array from an iterator ~55; a new problem's units table holds thousands."""
    if not rows:
        return torch.empty((0, 0), dtype=torch.int32)
    count = len(rows) * len(rows[0])
    flat = bytearray(4 * count)
    struct.pack_into(f"={count}i", flat, 0, *chain.from_iterable(rows))
    return torch.frombuffer(flat, dtype=torch.int32).view(len(rows), -1)


def to_device_async(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A small host table on the device without blocking the host: torch's copy from
    pageable memory synchronizes the host with the device, which on a call with new pointers would make
    the host wait for every GEMM queued before it (the leaderboard queues 15 calls back to
    back, and its first timed round sees 15 new pointer sets). From pinned memory the copy
    is queued like a kernel; torch keeps the pinned block until the copy is done."""
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def persistent_grid(num_tiles: int, num_sms: int, ctas_per_tile: int = 1, ctas_per_sm: int = 1) -> int:
    """CTAs of the persistent launch: as many as can be resident at once (ctas_per_sm per
    SM), never more than the tiles need, a whole number of CTA clusters of ctas_per_tile."""
    resident = (num_sms * ctas_per_sm // ctas_per_tile) * ctas_per_tile
    return max(min(num_tiles * ctas_per_tile, resident), ctas_per_tile)


# ======================================================================================
# 6. CuTe DSL launch glue shared by both kernels
# ======================================================================================
def fake_ptr(dtype, align: int = 16):
    """A null global pointer: compiles a kernel without a GPU (the cache key is its type)."""
    return make_ptr(dtype, 0, cute.AddressSpace.gmem, assumed_align=align)


def device_ptr(t: torch.Tensor, dtype, align: int = 16):
    return make_ptr(dtype, t.data_ptr(), cute.AddressSpace.gmem, assumed_align=align)


# CUDA errors after which the context is unusable: the kernel or the device faulted, and
# every later call on the context fails too (ECC uncorrectable, illegal address, launch
# timeout, context destroyed, assert, hardware stack error, illegal instruction, misaligned
# address, invalid address space, invalid PC, launch failure, unknown). The codes are the
# same in the driver's CUresult and the runtime's cudaError_t. Any other launch error (an
# invalid value, a cluster shape that cannot be scheduled, too many resources requested,
# no image for this GPU) is refused before the kernel runs and leaves the context usable.
STICKY_CUDA_ERRORS = frozenset({214, 700, 702, 709, 710, 714, 715, 716, 717, 718, 719, 999})


class KernelLaunchError(RuntimeError):
    """A compiled kernel's launch returned CUDA error `code`. `sticky`: the context is gone
    (STICKY_CUDA_ERRORS) and the error must propagate; otherwise a fallback path may run."""

    def __init__(self, code: int, what: str):
        self.code = code
        self.sticky = code in STICKY_CUDA_ERRORS
        super().__init__(f"CUDA error {code} launching {what}")


def cuda_error_code(error: BaseException) -> int | None:
    """The CUDA error code an exception carries (KernelLaunchError's, or the CuTe DSL's
    `error_code` on its runtime errors), or None."""
    code = getattr(error, "code", None) if isinstance(error, KernelLaunchError) else getattr(error, "error_code", None)
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def bind_launch(fn, args: tuple) -> Callable[[], None]:
    """A zero-argument launcher of compiled kernel `fn` with fixed `args`, on the default
    CUDA queue (the DSL launches there when its jit function takes no queue argument, as the
    leaderboard's harness runs torch's work there).

    The DSL's call path converts every argument to C pointers and packs them into a ctypes
    array in a Python loop on each call. Here that is done once: the first launch goes
    through the DSL (which loads the module and creates its executor), later ones call the
    executor's C entry point on the packed array kept from then (direct_launcher), which
    owns the argument storage its C pointers point into. The first launch holds a lock, so
    two threads never bind twice. A launch that returns a CUDA error raises
    KernelLaunchError with its code.
    """
    lock = threading.Lock()
    name = getattr(fn, "__name__", type(fn).__name__)

    def first_launch() -> None:
        with lock:
            if state[0] is not first_launch:  # another thread bound it meanwhile
                state[0]()
                return
            try:
                if not hasattr(fn, "generate_execution_args"):
                    fast = functools.partial(fn, *args)
                    fast()
                else:
                    exe_args, keep_alive = fn.generate_execution_args(*args)
                    fn.run_compiled_program(exe_args)
                    fast = direct_launcher(fn, exe_args) or functools.partial(fn.run_compiled_program, exe_args)
                    fast.keep = (exe_args, keep_alive, args)  # the C pointers point into these
            except Exception as e:
                code = cuda_error_code(e)
                if code is None:
                    raise
                raise KernelLaunchError(code, f"{name} ({e})") from e
            state[0] = fast

    state = [first_launch]

    def launch() -> None:
        state[0]()

    return launch


def direct_launcher(fn, exe_args) -> Callable[[], None] | None:
    """The DSL executor's own C entry point with a packed argument array of our own, or
    None where this DSL version's executor is laid out differently (then the DSL's
    run_compiled_program is used). Same call as the DSL makes, minus its per-call Python:
    argument packing, the executor lock and the exception wrapping."""
    executor = getattr(fn, "_default_executor", None)
    try:
        capi = executor.capi_func
        result = executor.cuda_result
        packed = executor._get_invoke_packed_args(exe_args)
    except AttributeError:
        return None
    # a copy: the executor reuses its packed array for every call of this compiled function
    own = (ctypes.c_void_p * len(packed))(*packed)

    if result is None:
        return functools.partial(capi, own)

    def launch() -> None:
        capi(own)
        if result.value:
            raise KernelLaunchError(result.value, getattr(fn, "__name__", type(fn).__name__))

    return launch


# ======================================================================================
# 7. Blackwell kernel (sm_100a): tcgen05 kind::mxf4nvf4 block-scaled grouped GEMM
# ======================================================================================
# >>> sm100 kernel
SM100_SMEM_CAPACITY = 232448  # bytes of dynamic shared memory one CTA may opt into
SM100_TMEM_COLUMNS = 512  # tensor memory columns per SM (128 lanes x 32 bit each)
SM100_SF_VEC_SIZE = 16  # NVF4: one E4M3 scale per 16 K values
SM100_TILE_K = 256  # K per pipeline stage: 4 tcgen05.mma (K = 64 each) per stage
SM100_NUM_DESC = 5  # per-group descriptors: a, b, sfa, sfb, c
SM100_DESC_BYTES = 128  # one CUtensorMap
SM100_DESC_A, SM100_DESC_B, SM100_DESC_SFA, SM100_DESC_SFB, SM100_DESC_C = range(SM100_NUM_DESC)
SM100_C_STAGES = 2  # epilogue smem buffers: one is filled while the TMA store drains the other
SM100_EPI_TILE_ELEMS = 128 * 32  # one epilogue subtile (128 rows x 32 columns of the MMA tile)
# mbarriers, the TMEM address slot and alignment slack reserved ahead of the operand buffers
SM100_SMEM_RESERVED_BYTES = 1024
SM100_SMEM_ALIGN = 1024  # operand buffers are 1024-byte aligned for the 128-byte swizzle


class Sm100KernelLayouts(NamedTuple):
    """Layouts built on the host side of the jit and handed to the kernel as arguments
    (IR values cannot be captured across the launch boundary)."""

    cluster_vmnk: cute.Layout
    cluster_sfb_vmnk: cute.Layout
    a_smem: cute.ComposedLayout  # (MMA, MMA_M, MMA_K, STAGE)
    b_smem: cute.ComposedLayout  # (MMA, MMA_N, MMA_K, STAGE)
    sfa_smem: cute.Layout  # (MMA, MMA_M, MMA_K, STAGE)
    sfb_smem: cute.Layout  # (MMA, MMA_N, MMA_K, STAGE)
    c_smem: cute.ComposedLayout  # (EPI_TILE_M, EPI_TILE_N, C_STAGE)
    epi_tile: cute.Tile


class Sm100Barrier(enum.IntEnum):
    """Named barriers (id 0 is __syncthreads)."""

    EPILOGUE = 1  # the 4 epilogue warps: smem C buffer filled / TMA store issued
    TMEM_ALLOC = 2  # epilogue + MMA warps: the TMEM base address is in smem


# ---------------------------------------------------------------------------------------
# Config and legality
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sm100Config:
    """Static choices of one compiled kernel.

    tile_m / tile_n are the tile extents along the PROBLEM's M and N (one schedule row).
    swap_ab computes c^T = b a^T so that the large N side fills the MMA's M (128 rows per
    CTA) and the token side M sits on the MMA's N. cta_group 2 runs a 256-row MMA over a
    CTA pair (cluster (2, 1)); each CTA holds half of the MMA's M rows.
    """

    tile_m: int = 128
    tile_n: int = 128
    swap_ab: bool = False
    cta_group: int = 1
    ab_stages: int = 4
    acc_stages: int = 2
    pdl: bool = True  # programmatic dependent launch, as on Hopper (Sm90Config.pdl)

    @property
    def mma_m(self) -> int:
        return self.tile_n if self.swap_ab else self.tile_m

    @property
    def mma_n(self) -> int:
        return self.tile_m if self.swap_ab else self.tile_n

    @property
    def name(self) -> str:
        return (
            f"m{self.tile_m}n{self.tile_n}{'_swap' if self.swap_ab else ''}"
            f"_cg{self.cta_group}_ab{self.ab_stages}_acc{self.acc_stages}"
        )


def sm100_stage_bytes(cfg: Sm100Config) -> int:
    """Shared-memory bytes of one A/B/SFA/SFB pipeline stage of one CTA."""
    rows_a = cfg.mma_m // cfg.cta_group  # MMA A rows held by this CTA
    rows_b = cfg.mma_n // cfg.cta_group  # 2-CTA MMA splits B's rows over the pair too
    sf_bytes_per_row = SM100_TILE_K // SM100_SF_VEC_SIZE  # one E4M3 per 16 K values
    sfb_rows = -(-cfg.mma_n // 128) * 128  # SFB is stored for 128-row atoms, whole per CTA
    return (
        rows_a * SM100_TILE_K // 2
        + rows_b * SM100_TILE_K // 2
        + rows_a * sf_bytes_per_row
        + sfb_rows * sf_bytes_per_row
    )


def sm100_tma_bytes_per_stage(cfg: Sm100Config) -> int:
    """Bytes the TMA transaction barrier of one stage expects (the leader CTA's barrier
    counts both CTAs' bytes with cta_group 2)."""
    return sm100_stage_bytes(cfg) * cfg.cta_group


def sm100_epilogue_smem_bytes(cfg: Sm100Config) -> int:
    return SM100_C_STAGES * SM100_EPI_TILE_ELEMS * 2  # fp16


def sm100_ab_stages_for_smem(cfg: Sm100Config) -> int:
    """Largest number of A/B/SF stages that fits next to the epilogue buffers."""
    free = SM100_SMEM_CAPACITY - SM100_SMEM_RESERVED_BYTES - sm100_epilogue_smem_bytes(cfg)
    # each operand buffer may lose up to SM100_SMEM_ALIGN bytes to alignment
    free -= 4 * SM100_SMEM_ALIGN
    return max(0, free // sm100_stage_bytes(cfg))


def sm100_smem_bytes(cfg: Sm100Config) -> int:
    """Upper bound of the GEMM kernel's shared memory (operands, C buffers, barriers)."""
    return (
        SM100_SMEM_RESERVED_BYTES
        + 4 * SM100_SMEM_ALIGN
        + sm100_epilogue_smem_bytes(cfg)
        + cfg.ab_stages * sm100_stage_bytes(cfg)
    )


def sm100_sf_tmem_columns(cfg: Sm100Config) -> int:
    """TMEM columns of the SFA + SFB copies of one k-tile.

    tcgen05.cp 4x32x128b replicates each 32-row slab of scales over the 4 lane quadrants, so
    a 128-row atom takes one column per scale byte of a row: 256 / 16 = 16 columns.
    """
    sf_cols_per_128_rows = SM100_TILE_K // SM100_SF_VEC_SIZE
    sfb_atoms = -(-cfg.mma_n // 128)
    return sf_cols_per_128_rows * (1 + sfb_atoms)


def sm100_tmem_columns(cfg: Sm100Config) -> int:
    """TMEM columns used: fp32 accumulators (one column per MMA N) plus the scales."""
    return cfg.acc_stages * cfg.mma_n + sm100_sf_tmem_columns(cfg)


def is_valid_sm100_tile(cfg: Sm100Config) -> tuple[bool, str]:
    if cfg.cta_group not in (1, 2):
        return False, f"cta_group must be 1 or 2, got {cfg.cta_group}"
    if cfg.mma_m != 128 * cfg.cta_group:
        return False, f"MMA M (= {cfg.mma_m}) must be 128 per CTA (cta_group {cfg.cta_group})"
    if cfg.mma_n not in (128, 256):
        return False, f"MMA N (= {cfg.mma_n}) must be 128 or 256"
    return True, ""


def is_valid_sm100_tmem(cfg: Sm100Config) -> tuple[bool, str]:
    if cfg.acc_stages < 2:
        return False, "acc_stages must be >= 2 so the epilogue overlaps the next main loop"
    cols = sm100_tmem_columns(cfg)
    if cols > SM100_TMEM_COLUMNS:
        return False, f"TMEM needs {cols} columns > {SM100_TMEM_COLUMNS}"
    return True, ""


def is_valid_sm100_smem(cfg: Sm100Config) -> tuple[bool, str]:
    if cfg.ab_stages < 2:
        return False, "ab_stages must be >= 2 to overlap TMA with MMA"
    most = sm100_ab_stages_for_smem(cfg)
    if cfg.ab_stages > most:
        return False, f"ab_stages {cfg.ab_stages} > {most} that fit in shared memory"
    return True, ""


def sm100_config_is_legal(cfg: Sm100Config) -> tuple[bool, str]:
    """THE single statement of which configs are legal."""
    for check in (is_valid_sm100_tile, is_valid_sm100_tmem, is_valid_sm100_smem):
        ok, reason = check(cfg)
        if not ok:
            return False, reason
    return True, ""


def make_sm100_config(
    tile_m: int, tile_n: int, swap_ab: bool, cta_group: int, acc_stages: int = 2
) -> Sm100Config:
    """Config with as many A/B/SF stages as shared memory holds."""
    probe = Sm100Config(tile_m, tile_n, swap_ab, cta_group, 2, acc_stages)
    return Sm100Config(
        tile_m, tile_n, swap_ab, cta_group, sm100_ab_stages_for_smem(probe), acc_stages
    )


# ---------------------------------------------------------------------------------------
# Host-side problem math
# ---------------------------------------------------------------------------------------
def sm100_tiles_per_group(cfg: Sm100Config, problem_sizes: Sequence[Sequence[int]]) -> list:
    """(tiles along M, tiles along N) per group, in problem coordinates."""
    return [(-(-m // cfg.tile_m), -(-n // cfg.tile_n)) for m, n, _k, _l in problem_sizes]


def sm100_num_tiles(cfg: Sm100Config, problem_sizes: Sequence[Sequence[int]]) -> int:
    return sum(tm * tn for tm, tn in sm100_tiles_per_group(cfg, problem_sizes))


def query_max_active_clusters(cluster_size: int, device_index: int) -> int:
    """Clusters of `cluster_size` CTAs, each filling an SM's shared memory, that can be
    resident on the device at once: the driver's cuOccupancyMaxActiveClusters through the
    DSL's HardwareInfo, the query CUTLASS's Blackwell grouped GEMM examples size their
    persistent grids by. A cluster's CTAs must sit in one GPC, so on a part whose GPCs hold
    an odd number of usable SMs this is less than num_sms // cluster_size."""
    with torch.cuda.device(device_index):
        return int(utils.HardwareInfo(device_index).get_max_active_clusters(cluster_size))


_max_active_clusters: dict[tuple[int, int], int] = {}  # (device, cluster size) -> clusters


def sm100_max_active_clusters(cfg: Sm100Config, num_sms: int, device_index: int | None) -> int:
    """query_max_active_clusters for cfg's cluster on a device, asked once per cluster size
    and device (every config's CTA takes one SM: min_blocks_per_mp=1 and its shared memory);
    num_sms // cta_group without a device, or where the query fails (one warning)."""
    if device_index is None:
        return num_sms // cfg.cta_group
    key = (device_index, cfg.cta_group)
    clusters = _max_active_clusters.get(key)
    if clusters is None:
        try:
            clusters = query_max_active_clusters(cfg.cta_group, device_index)
        except Exception as e:  # the query compiles a probe kernel; any failure keeps the SM count
            clusters = 0
            reason = f"{type(e).__name__}: {e}"
        else:
            reason = f"it answered {clusters}"
        if clusters < 1:
            warn_once(f"the max-active-clusters query failed for {cfg.cta_group}-CTA clusters ({reason}); "
                      f"sizing the grid by the SM count")
            clusters = num_sms // cfg.cta_group
        _max_active_clusters[key] = clusters
    return clusters


def sm100_grid_ctas(cfg: Sm100Config, num_tiles: int, num_sms: int, device_index: int | None = None) -> int:
    """Persistent grid: at most one cluster per tile, and no more clusters than can be
    resident at once (sm100_max_active_clusters): a cluster that cannot be resident waits
    for a whole earlier one to finish, a second wave behind the persistent one."""
    clusters = min(num_tiles, sm100_max_active_clusters(cfg, num_sms, device_index))
    return max(1, clusters) * cfg.cta_group


def sm100_problem_signature(problem_sizes: Sequence[Sequence[int]]) -> tuple:
    """Normalized key of a problem: the (M, N, K) of each group, in order."""
    return tuple((int(m), int(n), int(k)) for m, n, k, *_ in problem_sizes)


def is_valid_sm100_problem(problem_sizes: Sequence[Sequence[int]]) -> tuple[bool, str]:
    if len(problem_sizes) == 0:
        return False, "no groups"
    for g, ps in enumerate(problem_sizes):
        if len(ps) != 4:
            return False, f"group {g}: problem size must be (M, N, K, L)"
        m, n, k, l = ps
        if l != 1:
            return False, f"group {g}: L must be 1, got {l}"
        if m < 1 or n < 1 or k < 1:
            return False, f"group {g}: empty problem {ps}"
        if k % SM100_TILE_K != 0:
            return False, f"group {g}: K = {k} is not a multiple of {SM100_TILE_K}"
        if n % 8 != 0:
            return False, f"group {g}: N = {n} must be a multiple of 8 (16-byte c rows)"
    return True, ""


# Benchmarks of task.yml, keyed by sm100_problem_signature.
_SM100_BENCH_1 = tuple((m, 4096, 7168) for m in (80, 176, 128, 72, 64, 248, 96, 160))
_SM100_BENCH_2 = tuple((m, 7168, 2048) for m in (40, 76, 168, 72, 164, 148, 196, 160))
_SM100_BENCH_3 = ((192, 3072, 4096), (320, 3072, 4096))
_SM100_BENCH_4 = ((128, 4096, 1536), (384, 4096, 1536))

# 2-CTA + swap-AB: N = 4096..7168 fills 256-row MMAs; tokens (M <= 320) sit on MMA N.
SM100_CONFIG_TABLE: dict = {
    _SM100_BENCH_1: make_sm100_config(128, 256, swap_ab=True, cta_group=2),
    _SM100_BENCH_2: make_sm100_config(128, 256, swap_ab=True, cta_group=2),
    _SM100_BENCH_3: make_sm100_config(128, 256, swap_ab=True, cta_group=2),
    _SM100_BENCH_4: make_sm100_config(128, 256, swap_ab=True, cta_group=2),
}

# Every config the tests compile (the table plus the other supported variants).
SM100_NAMED_CONFIGS: dict = {
    "swap_2cta_m128n256": make_sm100_config(128, 256, swap_ab=True, cta_group=2),
    "swap_1cta_m128n128": make_sm100_config(128, 128, swap_ab=True, cta_group=1),
    "plain_1cta_m128n128": make_sm100_config(128, 128, swap_ab=False, cta_group=1),
    "plain_2cta_m256n128": make_sm100_config(256, 128, swap_ab=False, cta_group=2),
}


def choose_sm100_config(problem_sizes: Sequence[Sequence[int]], num_sms: int = 148) -> Sm100Config:
    cfg = SM100_CONFIG_TABLE.get(sm100_problem_signature(problem_sizes))
    if cfg is None:
        max_m = max(ps[0] for ps in problem_sizes)
        min_n = min(ps[1] for ps in problem_sizes)
        if min_n >= 1024 and max_m <= 512:
            # decode-like: the weight side N is large, put it on the 256-row 2-CTA MMA
            cfg = SM100_NAMED_CONFIGS["swap_2cta_m128n256"]
        elif max_m <= 128:
            cfg = SM100_NAMED_CONFIGS["swap_1cta_m128n128"]
        else:
            cfg = SM100_NAMED_CONFIGS["plain_1cta_m128n128"]
    ok, reason = sm100_config_is_legal(cfg)
    assert ok, reason
    return cfg


# ---------------------------------------------------------------------------------------
# Kernel
# ---------------------------------------------------------------------------------------
class Sm100BlockScaledGroupedGemm:
    """Persistent, warp-specialized NVFP4 grouped GEMM (tcgen05 kind::mxf4nvf4.block_scale).

    Warp roles (192 threads per CTA):
      warps 0-3 epilogue: TMEM acc -> regs -> fp16 -> smem -> TMA store (clips partial tiles)
      warp 4    MMA:      smem A/B + scales (smem -> TMEM) -> tcgen05.mma -> TMEM acc
      warp 5    TMA:      A/B/SFA/SFB gmem -> smem, descriptors read from `tensormaps`

    Timeline of one CTA walking schedule rows t, t + clusters, ...:
      TMA  |ld k0 k1 k2 ...  |ld next tile ...
      MMA     |mma k0 k1 ... -> acc[s]|mma next tile -> acc[s^1]
      EPI                             |drain acc[s] while the next tile's MMAs run
    ab_stages smem stages between TMA and MMA, acc_stages TMEM accumulators between MMA and
    the epilogue.
    """

    def __init__(self, config: Sm100Config):
        ok, reason = sm100_config_is_legal(config)
        if not ok:
            raise ValueError(f"illegal Sm100Config {config}: {reason}")
        self.cfg = config
        self.ab_dtype = cutlass.Float4E2M1FN
        self.sf_dtype = cutlass.Float8E4M3FN
        self.c_dtype = cutlass.Float16
        self.acc_dtype = cutlass.Float32
        self.use_2cta = config.cta_group == 2
        self.cta_group = tcgen05.CtaGroup.TWO if self.use_2cta else tcgen05.CtaGroup.ONE
        self.cluster_shape_mn = (config.cta_group, 1)
        self.mma_tiler_mn = (config.mma_m, config.mma_n)
        # SFB lives in TMEM in 128-row atoms and is not split over the CTA pair
        self.mma_tiler_mn_sfb = (config.mma_m // config.cta_group, -(-config.mma_n // 128) * 128)
        self.num_ab_stage = config.ab_stages
        self.num_acc_stage = config.acc_stages
        self.num_c_stage = SM100_C_STAGES
        # swap-AB writes c^T: the MMA's M (problem N) is the contiguous mode of c
        self.c_layout = LayoutEnum.COL_MAJOR if config.swap_ab else LayoutEnum.ROW_MAJOR
        self.epilog_warp_ids = (0, 1, 2, 3)
        self.mma_warp_id = 4
        self.tma_warp_id = 5
        self.threads_per_cta = 32 * 6
        self.num_tmem_alloc_cols = SM100_TMEM_COLUMNS

    # ----------------------------------------------------------------- legality
    @staticmethod
    def can_implement(
        config: Sm100Config, problem_sizes: Sequence[Sequence[int]]
    ) -> tuple[bool, str]:
        ok, reason = sm100_config_is_legal(config)
        if not ok:
            return False, reason
        return is_valid_sm100_problem(problem_sizes)

    # ----------------------------------------------------------------- static layouts
    def _make_tiled_mmas(self):
        tiled_mma = sm100_utils.make_blockscaled_trivial_tiled_mma(
            self.ab_dtype,
            tcgen05.OperandMajorMode.K,
            tcgen05.OperandMajorMode.K,
            self.sf_dtype,
            SM100_SF_VEC_SIZE,
            self.cta_group,
            self.mma_tiler_mn,
        )
        # SFB is copied per CTA with a 1-CTA shaped MMA view
        tiled_mma_sfb = sm100_utils.make_blockscaled_trivial_tiled_mma(
            self.ab_dtype,
            tcgen05.OperandMajorMode.K,
            tcgen05.OperandMajorMode.K,
            self.sf_dtype,
            SM100_SF_VEC_SIZE,
            tcgen05.CtaGroup.ONE,
            self.mma_tiler_mn_sfb,
        )
        return tiled_mma, tiled_mma_sfb

    def _setup_attributes(self, tiled_mma, tiled_mma_sfb):
        """Shapes and shared-memory layouts that depend only on the config."""
        mma_inst_k = cute.size(tiled_mma.shape_mnk, mode=[2])
        num_k_blocks = SM100_TILE_K // mma_inst_k
        self.mma_tiler = (*self.mma_tiler_mn, mma_inst_k * num_k_blocks)
        self.mma_tiler_sfb = (*self.mma_tiler_mn_sfb, mma_inst_k * num_k_blocks)
        self.cta_tile_shape_mnk = (
            self.mma_tiler[0] // cute.size(tiled_mma.thr_id.shape),
            self.mma_tiler[1],
            self.mma_tiler[2],
        )
        self.cluster_layout_vmnk = cute.tiled_divide(
            cute.make_layout((*self.cluster_shape_mn, 1)), (tiled_mma.thr_id.shape,)
        )
        self.cluster_layout_sfb_vmnk = cute.tiled_divide(
            cute.make_layout((*self.cluster_shape_mn, 1)), (tiled_mma_sfb.thr_id.shape,)
        )
        self.num_mcast_ctas_a = cute.size(self.cluster_layout_vmnk.shape[2])
        self.num_mcast_ctas_b = cute.size(self.cluster_layout_vmnk.shape[1])
        self.is_a_mcast = self.num_mcast_ctas_a > 1
        self.is_b_mcast = self.num_mcast_ctas_b > 1
        self.epi_tile = sm100_utils.compute_epilogue_tile_shape(
            self.cta_tile_shape_mnk, self.use_2cta, self.c_layout, self.c_dtype
        )
        self.a_smem_layout_staged = sm100_utils.make_smem_layout_a(
            tiled_mma, self.mma_tiler, self.ab_dtype, self.num_ab_stage
        )
        self.b_smem_layout_staged = sm100_utils.make_smem_layout_b(
            tiled_mma, self.mma_tiler, self.ab_dtype, self.num_ab_stage
        )
        self.sfa_smem_layout_staged = blockscaled_utils.make_smem_layout_sfa(
            tiled_mma, self.mma_tiler, SM100_SF_VEC_SIZE, self.num_ab_stage
        )
        self.sfb_smem_layout_staged = blockscaled_utils.make_smem_layout_sfb(
            tiled_mma, self.mma_tiler, SM100_SF_VEC_SIZE, self.num_ab_stage
        )
        self.c_smem_layout_staged = sm100_utils.make_smem_layout_epi(
            self.c_dtype, self.c_layout, self.epi_tile, self.num_c_stage
        )
        # The host-side budget functions must describe exactly what is compiled.
        stage_bytes = (
            cute.size_in_bytes(
                self.ab_dtype, cute.slice_(self.a_smem_layout_staged, (None, None, None, 0))
            )
            + cute.size_in_bytes(
                self.ab_dtype, cute.slice_(self.b_smem_layout_staged, (None, None, None, 0))
            )
            + cute.size_in_bytes(
                self.sf_dtype, cute.slice_(self.sfa_smem_layout_staged, (None, None, None, 0))
            )
            + cute.size_in_bytes(
                self.sf_dtype, cute.slice_(self.sfb_smem_layout_staged, (None, None, None, 0))
            )
        )
        if stage_bytes != sm100_stage_bytes(self.cfg):
            raise RuntimeError(
                f"stage bytes {stage_bytes} != host model {sm100_stage_bytes(self.cfg)}"
            )
        epi_elems = cute.size(cute.slice_(self.c_smem_layout_staged, (None, None, 0)))
        if epi_elems != SM100_EPI_TILE_ELEMS:
            raise RuntimeError(f"epilogue tile has {epi_elems} elements != {SM100_EPI_TILE_ELEMS}")

    # ----------------------------------------------------------------- per-group tensors
    @cute.jit
    def _make_group_tensors(
        self,
        ptr_a: cutlass.Int64,
        ptr_b: cutlass.Int64,
        ptr_sfa: cutlass.Int64,
        ptr_sfb: cutlass.Int64,
        ptr_c: cutlass.Int64,
        m: cutlass.Int32,
        n: cutlass.Int32,
        k: cutlass.Int32,
    ):
        """Global tensors of one group in the MMA's roles: (mma_a, mma_b, sf_a, sf_b, c).

        The GEMM builds its TMA atoms from these with placeholder sizes and the init kernel
        with the real ones, so both see the same layout structure (same descriptor fields).
        """
        one = cutlass.Int32(1)
        # K-major operands; row strides are K elements = K/2 bytes, K % 256 == 0
        k_stride = cute.assume(k, divby=SM100_TILE_K)
        gA = cute.make_tensor(
            cute.make_ptr(self.ab_dtype, ptr_a, cute.AddressSpace.gmem, assumed_align=16),
            cute.make_layout((m, k, one), stride=(k_stride, 1, 0)),
        )
        gB = cute.make_tensor(
            cute.make_ptr(self.ab_dtype, ptr_b, cute.AddressSpace.gmem, assumed_align=16),
            cute.make_layout((n, k, one), stride=(k_stride, 1, 0)),
        )
        # blocked scale layout: ((32, 4), rest_mn), ((16, 4), rest_k) atoms of 512 bytes
        gSFA = cute.make_tensor(
            cute.make_ptr(self.sf_dtype, ptr_sfa, cute.AddressSpace.gmem, assumed_align=16),
            blockscaled_utils.tile_atom_to_shape_SF((m, k, one), SM100_SF_VEC_SIZE),
        )
        gSFB = cute.make_tensor(
            cute.make_ptr(self.sf_dtype, ptr_sfb, cute.AddressSpace.gmem, assumed_align=16),
            blockscaled_utils.tile_atom_to_shape_SF((n, k, one), SM100_SF_VEC_SIZE),
        )
        c_ptr = cute.make_ptr(self.c_dtype, ptr_c, cute.AddressSpace.gmem, assumed_align=16)
        n_stride = cute.assume(n, divby=8)
        if cutlass.const_expr(self.cfg.swap_ab):
            # c^T: (N, M) with N contiguous
            gC = cute.make_tensor(c_ptr, cute.make_layout((n, m, one), stride=(1, n_stride, 0)))
            return gB, gA, gSFB, gSFA, gC
        else:
            gC = cute.make_tensor(c_ptr, cute.make_layout((m, n, one), stride=(n_stride, 1, 0)))
            return gA, gB, gSFA, gSFB, gC

    def _make_tma_atoms(self, tiled_mma, tiled_mma_sfb, gA, gB, gSFA, gSFB, gC):
        """TMA atoms (descriptor templates) and TMA coordinate tensors, in MMA roles."""
        a_smem_layout = cute.slice_(self.a_smem_layout_staged, (None, None, None, 0))
        b_smem_layout = cute.slice_(self.b_smem_layout_staged, (None, None, None, 0))
        sfa_smem_layout = cute.slice_(self.sfa_smem_layout_staged, (None, None, None, 0))
        sfb_smem_layout = cute.slice_(self.sfb_smem_layout_staged, (None, None, None, 0))
        tma_atom_a, tma_tensor_a = cute.nvgpu.make_tiled_tma_atom_A(
            sm100_utils.cluster_shape_to_tma_atom_A(self.cluster_shape_mn, tiled_mma.thr_id),
            gA,
            a_smem_layout,
            self.mma_tiler,
            tiled_mma,
            self.cluster_layout_vmnk.shape,
        )
        tma_atom_b, tma_tensor_b = cute.nvgpu.make_tiled_tma_atom_B(
            sm100_utils.cluster_shape_to_tma_atom_B(self.cluster_shape_mn, tiled_mma.thr_id),
            gB,
            b_smem_layout,
            self.mma_tiler,
            tiled_mma,
            self.cluster_layout_vmnk.shape,
        )
        # scales move as 16-bit elements: TMA's minimum box width is 16 bytes
        tma_atom_sfa, tma_tensor_sfa = cute.nvgpu.make_tiled_tma_atom_A(
            sm100_utils.cluster_shape_to_tma_atom_A(self.cluster_shape_mn, tiled_mma.thr_id),
            gSFA,
            sfa_smem_layout,
            self.mma_tiler,
            tiled_mma,
            self.cluster_layout_vmnk.shape,
            internal_type=cutlass.Int16,
        )
        tma_atom_sfb, tma_tensor_sfb = cute.nvgpu.make_tiled_tma_atom_B(
            sm100_utils.cluster_shape_to_tma_atom_SFB(self.cluster_shape_mn, tiled_mma.thr_id),
            gSFB,
            sfb_smem_layout,
            self.mma_tiler_sfb,
            tiled_mma_sfb,
            self.cluster_layout_sfb_vmnk.shape,
            internal_type=cutlass.Int16,
        )
        epi_smem_layout = cute.slice_(self.c_smem_layout_staged, (None, None, 0))
        tma_atom_c, tma_tensor_c = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileS2GOp(), gC, epi_smem_layout, self.epi_tile
        )
        atoms = (tma_atom_a, tma_atom_b, tma_atom_sfa, tma_atom_sfb, tma_atom_c)
        tensors = (tma_tensor_a, tma_tensor_b, tma_tensor_sfa, tma_tensor_sfb, tma_tensor_c)
        return atoms, tensors

    def _launch_setup(self, sizes_ptr, tensormaps_ptr, num_groups: cutlass.Int32):
        """What both launches share: the MMAs, smem layouts, the metadata views and TMA atoms
        built from placeholder tensors. Only the atoms' layout structure matters (it fixes
        the TMA partitions); real addresses and extents live in the per-group descriptors."""
        tiled_mma, tiled_mma_sfb = self._make_tiled_mmas()
        self._setup_attributes(tiled_mma, tiled_mma_sfb)
        # (G, 4) M, N, K, L
        mSizes = cute.make_tensor(sizes_ptr, cute.make_layout((num_groups, 4), stride=(4, 1)))
        # (G, SM100_NUM_DESC, 16)
        mDesc = cute.make_tensor(
            tensormaps_ptr,
            cute.make_layout((num_groups, SM100_NUM_DESC, 16), stride=(SM100_NUM_DESC * 16, 16, 1)),
        )
        placeholder = cutlass.Int32(SM100_TILE_K)
        zero = cutlass.Int64(0)
        tensors = self._make_group_tensors(
            zero, zero, zero, zero, zero, placeholder, placeholder, placeholder
        )
        atoms, tma_tensors = self._make_tma_atoms(tiled_mma, tiled_mma_sfb, *tensors)
        return tiled_mma, tiled_mma_sfb, mSizes, mDesc, atoms, tma_tensors

    # ----------------------------------------------------------------- descriptor init
    @cute.jit
    def init_descriptors(
        self,
        sizes_ptr: cute.Pointer,
        ptrs_ptr: cute.Pointer,
        tensormaps_ptr: cute.Pointer,
        num_groups: cutlass.Int32,
    ):
        """Write the 5 TMA descriptors of every group into `tensormaps` (G, 5, 16) int64, one
        CTA per group. G is a launch argument: one compiled kernel serves every count."""
        _, _, mSizes, mDesc, atoms, _ = self._launch_setup(sizes_ptr, tensormaps_ptr, num_groups)
        # (G, 5) a, b, sfa, sfb, c
        mPtrs = cute.make_tensor(ptrs_ptr, cute.make_layout((num_groups, 5), stride=(5, 1)))

        @cute.struct
        class InitStorage:
            # tensormap.replace works on a 128-byte aligned smem copy of the descriptor
            desc: cute.struct.Align[
                cute.struct.MemRange[cutlass.Int64, SM100_NUM_DESC * SM100_DESC_BYTES // 8],
                SM100_DESC_BYTES,
            ]

        self.init_storage = InitStorage
        self.init_kernel(atoms, mSizes, mPtrs, mDesc).launch(
            grid=(num_groups, 1, 1), block=[32, 1, 1]
        )

    @cute.kernel
    def init_kernel(
        self, atoms: tuple, mSizes: cute.Tensor, mPtrs: cute.Tensor, mDesc: cute.Tensor
    ):
        group, _, _ = cute.arch.block_idx()
        smem = utils.SmemAllocator()
        storage = smem.allocate(self.init_storage)
        desc_smem = storage.desc.data_ptr()
        tensors = self._make_group_tensors(
            mPtrs[(group, 0)],
            mPtrs[(group, 1)],
            mPtrs[(group, 2)],
            mPtrs[(group, 3)],
            mPtrs[(group, 4)],
            mSizes[(group, 0)],
            mSizes[(group, 1)],
            mSizes[(group, 2)],
        )
        manager = TensorMapManager(TensorMapUpdateMode.SMEM, SM100_DESC_BYTES)
        desc_gmem = [
            manager.get_tensormap_ptr(mDesc[(group, d, None)].iterator)
            for d in range(SM100_NUM_DESC)
        ]
        desc_sptr = [desc_smem + d * (SM100_DESC_BYTES // 8) for d in range(SM100_NUM_DESC)]
        with cute.arch.elect_one():
            for d in cutlass.range_constexpr(SM100_NUM_DESC):
                cpasync.copy_tensormap(atoms[d], desc_sptr[d])
        cute.arch.sync_warp()
        # patch address / extents / strides in smem, then copy out with a release fence
        manager.update_tensormap(tensors, atoms, tuple(desc_gmem), 0, tuple(desc_sptr))

    # ----------------------------------------------------------------- GEMM launch
    @cute.jit
    def __call__(
        self,
        sizes_ptr: cute.Pointer,
        schedule_ptr: cute.Pointer,
        tensormaps_ptr: cute.Pointer,
        num_tiles: cutlass.Int32,
        num_ctas: cutlass.Int32,
        num_groups: cutlass.Int32,
    ):
        """Launch the persistent GEMM on `num_ctas` CTAs (a multiple of cta_group)."""
        tiled_mma, tiled_mma_sfb, mSizes, mDesc, atoms, tma_tensors = self._launch_setup(
            sizes_ptr, tensormaps_ptr, num_groups
        )
        # (T, 3) group, tile_m_idx, tile_n_idx
        mSched = cute.make_tensor(schedule_ptr, cute.make_layout((num_tiles, 3), stride=(3, 1)))
        self.num_tma_load_bytes = sm100_tma_bytes_per_stage(self.cfg)

        @cute.struct
        class SharedStorage:
            ab_full_mbar: cute.struct.MemRange[cutlass.Int64, self.num_ab_stage]
            ab_empty_mbar: cute.struct.MemRange[cutlass.Int64, self.num_ab_stage]
            acc_full_mbar: cute.struct.MemRange[cutlass.Int64, self.num_acc_stage]
            acc_empty_mbar: cute.struct.MemRange[cutlass.Int64, self.num_acc_stage]
            tmem_dealloc_mbar: cutlass.Int64
            tmem_holding_buf: cutlass.Int32
            # (EPI_TILE_M, EPI_TILE_N, C_STAGE)
            sC: cute.struct.Align[
                cute.struct.MemRange[self.c_dtype, cute.cosize(self.c_smem_layout_staged.outer)],
                SM100_SMEM_ALIGN,
            ]
            # (MMA, MMA_M, MMA_K, STAGE)
            sA: cute.struct.Align[
                cute.struct.MemRange[self.ab_dtype, cute.cosize(self.a_smem_layout_staged.outer)],
                SM100_SMEM_ALIGN,
            ]
            # (MMA, MMA_N, MMA_K, STAGE)
            sB: cute.struct.Align[
                cute.struct.MemRange[self.ab_dtype, cute.cosize(self.b_smem_layout_staged.outer)],
                SM100_SMEM_ALIGN,
            ]
            # (MMA, MMA_M, MMA_K, STAGE)
            sSFA: cute.struct.Align[
                cute.struct.MemRange[self.sf_dtype, cute.cosize(self.sfa_smem_layout_staged)],
                SM100_SMEM_ALIGN,
            ]
            # (MMA, MMA_N, MMA_K, STAGE)
            sSFB: cute.struct.Align[
                cute.struct.MemRange[self.sf_dtype, cute.cosize(self.sfb_smem_layout_staged)],
                SM100_SMEM_ALIGN,
            ]

        self.shared_storage = SharedStorage
        if cutlass.const_expr(SharedStorage.size_in_bytes() > sm100_smem_bytes(self.cfg)):
            raise RuntimeError(
                f"shared storage {SharedStorage.size_in_bytes()} B exceeds the host model "
                f"{sm100_smem_bytes(self.cfg)} B"
            )
        self.kernel(
            tiled_mma,
            tiled_mma_sfb,
            atoms,
            tma_tensors,
            (
                self.cluster_layout_vmnk,
                self.cluster_layout_sfb_vmnk,
                self.a_smem_layout_staged,
                self.b_smem_layout_staged,
                self.sfa_smem_layout_staged,
                self.sfb_smem_layout_staged,
                self.c_smem_layout_staged,
                self.epi_tile,
            ),
            mSizes,
            mSched,
            mDesc,
            num_tiles,
        ).launch(
            grid=(num_ctas, 1, 1),
            block=[self.threads_per_cta, 1, 1],
            cluster=(*self.cluster_shape_mn, 1),
            min_blocks_per_mp=1,
            use_pdl=self.cfg.pdl,
        )

    # ----------------------------------------------------------------- GEMM kernel
    @cute.kernel
    def kernel(
        self,
        tiled_mma: cute.TiledMma,
        tiled_mma_sfb: cute.TiledMma,
        atoms: tuple,
        tma_tensors: tuple,
        layouts: tuple,
        mSizes: cute.Tensor,
        mSched: cute.Tensor,
        mDesc: cute.Tensor,
        num_tiles: cutlass.Int32,
    ):
        lay = Sm100KernelLayouts(*layouts)
        tma_atom_a, tma_atom_b, tma_atom_sfa, tma_atom_sfb, tma_atom_c = atoms
        mA, mB, mSFA, mSFB, mC = tma_tensors
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        bidx, _, _ = cute.arch.block_idx()
        grid_x, _, _ = cute.arch.grid_dim()
        tidx, _, _ = cute.arch.thread_idx()

        # the CTA pair shares one schedule row; clusters stride over the rows
        cluster_idx = bidx // self.cfg.cta_group
        num_clusters = grid_x // self.cfg.cta_group
        mma_tile_coord_v = bidx % cute.size(tiled_mma.thr_id.shape)
        is_leader_cta = mma_tile_coord_v == 0
        cta_rank_in_cluster = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        block_in_cluster_coord_vmnk = lay.cluster_vmnk.get_flat_coord(cta_rank_in_cluster)
        block_in_cluster_coord_sfb_vmnk = lay.cluster_sfb_vmnk.get_flat_coord(cta_rank_in_cluster)

        smem = utils.SmemAllocator()
        storage = smem.allocate(self.shared_storage)

        # TMA warp -> MMA warp: the leader's barrier counts both CTAs' TMA bytes
        ab_pipeline = pipeline.PipelineTmaUmma.create(
            barrier_storage=storage.ab_full_mbar.data_ptr(),
            num_stages=self.num_ab_stage,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(
                pipeline.Agent.Thread, self.num_mcast_ctas_a + self.num_mcast_ctas_b - 1
            ),
            tx_count=self.num_tma_load_bytes,
            cta_layout_vmnk=lay.cluster_vmnk,
        )
        # MMA warp -> epilogue warps of both CTAs (one elected thread per warp releases)
        acc_pipeline = pipeline.PipelineUmmaAsync.create(
            barrier_storage=storage.acc_full_mbar.data_ptr(),
            num_stages=self.num_acc_stage,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(
                pipeline.Agent.Thread, len(self.epilog_warp_ids) * self.cfg.cta_group
            ),
            cta_layout_vmnk=lay.cluster_vmnk,
        )
        if cutlass.const_expr(self.use_2cta):
            if warp_idx == self.tma_warp_id:
                with cute.arch.elect_one():
                    # the peer's epilogue warp 0 arrives once it no longer reads TMEM
                    cute.arch.mbarrier_init(storage.tmem_dealloc_mbar.ptr, 32)
        pipeline.pipeline_init_arrive(cluster_shape_mn=self.cluster_shape_mn, is_relaxed=True)

        # (MMA, MMA_M, MMA_K, STAGE)
        sA = storage.sA.get_tensor(lay.a_smem.outer, swizzle=lay.a_smem.inner)
        # (MMA, MMA_N, MMA_K, STAGE)
        sB = storage.sB.get_tensor(lay.b_smem.outer, swizzle=lay.b_smem.inner)
        # (MMA, MMA_M, MMA_K, STAGE)
        sSFA = storage.sSFA.get_tensor(lay.sfa_smem)
        # (MMA, MMA_N, MMA_K, STAGE)
        sSFB = storage.sSFB.get_tensor(lay.sfb_smem)
        # (EPI_TILE_M, EPI_TILE_N, C_STAGE)
        sC = storage.sC.get_tensor(lay.c_smem.outer, swizzle=lay.c_smem.inner)

        thr_mma = tiled_mma.get_slice(mma_tile_coord_v)
        thr_mma_sfb = tiled_mma_sfb.get_slice(mma_tile_coord_v)
        # (bM, bK, RestM, RestK, RestL)
        gA = cute.local_tile(mA, cute.slice_(self.mma_tiler, (None, 0, None)), (None, None, None))
        # (bN, bK, RestN, RestK, RestL)
        gB = cute.local_tile(mB, cute.slice_(self.mma_tiler, (0, None, None)), (None, None, None))
        # (bM, bK, RestM, RestK, RestL)
        gSFA = cute.local_tile(
            mSFA, cute.slice_(self.mma_tiler, (None, 0, None)), (None, None, None)
        )
        # (bN, bK, RestN, RestK, RestL)
        gSFB = cute.local_tile(
            mSFB, cute.slice_(self.mma_tiler_sfb, (0, None, None)), (None, None, None)
        )
        # (bM, bN, RestM, RestN, RestL)
        gC = cute.local_tile(mC, cute.slice_(self.mma_tiler, (None, None, 0)), (None, None, None))
        # (MMA, MMA_M, MMA_K, RestM, RestK, RestL)
        tCgA = thr_mma.partition_A(gA)
        # (MMA, MMA_N, MMA_K, RestN, RestK, RestL)
        tCgB = thr_mma.partition_B(gB)
        # (MMA, MMA_M, MMA_K, RestM, RestK, RestL)
        tCgSFA = thr_mma.partition_A(gSFA)
        # (MMA, MMA_N, MMA_K, RestN, RestK, RestL)
        tCgSFB = thr_mma_sfb.partition_B(gSFB)
        # (MMA, MMA_M, MMA_N, RestM, RestN, RestL)
        tCgC = thr_mma.partition_C(gC)

        # (MMA, MMA_M, MMA_K, STAGE)
        tCrA = tiled_mma.make_fragment_A(sA)
        # (MMA, MMA_N, MMA_K, STAGE)
        tCrB = tiled_mma.make_fragment_B(sB)
        # (MMA, MMA_M, MMA_N, ACC_STAGE)
        tCtAcc_fake = tiled_mma.make_fragment_C(
            cute.append(tiled_mma.partition_shape_C(self.mma_tiler[:2]), self.num_acc_stage)
        )

        pipeline.pipeline_init_wait(cluster_shape_mn=self.cluster_shape_mn)
        if cutlass.const_expr(self.cfg.pdl):
            # as in the Hopper kernel: this grid may start during the previous kernel's
            # tail; nothing in global memory (schedule, descriptors, operands) is touched
            # before the wait, and the trigger lets the next call's grid queue behind this one
            cute.arch.griddepcontrol_wait()
            cute.arch.griddepcontrol_launch_dependents()

        if warp_idx == self.tma_warp_id:
            self.load(
                lay,
                ab_pipeline,
                tma_atom_a,
                tma_atom_b,
                tma_atom_sfa,
                tma_atom_sfb,
                tCgA,
                tCgB,
                tCgSFA,
                tCgSFB,
                sA,
                sB,
                sSFA,
                sSFB,
                block_in_cluster_coord_vmnk,
                block_in_cluster_coord_sfb_vmnk,
                mSizes,
                mSched,
                mDesc,
                cluster_idx,
                num_clusters,
                num_tiles,
            )
        if warp_idx == self.mma_warp_id:
            self.mma(
                lay,
                tiled_mma,
                ab_pipeline,
                acc_pipeline,
                tCrA,
                tCrB,
                sSFA,
                sSFB,
                tCtAcc_fake,
                storage.tmem_holding_buf.ptr,
                is_leader_cta,
                mSizes,
                mSched,
                cluster_idx,
                num_clusters,
                num_tiles,
            )
        if warp_idx < self.mma_warp_id:
            self.epilogue(
                lay,
                tidx,
                warp_idx,
                acc_pipeline,
                tma_atom_c,
                tCgC,
                sC,
                tCtAcc_fake,
                storage.tmem_holding_buf.ptr,
                storage.tmem_dealloc_mbar.ptr,
                cta_rank_in_cluster,
                mSizes,
                mSched,
                mDesc,
                cluster_idx,
                num_clusters,
                num_tiles,
            )

    @cute.jit
    def _mma_tile_coord(self, mSched: cute.Tensor, t: cutlass.Int32):
        """(group, MMA tile index along the MMA's M, along its N) of schedule row t."""
        group = mSched[(t, 0)]
        if cutlass.const_expr(self.cfg.swap_ab):
            return group, mSched[(t, 2)], mSched[(t, 1)]
        else:
            return group, mSched[(t, 1)], mSched[(t, 2)]

    # ----------------------------------------------------------------- TMA warp
    @cute.jit
    def load(
        self,
        lay: Sm100KernelLayouts,
        ab_pipeline,
        tma_atom_a: cute.CopyAtom,
        tma_atom_b: cute.CopyAtom,
        tma_atom_sfa: cute.CopyAtom,
        tma_atom_sfb: cute.CopyAtom,
        tCgA: cute.Tensor,
        tCgB: cute.Tensor,
        tCgSFA: cute.Tensor,
        tCgSFB: cute.Tensor,
        sA: cute.Tensor,
        sB: cute.Tensor,
        sSFA: cute.Tensor,
        sSFB: cute.Tensor,
        block_in_cluster_coord_vmnk,
        block_in_cluster_coord_sfb_vmnk,
        mSizes: cute.Tensor,
        mSched: cute.Tensor,
        mDesc: cute.Tensor,
        cluster_idx: cutlass.Int32,
        num_clusters: cutlass.Int32,
        num_tiles: cutlass.Int32,
    ):
        a_mcast_mask = None
        b_mcast_mask = None
        sfa_mcast_mask = None
        sfb_mcast_mask = None
        if cutlass.const_expr(self.is_a_mcast or self.is_b_mcast or self.use_2cta):
            a_mcast_mask = cpasync.create_tma_multicast_mask(
                lay.cluster_vmnk, block_in_cluster_coord_vmnk, mcast_mode=2
            )
            b_mcast_mask = cpasync.create_tma_multicast_mask(
                lay.cluster_vmnk, block_in_cluster_coord_vmnk, mcast_mode=1
            )
            sfa_mcast_mask = cpasync.create_tma_multicast_mask(
                lay.cluster_vmnk, block_in_cluster_coord_vmnk, mcast_mode=2
            )
            sfb_mcast_mask = cpasync.create_tma_multicast_mask(
                lay.cluster_sfb_vmnk, block_in_cluster_coord_sfb_vmnk, mcast_mode=1
            )
        a_cta_layout = cute.make_layout(cute.slice_(lay.cluster_vmnk, (0, 0, None, 0)).shape)
        b_cta_layout = cute.make_layout(cute.slice_(lay.cluster_vmnk, (0, None, 0, 0)).shape)
        sfb_cta_layout = cute.make_layout(cute.slice_(lay.cluster_sfb_vmnk, (0, None, 0, 0)).shape)
        # ((atom_v, rest_v), STAGE) / ((atom_v, rest_v), RestM, RestK, RestL)
        tAsA, tAgA = cpasync.tma_partition(
            tma_atom_a,
            block_in_cluster_coord_vmnk[2],
            a_cta_layout,
            cute.group_modes(sA, 0, 3),
            cute.group_modes(tCgA, 0, 3),
        )
        # ((atom_v, rest_v), STAGE) / ((atom_v, rest_v), RestN, RestK, RestL)
        tBsB, tBgB = cpasync.tma_partition(
            tma_atom_b,
            block_in_cluster_coord_vmnk[1],
            b_cta_layout,
            cute.group_modes(sB, 0, 3),
            cute.group_modes(tCgB, 0, 3),
        )
        # ((atom_v, rest_v), STAGE) / ((atom_v, rest_v), RestM, RestK, RestL)
        tAsSFA, tAgSFA = cpasync.tma_partition(
            tma_atom_sfa,
            block_in_cluster_coord_vmnk[2],
            a_cta_layout,
            cute.group_modes(sSFA, 0, 3),
            cute.group_modes(tCgSFA, 0, 3),
        )
        tAsSFA = cute.filter_zeros(tAsSFA)
        tAgSFA = cute.filter_zeros(tAgSFA)
        # ((atom_v, rest_v), STAGE) / ((atom_v, rest_v), RestN, RestK, RestL)
        tBsSFB, tBgSFB = cpasync.tma_partition(
            tma_atom_sfb,
            block_in_cluster_coord_sfb_vmnk[1],
            sfb_cta_layout,
            cute.group_modes(sSFB, 0, 3),
            cute.group_modes(tCgSFB, 0, 3),
        )
        tBsSFB = cute.filter_zeros(tBsSFB)
        tBgSFB = cute.filter_zeros(tBgSFB)

        manager = TensorMapManager(TensorMapUpdateMode.SMEM, SM100_DESC_BYTES)
        producer_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Producer, self.num_ab_stage
        )
        last_group = cutlass.Int32(-1)
        t = cluster_idx
        while t < num_tiles:
            group, tile_mma_m, tile_mma_n = self._mma_tile_coord(mSched, t)
            k_tiles = mSizes[(group, 2)] // SM100_TILE_K
            # per operand: TMA atom, this tile's gmem slices ((atom_v, rest_v), RestK),
            # smem stages ((atom_v, rest_v), STAGE), multicast mask, group descriptor
            operands = (
                (tma_atom_a, tAgA[(None, tile_mma_m, None, 0)], tAsA, a_mcast_mask, SM100_DESC_A),
                (tma_atom_b, tBgB[(None, tile_mma_n, None, 0)], tBsB, b_mcast_mask, SM100_DESC_B),
                (tma_atom_sfa, tAgSFA[(None, tile_mma_m, None, 0)], tAsSFA, sfa_mcast_mask, SM100_DESC_SFA),
                (tma_atom_sfb, tBgSFB[(None, tile_mma_n, None, 0)], tBsSFB, sfb_mcast_mask, SM100_DESC_SFB),
            )
            descs = [manager.get_tensormap_ptr(mDesc[(group, d, None)].iterator) for *_, d in operands]
            if group != last_group:
                # descriptors were written through the generic proxy by the init kernel
                for desc in descs:
                    cpasync.fence_tma_desc_acquire(desc)
            last_group = group

            producer_state.reset_count()
            peek_empty = cutlass.Boolean(1)
            if producer_state.count < k_tiles:
                peek_empty = ab_pipeline.producer_try_acquire(producer_state)
            for _k in cutlass.range(0, k_tiles, 1, unroll=1):
                ab_pipeline.producer_acquire(producer_state, peek_empty)
                full_bar = ab_pipeline.producer_get_barrier(producer_state)
                k = producer_state.count
                s = producer_state.index
                for (atom, gTile, sStages, mask, _), desc in zip(operands, descs):
                    cute.copy(
                        atom,
                        gTile[(None, k)],
                        sStages[(None, s)],
                        tma_bar_ptr=full_bar,
                        mcast_mask=mask,
                        tma_desc_ptr=manager.get_tensormap_ptr(desc, cute.AddressSpace.generic),
                    )
                producer_state.advance()
                peek_empty = cutlass.Boolean(1)
                if producer_state.count < k_tiles:
                    peek_empty = ab_pipeline.producer_try_acquire(producer_state)
            t += num_clusters
        # keep the CTA alive until the MMA warp released every stage it was sent
        ab_pipeline.producer_tail(producer_state)

    # ----------------------------------------------------------------- MMA warp
    def _s2t_copy_and_partition(self, sSF: cute.Tensor, tSF: cute.Tensor):
        """smem -> TMEM copy of one stage's scales (tcgen05.cp 4x32x128b)."""
        # (MMA, MMA_MN, MMA_K, STAGE)
        tCsSF_compact = cute.filter_zeros(sSF)
        # (MMA, MMA_MN, MMA_K)
        tCtSF_compact = cute.filter_zeros(tSF)
        copy_atom_s2t = cute.make_copy_atom(tcgen05.Cp4x32x128bOp(self.cta_group), self.sf_dtype)
        tiled_copy_s2t = tcgen05.make_s2t_copy(copy_atom_s2t, tCtSF_compact)
        thr_copy_s2t = tiled_copy_s2t.get_slice(0)
        # ((ATOM_V, REST_V), Rest_Tiler, MMA_MN, MMA_K, STAGE)
        tCsSF_s2t = tcgen05.get_s2t_smem_desc_tensor(
            tiled_copy_s2t, thr_copy_s2t.partition_S(tCsSF_compact)
        )
        # ((ATOM_V, REST_V), Rest_Tiler, MMA_MN, MMA_K)
        tCtSF_s2t = thr_copy_s2t.partition_D(tCtSF_compact)
        return tiled_copy_s2t, tCsSF_s2t, tCtSF_s2t

    @cute.jit
    def mma(
        self,
        lay: Sm100KernelLayouts,
        tiled_mma: cute.TiledMma,
        ab_pipeline,
        acc_pipeline,
        tCrA: cute.Tensor,
        tCrB: cute.Tensor,
        sSFA: cute.Tensor,
        sSFB: cute.Tensor,
        tCtAcc_fake: cute.Tensor,
        tmem_holding_ptr,
        is_leader_cta,
        mSizes: cute.Tensor,
        mSched: cute.Tensor,
        cluster_idx: cutlass.Int32,
        num_clusters: cutlass.Int32,
        num_tiles: cutlass.Int32,
    ):
        cute.arch.barrier(
            barrier_id=int(Sm100Barrier.TMEM_ALLOC),
            number_of_threads=32 * (1 + len(self.epilog_warp_ids)),
        )
        acc_tmem_ptr = cute.arch.retrieve_tmem_ptr(
            self.acc_dtype, alignment=16, ptr_to_buffer_holding_addr=tmem_holding_ptr
        )
        # (MMA, MMA_M, MMA_N, ACC_STAGE)
        tCtAcc_base = cute.make_tensor(acc_tmem_ptr, tCtAcc_fake.layout)
        # scales sit in TMEM right after the accumulators
        sfa_tmem_ptr = cute.recast_ptr(
            acc_tmem_ptr + tcgen05.find_tmem_tensor_col_offset(tCtAcc_base), dtype=self.sf_dtype
        )
        # (MMA, MMA_M, MMA_K)
        tCtSFA = cute.make_tensor(
            sfa_tmem_ptr,
            blockscaled_utils.make_tmem_layout_sfa(
                tiled_mma,
                self.mma_tiler,
                SM100_SF_VEC_SIZE,
                cute.slice_(lay.sfa_smem, (None, None, None, 0)),
            ),
        )
        sfb_tmem_ptr = cute.recast_ptr(
            acc_tmem_ptr
            + tcgen05.find_tmem_tensor_col_offset(tCtAcc_base)
            + tcgen05.find_tmem_tensor_col_offset(tCtSFA),
            dtype=self.sf_dtype,
        )
        # (MMA, MMA_N, MMA_K)
        tCtSFB = cute.make_tensor(
            sfb_tmem_ptr,
            blockscaled_utils.make_tmem_layout_sfb(
                tiled_mma,
                self.mma_tiler,
                SM100_SF_VEC_SIZE,
                cute.slice_(lay.sfb_smem, (None, None, None, 0)),
            ),
        )
        tmem_cols = (
            tcgen05.find_tmem_tensor_col_offset(tCtAcc_base)
            + tcgen05.find_tmem_tensor_col_offset(tCtSFA)
            + tcgen05.find_tmem_tensor_col_offset(tCtSFB)
        )
        if cutlass.const_expr(tmem_cols != sm100_tmem_columns(self.cfg)):
            raise RuntimeError(f"TMEM use {tmem_cols} != host model {sm100_tmem_columns(self.cfg)}")
        copy_s2t_sfa, tCsSFA_s2t, tCtSFA_s2t = self._s2t_copy_and_partition(sSFA, tCtSFA)
        copy_s2t_sfb, tCsSFB_s2t, tCtSFB_s2t = self._s2t_copy_and_partition(sSFB, tCtSFB)
        num_k_blocks = cute.size(tCrA, mode=[2])

        consumer_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Consumer, self.num_ab_stage
        )
        acc_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Producer, self.num_acc_stage
        )
        t = cluster_idx
        while t < num_tiles:
            group = mSched[(t, 0)]
            k_tiles = mSizes[(group, 2)] // SM100_TILE_K
            # (MMA, MMA_M, MMA_N)
            tCtAcc = tCtAcc_base[(None, None, None, acc_state.index)]
            consumer_state.reset_count()
            peek_full = cutlass.Boolean(1)
            if consumer_state.count < k_tiles and is_leader_cta:
                peek_full = ab_pipeline.consumer_try_wait(consumer_state)
            if is_leader_cta:
                acc_pipeline.producer_acquire(acc_state)
            # the first MMA of a tile must overwrite the TMEM accumulator
            tiled_mma.set(tcgen05.Field.ACCUMULATE, False)
            for _k in cutlass.range(0, k_tiles, 1, unroll=1):
                if is_leader_cta:
                    ab_pipeline.consumer_wait(consumer_state, peek_full)
                    s2t_stage = (None, None, None, None, consumer_state.index)
                    cute.copy(copy_s2t_sfa, tCsSFA_s2t[s2t_stage], tCtSFA_s2t)
                    cute.copy(copy_s2t_sfb, tCsSFB_s2t[s2t_stage], tCtSFB_s2t)
                    for kb in cutlass.range(num_k_blocks, unroll_full=True):
                        kb_coord = (None, None, kb, consumer_state.index)
                        tiled_mma.set(tcgen05.Field.SFA, tCtSFA[(None, None, kb)].iterator)
                        tiled_mma.set(tcgen05.Field.SFB, tCtSFB[(None, None, kb)].iterator)
                        cute.gemm(tiled_mma, tCtAcc, tCrA[kb_coord], tCrB[kb_coord], tCtAcc)
                        tiled_mma.set(tcgen05.Field.ACCUMULATE, True)
                    # tcgen05.commit frees the stage once these MMAs have read it
                    ab_pipeline.consumer_release(consumer_state)
                consumer_state.advance()
                peek_full = cutlass.Boolean(1)
                if consumer_state.count < k_tiles:
                    if is_leader_cta:
                        peek_full = ab_pipeline.consumer_try_wait(consumer_state)
            if is_leader_cta:
                acc_pipeline.producer_commit(acc_state)
            acc_state.advance()
            t += num_clusters
        acc_pipeline.producer_tail(acc_state)

    # ----------------------------------------------------------------- epilogue warps
    @cute.jit
    def epilogue(
        self,
        lay: Sm100KernelLayouts,
        tidx: cutlass.Int32,
        warp_idx: cutlass.Int32,
        acc_pipeline,
        tma_atom_c: cute.CopyAtom,
        tCgC: cute.Tensor,
        sC: cute.Tensor,
        tCtAcc_fake: cute.Tensor,
        tmem_holding_ptr,
        tmem_dealloc_mbar_ptr,
        cta_rank_in_cluster,
        mSizes: cute.Tensor,
        mSched: cute.Tensor,
        mDesc: cute.Tensor,
        cluster_idx: cutlass.Int32,
        num_clusters: cutlass.Int32,
        num_tiles: cutlass.Int32,
    ):
        num_epi_threads = 32 * len(self.epilog_warp_ids)
        if warp_idx == self.epilog_warp_ids[0]:
            cute.arch.alloc_tmem(
                self.num_tmem_alloc_cols, tmem_holding_ptr, is_two_cta=self.use_2cta
            )
        cute.arch.barrier(
            barrier_id=int(Sm100Barrier.TMEM_ALLOC),
            number_of_threads=32 * (1 + len(self.epilog_warp_ids)),
        )
        acc_tmem_ptr = cute.arch.retrieve_tmem_ptr(
            self.acc_dtype, alignment=16, ptr_to_buffer_holding_addr=tmem_holding_ptr
        )
        # (MMA, MMA_M, MMA_N, ACC_STAGE)
        tCtAcc_base = cute.make_tensor(acc_tmem_ptr, tCtAcc_fake.layout)

        # TMEM -> registers
        copy_atom_t2r = sm100_utils.get_tmem_load_op(
            self.cta_tile_shape_mnk,
            self.c_layout,
            self.c_dtype,
            self.acc_dtype,
            lay.epi_tile,
            self.use_2cta,
        )
        # (EPI_TILE_M, EPI_TILE_N, EPI_M, EPI_N, ACC_STAGE)
        tAcc_epi = cute.flat_divide(tCtAcc_base[((None, None), 0, 0, None)], lay.epi_tile)
        tiled_copy_t2r = tcgen05.make_tmem_copy(copy_atom_t2r, tAcc_epi[(None, None, 0, 0, 0)])
        thr_copy_t2r = tiled_copy_t2r.get_slice(tidx)
        # (T2R, T2R_M, T2R_N, EPI_M, EPI_N, ACC_STAGE)
        tTR_tAcc_base = thr_copy_t2r.partition_S(tAcc_epi)
        # (EPI_TILE_M, EPI_TILE_N, EPI_M, EPI_N, RestM, RestN, RestL)
        gC_epi = cute.flat_divide(tCgC[((None, None), 0, 0, None, None, None)], lay.epi_tile)
        # (T2R, T2R_M, T2R_N, EPI_M, EPI_N, RestM, RestN, RestL)
        tTR_gC = thr_copy_t2r.partition_D(gC_epi)
        # (T2R, T2R_M, T2R_N)
        tTR_rAcc = cute.make_rmem_tensor(
            tTR_gC[(None, None, None, 0, 0, 0, 0, 0)].shape, self.acc_dtype
        )
        tTR_rC = cute.make_rmem_tensor(tTR_rAcc.shape, self.c_dtype)

        # registers -> smem
        copy_atom_r2s = sm100_utils.get_smem_store_op(
            self.c_layout, self.c_dtype, self.acc_dtype, tiled_copy_t2r
        )
        tiled_copy_r2s = cute.make_tiled_copy_D(copy_atom_r2s, tiled_copy_t2r)
        # (R2S, R2S_M, R2S_N, C_STAGE)
        tRS_sC = tiled_copy_r2s.get_slice(tidx).partition_D(sC)
        # (R2S, R2S_M, R2S_N)
        tRS_rC = tiled_copy_r2s.retile(tTR_rC)

        # smem -> gmem (TMA store); ((ATOM_V, REST_V), EPI_M, EPI_N, RestM, RestN, RestL)
        bSG_sC, bSG_gC_all = cpasync.tma_partition(
            tma_atom_c,
            0,
            cute.make_layout(1),
            cute.group_modes(sC, 0, 2),
            cute.group_modes(gC_epi, 0, 2),
        )

        manager = TensorMapManager(TensorMapUpdateMode.SMEM, SM100_DESC_BYTES)
        c_pipeline = pipeline.PipelineTmaStore.create(
            num_stages=self.num_c_stage,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, num_epi_threads),
        )
        acc_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Consumer, self.num_acc_stage
        )
        last_group = cutlass.Int32(-1)
        c_buffer_count = cutlass.Int32(0)
        t = cluster_idx
        while t < num_tiles:
            group, tile_mma_m, tile_mma_n = self._mma_tile_coord(mSched, t)
            desc_c = manager.get_tensormap_ptr(mDesc[(group, SM100_DESC_C, None)].iterator)
            if warp_idx == self.epilog_warp_ids[0]:
                if group != last_group:
                    cpasync.fence_tma_desc_acquire(desc_c)
            last_group = group
            # ((ATOM_V, REST_V), EPI_M * EPI_N)
            bSG_gC = cute.group_modes(
                bSG_gC_all[(None, None, None, tile_mma_m, tile_mma_n, 0)], 1, 3
            )
            # (T2R, T2R_M, T2R_N, EPI_M * EPI_N)
            tTR_tAcc = cute.group_modes(
                tTR_tAcc_base[(None, None, None, None, None, acc_state.index)], 3, 5
            )
            acc_pipeline.consumer_wait(acc_state)
            num_subtiles = cute.size(tTR_tAcc.shape, mode=[3])
            for sub in cutlass.range(num_subtiles):
                cute.copy(tiled_copy_t2r, tTR_tAcc[(None, None, None, sub)], tTR_rAcc)
                tRS_rC.store(tiled_copy_r2s.retile(tTR_rAcc).load().to(self.c_dtype))
                c_buffer = c_buffer_count % self.num_c_stage
                c_buffer_count += 1
                cute.copy(tiled_copy_r2s, tRS_rC, tRS_sC[(None, None, None, c_buffer)])
                # generic-proxy smem writes must be visible to the TMA (async proxy)
                cute.arch.fence_proxy("async.shared", space="cta")
                cute.arch.barrier(
                    barrier_id=int(Sm100Barrier.EPILOGUE), number_of_threads=num_epi_threads
                )
                if warp_idx == self.epilog_warp_ids[0]:
                    cute.copy(
                        tma_atom_c,
                        bSG_sC[(None, c_buffer)],
                        bSG_gC[(None, sub)],
                        tma_desc_ptr=manager.get_tensormap_ptr(desc_c, cute.AddressSpace.generic),
                    )
                    # wait until the other buffer's store has read smem before reuse
                    c_pipeline.producer_commit()
                    c_pipeline.producer_acquire()
                cute.arch.barrier(
                    barrier_id=int(Sm100Barrier.EPILOGUE), number_of_threads=num_epi_threads
                )
            # the accumulator stage is free once every epilogue warp has read it; tcgen05.ld
            # is asynchronous, so wait::ld must retire this warp's TMEM reads before the
            # MMA warp may overwrite the stage
            cute.arch.fence_view_async_tmem_load()
            with cute.arch.elect_one():
                acc_pipeline.consumer_release(acc_state)
            acc_state.advance()
            t += num_clusters

        if warp_idx == self.epilog_warp_ids[0]:
            cute.arch.relinquish_tmem_alloc_permit(is_two_cta=self.use_2cta)
        cute.arch.barrier(barrier_id=int(Sm100Barrier.EPILOGUE), number_of_threads=num_epi_threads)
        if warp_idx == self.epilog_warp_ids[0]:
            if cutlass.const_expr(self.use_2cta):
                # the pair's MMAs write both CTAs' TMEM: free only when the peer is done too
                cute.arch.mbarrier_arrive(tmem_dealloc_mbar_ptr, cta_rank_in_cluster ^ 1)
                cute.arch.mbarrier_wait(tmem_dealloc_mbar_ptr, 0)
            cute.arch.dealloc_tmem(acc_tmem_ptr, self.num_tmem_alloc_cols, is_two_cta=self.use_2cta)
        c_pipeline.producer_tail()


# ---------------------------------------------------------------------------------------
# Compilation (works without a GPU: fake pointers)
# ---------------------------------------------------------------------------------------
# <<< sm100 kernel


def sm100_can_implement(config: Sm100Config, sizes) -> tuple[bool, str]:
    return Sm100BlockScaledGroupedGemm.can_implement(config, sizes)


def compile_sm100(config: Sm100Config) -> CompiledKernels:
    """Compiles the descriptor-init and GEMM kernels of a config for sm_100a; one build
    serves every group count (a launch argument of both). (Without a GPU,
    CUTE_DSL_ARCH=sm_100a selects the target.)"""
    kernel = Sm100BlockScaledGroupedGemm(config)
    desc_align = SM100_DESC_BYTES
    init_fn = cute.compile(
        kernel.init_descriptors,
        fake_ptr(cutlass.Int32), fake_ptr(cutlass.Int64), fake_ptr(cutlass.Int64, desc_align),
        Int32(1),
    )
    gemm_fn = cute.compile(
        kernel,
        fake_ptr(cutlass.Int32), fake_ptr(cutlass.Int32), fake_ptr(cutlass.Int64, desc_align),
        Int32(1), Int32(config.cta_group), Int32(1),
    )

    def init(ptrs, sizes, tensormaps):
        init_fn(
            device_ptr(sizes, cutlass.Int32), device_ptr(ptrs, cutlass.Int64),
            device_ptr(tensormaps, cutlass.Int64, desc_align), Int32(sizes.shape[0]),
        )

    def prepare(sizes, ptrs, tensormaps, sched, scratch):
        args = (
            device_ptr(sizes, cutlass.Int32), device_ptr(sched.schedule, cutlass.Int32),
            device_ptr(tensormaps, cutlass.Int64, desc_align), Int32(sched.host.num_tiles),
            Int32(sched.host.grid), Int32(sizes.shape[0]),
        )
        return bind_launch(gemm_fn, args)

    return CompiledKernels(init, prepare, {"smem_bytes": kernel.shared_storage.size_in_bytes()})


def sm100_backend() -> KernelBackend:
    return KernelBackend(
        name="sm100",
        choose_config=choose_sm100_config,
        can_implement=sm100_can_implement,
        tile_shape=lambda cfg: (cfg.tile_m, cfg.tile_n),
        compile=compile_sm100,
        num_desc=SM100_NUM_DESC,
        grid=sm100_grid_ctas,
        # compile-checked only: no B200 was at hand (README, "Blackwell")
        self_check=True,
        needs_aligned_c=True,
    )


# ======================================================================================
# 8. Hopper kernel (sm_90a): wgmma with the FP4 decode fused into the main loop
# ======================================================================================
# >>> sm90 kernel
SM90_SMEM_CAPACITY = 227 * 1024  # bytes of dynamic smem one CTA may use on sm_90
SM90_DESC_BYTES = 128
SM90_NUM_DESC = 3  # per group: A (tokens), B (weights), C (TMA store); scales use bulk copies
SF_ATOM_BYTES = 512  # 128 rows x 4 scale columns
SM90_PACKED_K_TILE = 128  # K elements per packed pipeline stage (64 bytes per row)
SM90_DECODE_K = 64  # K elements per K-half of a decoded token buffer (one SW128 fp16 row)
SM90_WEIGHT_ROWS_PER_BLOCK = 64  # one wgmma M atom
# Epilogue staging: per consumer WG one (tile_m tokens x 64 weight rows) fp16 box of C
# under the 128-byte swizzle, the TMA store's box (C row-major: tokens are C's rows), in a
# buffer sized for 128 tokens
SM90_C_BOX_ROWS = 128
SM90_C_STAGE_BYTES = SM90_C_BOX_ROWS * SM90_WEIGHT_ROWS_PER_BLOCK * 2
# A FIXUP's epilogue loads this many token pairs' partial sums (16 floats each) before it
# adds the first (all 8 pairs of a 128-token block: 64 registers, free once the K-loop ends)
SM90_FIXUP_BATCH = 8
# The decode leaves both operands 2^-6 below their value (decode_e2m1_word), so the fp32
# accumulators hold 2^-12 of the products: exactly, since every product is at least 2^-32.
# The epilogue multiplies by this before the fp16 conversion, so C is bit for bit the same.
SM90_ACC_SCALE = 4096.0
SM90_ACC_SCALE_PTX = f"0f{struct.unpack('<I', struct.pack('<f', SM90_ACC_SCALE))[0]:08X}"  # PTX f32 literal
# The token decode is spread over the first two consumer warpgroups (sm90_token_split),
# where a third one could not take whole words (tile_n 192 at 128 tokens: 512 words of a
# K-tile's chunks over 384 threads); Sm90Config.decoder_threads
SM90_DECODER_THREADS = 256
# Registers the producer warpgroup keeps after setmaxnreg.dec (TMA issue only), by the
# number of consumer warpgroups; the consumers get the rest of the pool (sm90_register_split)
SM90_PRODUCER_REGISTERS = {2: 40, 3: 32}
# Named barrier of all consumer threads (1 .. 3 are the consumer WGs' own: 1 + WG)
SM90_CONSUMERS_BARRIER = 4


# --------------------------------------------------------------------------------------------
# Host-side configuration and pure functions
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sm90Config:
    tile_m: int = 128  # token rows per tile (wgmma N): 128, or 96 at tile_n 192
    tile_n: int = 128  # weight rows per tile (wgmma M): consumer WGs x blocks x 64
    stages: int = 4  # packed pipeline stages
    token_buffers: int = 3  # decoded token K-tiles (3: the ring needs no empty barrier)
    # token widths of the later phases: a tile whose used token rows fit one runs, after
    # the full tiles, at wgmma N = that width (split_tiles_by_width); () runs all at tile_m
    narrow: tuple[int, ...] = (96, 64)
    swap_ab: bool = True  # only the swap-AB mapping is implemented
    pdl: bool = True  # programmatic dependent launch (overlaps the previous call's tail)
    split_k: bool = False  # split tiles along K to balance the CTAs (k_range_units)

    @property
    def consumer_wgs(self) -> int:
        """Consumer warpgroups: 2 (one or two m64 blocks each), or 3 at tile_n 192 (one
        each), which puts a third warp on every SM sub-partition to hide the decode's
        latency."""
        return 3 if self.tile_n == 192 else 2

    @property
    def blocks(self) -> int:
        """m64 wgmma blocks per consumer warpgroup (each WG owns blocks x 64 weight rows)."""
        return self.tile_n // (self.consumer_wgs * SM90_WEIGHT_ROWS_PER_BLOCK)

    @property
    def consumer_threads(self) -> int:
        return 128 * self.consumer_wgs

    @property
    def threads(self) -> int:
        return self.consumer_threads + 128  # + the producer warpgroup (one TMA warp)

    @property
    def decoder_threads(self) -> int:
        """Consumer threads that share the token decode: all of them where a K-tile's
        4 x tile_m packed words split into one or two whole words each (2 WGs at 128
        tokens, 3 WGs at 96), else the first two WGs (3 WGs at 128 tokens)."""
        if (4 * self.tile_m) % self.consumer_threads == 0:
            return self.consumer_threads
        return SM90_DECODER_THREADS

    @property
    def sf_blocks(self) -> int:
        """128-row scale atoms a weight tile spans: a 192-row tile starts at an atom or in
        the middle of one and always ends within the next."""
        return ceil_div(self.tile_n, 128)

    @property
    def sfa_blocks(self) -> int:
        """128-row scale atoms a token tile spans: one at 128 tokens; a 96-row tile starts
        0, 32, 64 or 96 rows into an atom, so it may end in the next."""
        return 1 if self.tile_m % 128 == 0 else 2

    @property
    def widths(self) -> tuple[int, ...]:
        """Token rows (wgmma N) of each phase, the full tiles' first."""
        return (self.tile_m, *self.narrow)


def sm90_packed_stage_bytes(cfg: Sm90Config) -> int:
    """One packed stage: token and weight rows of 64 bytes, plus their scale slabs (1 KB per
    128 rows: two 512-byte atoms of 4 K-blocks each)."""
    return (cfg.tile_m + cfg.tile_n) * (SM90_PACKED_K_TILE // 2) + (cfg.sfa_blocks + cfg.sf_blocks) * 2 * SF_ATOM_BYTES


def sm90_decoded_bytes(cfg: Sm90Config) -> int:
    """The decoded token ring: token_buffers K-tiles of (tile_m x 128) fp16. The weights
    never go to smem decoded: they are decoded into wgmma's A registers."""
    return cfg.token_buffers * cfg.tile_m * SM90_PACKED_K_TILE * 2


def sm90_fixed_smem_bytes(cfg: Sm90Config) -> int:
    """Everything but the packed stages: the token ring, the epilogue's C staging (one box
    per consumer WG), mbarriers and alignment slack (1 KB for the swizzled buffers)."""
    return sm90_decoded_bytes(cfg) + cfg.consumer_wgs * SM90_C_STAGE_BYTES + 3072


def sm90_smem_bytes(cfg: Sm90Config) -> int:
    return cfg.stages * sm90_packed_stage_bytes(cfg) + sm90_fixed_smem_bytes(cfg)


def sm90_max_stages(cfg: Sm90Config) -> int:
    return (SM90_SMEM_CAPACITY - sm90_fixed_smem_bytes(cfg)) // sm90_packed_stage_bytes(cfg)


def make_sm90_config(tile_n: int = 128, **kw) -> Sm90Config:
    """A config of width tile_n with as many packed stages as fit, at most 4 (4 at tile_n
    128, 3 at 256: more measured no faster)."""
    stages = min(4, sm90_max_stages(Sm90Config(tile_n=tile_n, stages=2, **kw)))
    return Sm90Config(tile_n=tile_n, stages=stages, **kw)


def sm90_token_split(rows: int, decoders: int = SM90_DECODER_THREADS) -> tuple[int, int]:
    """(threads per token row, words of each packed 16-byte chunk that each decodes) when
    `decoders` consumer threads decode a tile's `rows` token rows: every thread takes the
    same words of all 4 chunks of its row, so that the 4 chunks' P[i] make one 16-byte
    store (sm90_token_slot). With 256: 2 x 2 words at 128 rows (all 256 threads) and at 96
    (192), 4 x 1 at 64 (256) and at 32 (128); with 384 (three WGs at 96 tokens), 4 x 1 at
    every width."""
    split = min(4, decoders // rows)
    return split, 4 // split


def sm90_token_lane(tidx: int, rows: int, decoders: int = SM90_DECODER_THREADS) -> tuple[int, int]:
    """(token row, word group) that consumer thread tidx decodes; the group's words are
    wpt * group .. wpt * group + wpt - 1 of every chunk (wpt = 4 // threads per row). A
    warp covers 32 / split rows. Every 8-lane phase of its 16-byte stores is one group of 8
    consecutive rows (8 distinct 16-byte bank groups under SW128); every half-warp of its
    8-byte loads (the whole warp for the 4-byte ones at 64 rows) is 8 consecutive rows x
    all the groups (32 distinct banks under SW64)."""
    split, _ = sm90_token_split(rows, decoders)
    warp, lane = tidx // 32, tidx % 32
    per_warp = 32 // split
    group = (lane // 8) % split
    row = warp * per_warp + (lane // (8 * split)) * 8 + lane % 8
    return row, group


def sm90_weight_lane(tidx: int) -> tuple[int, int]:
    """(row r0, chunk q) of consumer thread tidx: wgmma's m64 A fragment gives the thread rows
    r0 and r0 + 8 of each block (block b of WG w holds tile rows 64 (wgs b + w) ..), and the
    K permutation (sm90_logical_k) its 16-byte chunk q = lane % 4 of each row."""
    lane = tidx % 32
    return (tidx // 128) * 64 + ((tidx % 128) // 32) * 16 + lane // 4, lane % 4


def sm90_scale_word_offset(row, q):
    """Byte offset, in a stage's weight scale slab, of the word holding the two K-block
    scales of packed chunk q of slab row `row`: 1 KB per 128-row atom (2 K-atoms of 512 B),
    CUTLASS's 32 x 4 x 4 order inside. Works on host ints and on kernel Int32s alike."""
    return ((row // 128) * 2 + q // 2) * SF_ATOM_BYTES + (row % 32) * 16 + ((row % 128) // 32) * 4


def sm90_token_scale_atom(row_a, b: int, m):
    """Global 128-row scale atom that a token tile starting at row row_a copies into slab
    atom b of a stage: the one holding row_a and those after, or the group's last again
    past its M (those rows multiply TMA-zero-filled tokens, outputs never stored). Works on
    host ints and on kernel Int32s alike."""
    return cutlass.min(row_a // 128 + b, (m + 127) // 128 - 1)


def sm90_token_scale_row(trow, tm, tile_m: int):
    """Row of the stage's token scale slab that holds tile tm's token row trow: tiles of 128
    start at an atom; one of 96 starts (96 tm) % 128 rows into its first (atom b of the slab
    is sm90_token_scale_atom's b)."""
    if tile_m % 128 == 0:
        return trow
    return trow + (tm * tile_m) % 128


def sm90_consumer_registers(cfg: Sm90Config) -> int:
    """What a consumer thread holds: its fp32 accumulators (blocks x 64 weight rows x tile_m
    tokens over 128 threads) plus about 96 for the A fragments in flight (ptxas keeps 3 of
    16), the packed weight chunks (16) and token chunks (8) of a K-tile, their scales and
    addressing."""
    return cfg.blocks * 64 * cfg.tile_m // 128 + 96


SM90_TILE_NS = (128, 192, 256)  # 2 WGs x 1 block, 3 WGs x 1, 2 WGs x 2 (Sm90Config.consumer_wgs)
# token tile heights: 128, or 96 at tile_n 192, where all three WGs then decode tokens
# (one word per chunk each: Sm90Config.decoder_threads)
SM90_TILE_MS = {128: (128,), 192: (128, 96), 256: (128,)}
SM90_NARROW_WIDTHS = (96, 64, 32)  # whole 16-byte chunks per decoding thread (sm90_token_split)


def sm90_is_valid_tile(cfg: Sm90Config) -> bool:
    # SM90_TILE_MS: every decoder thread decodes part of a token row (sm90_token_split);
    # narrow phases: descending widths below the tile's, at most MAX_PHASES in all
    return (
        cfg.tile_n in SM90_TILE_NS and cfg.tile_m in SM90_TILE_MS[cfg.tile_n]
        and len(cfg.widths) <= MAX_PHASES
        and all(w in SM90_NARROW_WIDTHS and w < cfg.tile_m for w in cfg.narrow)
        and list(cfg.narrow) == sorted(set(cfg.narrow), reverse=True)
    )


def sm90_is_valid_smem(cfg: Sm90Config) -> bool:
    # 3 token buffers: a buffer is rewritten only after every WG's wgmmas of 3 K-tiles ago
    # are known complete through the full barrier they arrived on (see Sm90Fp4GroupedGemm)
    return 2 <= cfg.stages <= sm90_max_stages(cfg) and cfg.token_buffers == 3


def sm90_register_split(cfg: Sm90Config) -> tuple[int, int]:
    """(consumer, producer) registers per thread after setmaxnreg. The CTA's pool is threads
    x launch registers, not the SM's 64K (a request beyond it spins forever): 384 x 168 =
    256 x 232 + 128 x 40 with two consumer WGs, 512 x 128 = 384 x 160 + 128 x 32 with three."""
    producer = SM90_PRODUCER_REGISTERS[cfg.consumer_wgs]
    pool = cfg.threads * sm90_launch_registers(cfg.threads)
    return min(255, (pool - 128 * producer) // cfg.consumer_threads) // 8 * 8, producer


def sm90_is_valid_registers(cfg: Sm90Config) -> bool:
    return sm90_consumer_registers(cfg) <= sm90_register_split(cfg)[0]


def sm90_config_is_legal(cfg: Sm90Config) -> bool:
    """THE single statement of which configs are legal."""
    return (
        sm90_is_valid_tile(cfg)
        and sm90_is_valid_smem(cfg)
        and cfg.swap_ab
        and sm90_is_valid_registers(cfg)
    )


def sm90_launch_registers(threads: int) -> int:
    """Registers per thread ptxas may use for a block of `threads`: it budgets whole
    warpgroups (a block of 17 warps is allotted as 20), in steps of 8, out of 64K."""
    return min(255, 65536 // (ceil_div(threads, 128) * 128)) // 8 * 8


def sm90_is_valid_problem(problem_sizes) -> bool:
    return len(problem_sizes) >= 1 and all(
        m >= 1 and n >= 1 and k >= 256 and k % 256 == 0 and l == 1
        for (m, n, k, l) in problem_sizes
    )


# --------------------------------------------------------------------------------------------
# FP4 decode: the K order inside a packed 16-byte chunk
# --------------------------------------------------------------------------------------------
# A 16-byte chunk q (0..3) of a 64-byte packed row holds K = 32q .. 32q+31 of the K-tile, two
# 16-element scale blocks. decode_e2m1_word turns each of its 4 words into 4 f16x2 values, so
# the chunk gives P[0..15], P[4*word + t] holding nibbles (a_t, b_t) of that word with
# (a, b) = (0, 2), (4, 6), (1, 3), (5, 7). wgmma's A fragment for k-step s holds, per thread
# (quad lane q), the f16x2 pairs at k = 2q and k = 2q + 8 of that step; the kernel feeds it
# P[2s] and P[2s + 1]. So the logical K column of P[i] element e is
#     16 * (i // 2) + 8 * (i % 2) + 2 * q + e,
# a permutation of the tile's 128 K values. The tokens (wgmma B, from smem) are stored in the
# same permuted order, so the dot products are unchanged.
def sm90_logical_k(q: int, i: int, e: int) -> int:
    return 16 * (i // 2) + 8 * (i % 2) + 2 * q + e


def sm90_physical_k(q: int, i: int, e: int) -> int:
    word, t = divmod(i, 4)
    nib = ((0, 2), (4, 6), (1, 3), (5, 7))[t][e]
    return 32 * q + 8 * word + nib


def sm90_token_slot(i: int) -> tuple[int, int]:
    """(K-half, 16-byte chunk) where P[i] of every chunk q lands in the decoded token row:
    logical columns 16 (i // 2) + 8 (i % 2) + 2q + e, i.e. 8 bytes from 4q in that chunk,
    so the 4 chunks' P[i] make one 16-byte store."""
    return i // 8, 2 * ((i // 2) % 4) + (i % 2)


def sm90_fragment_index(h: int, slot: int, block: int, step: int, blocks: int) -> int:
    """Flat u32 index into a consumer's A fragment of 2 k16-steps (CuTe's column-major
    ((1, 2, 2), blocks, 2) layout): register h + 2 slot of wgmma's m64 A atom holds row
    r0 + 8 h, k = 2q + 8 slot of the step, for m64 block `block`."""
    return h + 2 * slot + 4 * block + 4 * blocks * step


def sm90_c_box_offset(tok, wrow):
    """Byte offset of C element (token tok, weight row wrow) in a WG's staging box: 128-byte
    rows of 64 weight rows, the 16-byte chunk XOR (tok % 8) of the TMA's 128-byte swizzle."""
    return tok * 128 + ((wrow // 8) ^ (tok % 8)) * 16 + (wrow % 8) * 2


def sm90_c_stage_offset(wtid, pair):
    """Byte offset, in its WG's C staging box, of the 16-byte row that consumer thread wtid
    (0..127 in its WG) addresses for stmatrix.x4.trans number `pair`: the 4 matrices are
    accumulator columns (tokens) 16 pair + 8 (mat // 2) .. + 7 by weight rows
    16 warp + 8 (mat % 2) .. + 7, mat = lane // 8; transposed, each token's 8 weight rows
    are one 16-byte row of C. The chunk XOR (token % 8) is the TMA's 128-byte swizzle and
    spreads a matrix's 8 rows over all 32 banks."""
    warp, lane = wtid // 32, wtid % 32
    mat = lane // 8
    tok = 16 * pair + 8 * (mat // 2) + lane % 8
    return sm90_c_box_offset(tok, 16 * warp + 8 * (mat % 2))


def sm90_scale_selector(byte0: int, byte1: int) -> int:
    """prmt selector that makes bytes (byte0, byte0, byte1, byte1) of a scale word: each
    16-bit half is then one scale twice, which one cvt widens to its f16x2 multiplier."""
    return (byte0 | byte0 << 4) | (byte1 | byte1 << 4) << 8


def sm90_token_scale_selector(group, wpt: int):
    """prmt selector, for a token thread of word group `group` (sm90_token_lane), that turns
    K-atom a's scale word into the scales of chunks 2a and 2a + 1 (sm90_scale_selector's
    two halves). The thread's words lie in K-block 2q + h of chunk q (h = first word // 2):
    byte 2 (q % 2) + h of the atom's word, so one selector serves both atoms. Works on host
    ints and on kernel Int32s alike."""
    return sm90_scale_selector(0, 2) + 0x1111 * ((wpt * group) // 2)


# --------------------------------------------------------------------------------------------
# Inline PTX helpers (side-effecting where they touch smem, so LLVM keeps them ordered)
# --------------------------------------------------------------------------------------------
def _v(x, loc, ip):
    return x.ir_value(loc=loc, ip=ip)


def _asm_values(n, args, asm, constraints, side_effects, loc, ip, dtype=Uint32):
    ty = llvm.StructType.get_literal([dtype.mlir_type] * n)
    res = llvm.inline_asm(
        ty, args, asm, constraints, has_side_effects=side_effects, is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip,
    )
    return [dtype(llvm.extractvalue(dtype.mlir_type, res, [i], loc=loc, ip=ip)) for i in range(n)]


def _asm_effect(args, asm, constraints, loc, ip) -> None:
    """An inline-asm statement with side effects (a store, copy, fence or wait): LLVM keeps
    it in program order and never drops it."""
    llvm.inline_asm(
        None, args, asm, constraints, has_side_effects=True, is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip,
    )


@dsl_user_op
def ld_shared_v4(addr: Int32, *, loc=None, ip=None):
    return _asm_values(4, [_v(Int32(addr), loc, ip)], "ld.shared.v4.b32 {$0, $1, $2, $3}, [$4];",
                     "=r,=r,=r,=r,r,~{memory}", True, loc, ip)


@dsl_user_op
def ld_shared_v2(addr: Int32, *, loc=None, ip=None):
    return _asm_values(2, [_v(Int32(addr), loc, ip)], "ld.shared.v2.b32 {$0, $1}, [$2];",
                     "=r,=r,r,~{memory}", True, loc, ip)


def _asm_value(dtype, args, asm, constraints, loc, ip, side_effects=True):
    """One value from inline asm; side-effecting by default (a load: kept in order with
    the stores)."""
    res = llvm.inline_asm(
        dtype.mlir_type, args, asm, constraints, has_side_effects=side_effects, is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip,
    )
    return dtype(res)


@dsl_user_op
def ld_shared_u32(addr: Int32, *, loc=None, ip=None) -> Uint32:
    return _asm_value(Uint32, [_v(Int32(addr), loc, ip)], "ld.shared.b32 $0, [$1];", "=r,r,~{memory}", loc, ip)


@dsl_user_op
def st_shared_v4(addr: Int32, v0, v1, v2, v3, *, loc=None, ip=None) -> None:
    _asm_effect(
        [_v(Int32(addr), loc, ip)] + [_v(Uint32(x), loc, ip) for x in (v0, v1, v2, v3)],
        "st.shared.v4.b32 [$0], {$1, $2, $3, $4};", "r,r,r,r,r,~{memory}", loc, ip,
    )


@dsl_user_op
def scale_pair(word: Uint32, selector, *, loc=None, ip=None):
    """The two E4M3 scales s0, s1 that prmt `selector` (sm90_scale_selector) picks from
    `word` -> the f16x2 values (s0, s0) and (s1, s1): one prmt and two cvts (every E4M3
    value is an fp16 value)."""
    return _asm_values(
        2, [_v(Uint32(word), loc, ip), _v(Uint32(selector), loc, ip)],
        "{\n.reg .b32 w;\n.reg .b16 lo, hi;\n"
        "prmt.b32 w, $2, 0, $3;\n"
        "mov.b32 {lo, hi}, w;\n"
        "cvt.rn.f16x2.e4m3x2 $0, lo;\n"
        "cvt.rn.f16x2.e4m3x2 $1, hi;\n}",
        "=r,=r,r,r", False, loc, ip,
    )


@dsl_user_op
def decode_e2m1_word(word: Uint32, scale2: Uint32, *, loc=None, ip=None):
    """8 E2M1 nibbles -> 4 f16x2 of value * scale * 2^-6, exactly.

    Each nibble (sign, e1 e0 m) becomes the E4M3 byte (sign << 7) | (e1 e0 m) << 2, which
    is value * 2^-6, normal or subnormal alike; cvt.f16x2.e4m3x2 widens two at a time and one
    f16x2 multiply by the scale (scale2 = (s, s)) applies it. The results are multiples of
    2^-16 (0.5 x E4M3's 2^-9 x 2^-6) below 42 with 6 significant bits: exact in fp16, whose
    subnormals step by 2^-24. The 2^-6 of both operands is undone in the epilogue
    (SM90_ACC_SCALE), which saves the scales' multiply by 64.
    Outputs: nibbles (0, 2), (4, 6), (1, 3), (5, 7)."""
    return _asm_values(
        4, [_v(Uint32(word), loc, ip), _v(Uint32(scale2), loc, ip)],
        "{\n.reg .b32 e, o, t, u;\n.reg .b16 el, eh, ol, oh;\n"
        "shl.b32 t, $4, 2;\n"
        "shl.b32 u, $4, 4;\n"
        "and.b32 t, t, 0x1C1C1C1C;\n"
        "and.b32 u, u, 0x80808080;\n"
        "or.b32 e, t, u;\n"
        "shr.b32 t, $4, 2;\n"
        "and.b32 t, t, 0x1C1C1C1C;\n"
        "and.b32 u, $4, 0x80808080;\n"
        "or.b32 o, t, u;\n"
        "mov.b32 {el, eh}, e;\n"
        "mov.b32 {ol, oh}, o;\n"
        "cvt.rn.f16x2.e4m3x2 $0, el;\n"
        "cvt.rn.f16x2.e4m3x2 $1, eh;\n"
        "cvt.rn.f16x2.e4m3x2 $2, ol;\n"
        "cvt.rn.f16x2.e4m3x2 $3, oh;\n"
        "mul.rn.f16x2 $0, $0, $5;\n"
        "mul.rn.f16x2 $1, $1, $5;\n"
        "mul.rn.f16x2 $2, $2, $5;\n"
        "mul.rn.f16x2 $3, $3, $5;\n}",
        "=r,=r,=r,=r,r,r", False, loc, ip,
    )


@dsl_user_op
def tma_load_2d(
    smem_dst: Int32, desc: Int64, c0: Int32, c1: Int32, mbar: Int32, pred: Int32, *, loc=None, ip=None
) -> None:
    """cp.async.bulk.tensor 2D with the predicate inside the asm: every lane computes the
    operands, so ptxas never has to move the descriptor into a uniform register under a
    predicate (the illegal '@P R2UR' seen with elect-one blocks on sm_90a)."""
    _asm_effect(
        [_v(Int32(smem_dst), loc, ip), _v(Int64(desc), loc, ip), _v(Int32(c0), loc, ip),
         _v(Int32(c1), loc, ip), _v(Int32(mbar), loc, ip), _v(Int32(pred), loc, ip)],
        "{\n.reg .pred p;\nsetp.ne.b32 p, $5, 0;\n"
        "@p cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [$0], [$1, {$2, $3}], [$4];\n}",
        "r,l,r,r,r,r,~{memory}", loc, ip,
    )


@dsl_user_op
def bulk_load(
    smem_dst: Int32, gsrc: Int64, nbytes: int, mbar: Int32, pred: Int32, *, loc=None, ip=None
) -> None:
    _asm_effect(
        [_v(Int32(smem_dst), loc, ip), _v(Int64(gsrc), loc, ip), _v(Int32(mbar), loc, ip),
         _v(Int32(pred), loc, ip)],
        "{\n.reg .pred p;\nsetp.ne.b32 p, $3, 0;\n"
        "@p cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
        f" [$0], [$1], {nbytes}, [$2];\n}}",
        "r,l,r,r,~{memory}", loc, ip,
    )


@dsl_user_op
def pack_acc_f16x2(lo, hi, *, loc=None, ip=None) -> Uint32:
    """Two fp32 accumulators -> one f16x2 of them times SM90_ACC_SCALE (lo in the low half),
    round to nearest. The multiply is exact (a power of two). It sits inside the asm: the
    same multiply written as DSL arithmetic made ptxas move the tile_n 256 K-range K-loop's
    wgmma descriptors out of the uniform datapath (32 R2UR per K-tile, 552 -> 623 SASS)."""
    return _asm_value(Uint32, [_v(Float32(hi), loc, ip), _v(Float32(lo), loc, ip)],
                      "{\n.reg .f32 a, b;\n"
                      f"mul.rn.f32 a, $1, {SM90_ACC_SCALE_PTX};\n"
                      f"mul.rn.f32 b, $2, {SM90_ACC_SCALE_PTX};\n"
                      "cvt.rn.f16x2.f32 $0, a, b;\n}", "=r,f,f", loc, ip, side_effects=False)


@dsl_user_op
def stmatrix_x4_trans(addr: Int32, v0, v1, v2, v3, *, loc=None, ip=None) -> None:
    _asm_effect(
        [_v(Int32(addr), loc, ip)] + [_v(Uint32(x), loc, ip) for x in (v0, v1, v2, v3)],
        "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [$0], {$1, $2, $3, $4};",
        "r,r,r,r,r,~{memory}", loc, ip,
    )


@dsl_user_op
def tma_store_2d(desc: Int64, c0: Int32, c1: Int32, smem_src: Int32, pred: Int32, *, loc=None, ip=None) -> None:
    """One thread's TMA store of a staged box, committed as its own bulk group (predicate
    inside the asm, as in tma_load_2d). The descriptor is acquired first: it was written
    through the generic proxy by the init kernel."""
    _asm_effect(
        [_v(Int64(desc), loc, ip), _v(Int32(c0), loc, ip), _v(Int32(c1), loc, ip),
         _v(Int32(smem_src), loc, ip), _v(Int32(pred), loc, ip)],
        "{\n.reg .pred p;\nsetp.ne.b32 p, $4, 0;\n"
        "@p fence.proxy.tensormap::generic.acquire.gpu [$0], 128;\n"
        "@p cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [$0, {$1, $2}], [$3];\n"
        "@p cp.async.bulk.commit_group;\n}",
        "l,r,r,r,r,~{memory}", loc, ip,
    )


@dsl_user_op
def st_global_b16(addr: Int64, v: Uint32, pred: Int32, *, loc=None, ip=None) -> None:
    """The low 16 bits of v to global memory, if pred."""
    _asm_effect(
        [_v(Int64(addr), loc, ip), _v(Uint32(v), loc, ip), _v(Int32(pred), loc, ip)],
        "{\n.reg .pred p;\n.reg .b16 l, h;\nsetp.ne.b32 p, $2, 0;\nmov.b32 {l, h}, $1;\n"
        "@p st.global.b16 [$0], l;\n}",
        "l,r,r,~{memory}", loc, ip,
    )


@dsl_user_op
def st_global_v4_b32(addr: Int64, v0, v1, v2, v3, pred: Int32, *, loc=None, ip=None) -> None:
    """16 bytes to global memory, if pred."""
    _asm_effect(
        [_v(Int64(addr), loc, ip)] + [_v(Uint32(x), loc, ip) for x in (v0, v1, v2, v3)] + [_v(Int32(pred), loc, ip)],
        "{\n.reg .pred p;\nsetp.ne.b32 p, $5, 0;\n@p st.global.v4.b32 [$0], {$1, $2, $3, $4};\n}",
        "l,r,r,r,r,r,~{memory}", loc, ip,
    )


@dsl_user_op
def bulk_wait_read(pred: Int32, pending: int = 0, *, loc=None, ip=None) -> None:
    """This thread's bulk stores, all but the `pending` (static) most recent, have finished
    reading shared memory."""
    _asm_effect(
        [_v(Int32(pred), loc, ip)],
        f"{{\n.reg .pred p;\nsetp.ne.b32 p, $0, 0;\n@p cp.async.bulk.wait_group.read {pending};\n}}",
        "r,~{memory}", loc, ip,
    )


@dsl_user_op
def prefetch_l1(addr: Int64, *, loc=None, ip=None) -> None:
    _asm_effect([_v(Int64(addr), loc, ip)], "prefetch.global.L1 [$0];", "l", loc, ip)


@dsl_user_op
def tensormap_acquire(desc: Int64, *, loc=None, ip=None) -> None:
    _asm_effect(
        [_v(Int64(desc), loc, ip)],
        "fence.proxy.tensormap::generic.acquire.gpu [$0], 128;", "l,~{memory}", loc, ip,
    )


# Split-K partial sums between CTAs (gpu scope): the PARTIAL side stores, then one thread
# per WG releases an arrival; the FIXUP side's thread acquires the count, then its WG reads.
@dsl_user_op
def st_global_v4_f32(addr: Int64, v0, v1, v2, v3, *, loc=None, ip=None) -> None:
    _asm_effect(
        [_v(Int64(addr), loc, ip)] + [_v(Float32(x), loc, ip) for x in (v0, v1, v2, v3)],
        "st.global.v4.f32 [$0], {$1, $2, $3, $4};", "l,f,f,f,f,~{memory}", loc, ip,
    )


@dsl_user_op
def ld_global_relaxed_v4_f32(addr: Int64, *, loc=None, ip=None):
    """A gpu-scope relaxed load: served by L2, never by a stale line of this SM's L1."""
    return _asm_values(4, [_v(Int64(addr), loc, ip)], "ld.relaxed.gpu.global.v4.f32 {$0, $1, $2, $3}, [$4];",
                     "=f,=f,=f,=f,l,~{memory}", True, loc, ip, dtype=Float32)


@dsl_user_op
def flag_release(addr: Int64, *, loc=None, ip=None) -> None:
    """Release this CTA's earlier writes (ordered before this thread by a barrier), then
    set the flag."""
    _asm_effect([_v(Int64(addr), loc, ip)],
                "fence.acq_rel.gpu;\nst.relaxed.gpu.global.u32 [$0], 1;", "l,~{memory}", loc, ip)


@dsl_user_op
def ld_acquire_u32(addr: Int64, *, loc=None, ip=None) -> Int32:
    return _asm_value(Int32, [_v(Int64(addr), loc, ip)], "ld.acquire.gpu.global.u32 $0, [$1];",
                     "=r,l,~{memory}", loc, ip)


@dsl_user_op
def st_relaxed_zero(addr: Int64, *, loc=None, ip=None) -> None:
    _asm_effect([_v(Int64(addr), loc, ip)], "st.relaxed.gpu.global.u32 [$0], 0;", "l,~{memory}", loc, ip)


def sw64(row, chunk):
    """Byte offset of 16-byte chunk `chunk` of packed row `row` under TMA's 64-byte swizzle
    (Swizzle<2,4,3>: chunk ^= (row / 2) % 4). With it, 8 lanes reading one chunk column of 8
    consecutive rows, or 2 rows x 4 chunks, touch 8 distinct 16-byte bank groups."""
    return row * 64 + ((chunk ^ ((row // 2) % 4)) * 16)


class Sm90Fp4GroupedGemm:
    """Swap-AB NVFP4 grouped GEMM, persistent over the host's static schedule.

    Weights (the large operand) are wgmma's A, decoded straight into its registers (the
    RS form), never to smem. Tokens are wgmma's B: the same consumer threads decode each
    packed K-tile of them into an fp16 smem buffer of a 3-deep ring, one K-tile ahead of
    the wgmmas that read it. A tile is tile_n weight rows (consumer WGs x blocks m64
    blocks: 2 x 1, 2 x 2, or 3 x 1 at tile_n 192) by tile_m tokens (128, or 96 at tile_n
    192); at tile_n 256 every decoded token feeds 256 weight rows, half the token decode
    per MAC of a 128-row tile.

    consumer warps (0..7, or 0..11 with 3 WGs), per K-tile kt (its weights in registers):
        4 x blocks wgmma groups (block g % blocks, k16-steps 2j, 2j + 1 of word j = g //
        blocks): wait_group(1) -> decode the weights into the free 8-register A fragment
        -> (first group: wait for every WG's arrival on kt's tokens) -> 2 wgmmas
        after the first group: wait stage kt+1, LDS own words of its token row's 4
        chunks, decode and store the first word into the ring, 16 bytes per P index (at 128
        tokens the first two WGs only: a third stores no tokens; at 96 tokens all three, one
        word each: decoder_threads); after word 1's first group the
        second word (2 per thread at 96 and 128 rows, 1 at 32 and 64); one group after the
        last store fence.proxy.async and arrive on the ring's full barrier of kt+1 (every
        consumer thread)
        after the last group: LDS own weight rows of stage kt+1, release that stage
      per tile, after its last K-tile: each WG stmatrix-stores its fp16 outputs into its
        own staging box and one thread TMA-stores the box (epilogue), which drains while
        the next tile starts; at two blocks per WG, block 0 goes to a free token-ring
        buffer instead (ring_staging). The CTA's last tile has no next one to overlap: its
        WGs copy their boxes to C with 16-byte stores (store_box_vectors), so that the
        CTA leaves its SM without waiting for a TMA unit's read of shared memory
    the producer warpgroup's first warp (the others only give back registers): TMA token
    and weight bytes, bulk-copy scale slabs, into the stage ring.

    No empty barrier guards the token ring: buffer (kt+1) % 3 was last read by the wgmmas
    of kt-2. A WG arrives on kt's full barrier only after the wait_group of a group g >= 1
    of kt-1 (which retires every group before group g - 1 of kt-1), when all its wgmmas
    of kt-2 are done; every thread waits on kt's full barrier before it
    writes kt+1's tokens. So every WG's reads of that buffer are complete before any write
    to it. A tile starts by decoding its first K-tile's tokens and loading its weights (the
    ring's next buffer, last read 3 K-tiles before, same argument; the previous tile's
    epilogue waited for all of this WG's wgmmas).

    Each CTA walks its own list of work units (WorkSchedule.tables: the host's round robin
    of whole tiles, or K-range pieces), phase by phase (split_tiles_by_width): first the
    units of tiles that use more token rows than any narrow width, then, for each narrow
    width w (cfg.narrow), those that fit w rows, multiplied at wgmma N = w: a tile of 72
    tokens pays for 96 token columns, not 128. Each phase is its own copy of the K-loop,
    with the token decode spread over the threads that a width needs
    (sm90_token_split). The producer loads all alike, K-tiles kt0 .. kt1 of each unit.

    With split_k, a tile split in two has a PARTIAL (its first K range: each WG stores its
    fp32 accumulators to a workspace slot, in register order, then releases the slot's
    flag) and a FIXUP (the rest: waits for the flag, adds the slot in the epilogue, resets
    the flag, stores C). k_range_units explains why the waits cannot deadlock.
    """

    def __init__(self, config: Sm90Config):
        assert sm90_config_is_legal(config), config
        self.cfg = config
        self.tile_m = config.tile_m
        self.tile_n = config.tile_n
        self.blocks = config.blocks
        self.stages = config.stages
        self.token_buffers = config.token_buffers
        self.wgs = config.consumer_wgs
        self.producer_warp = config.consumer_threads // 32
        self.row_bytes = SM90_PACKED_K_TILE // 2
        self.a_stage_bytes = self.tile_m * self.row_bytes
        self.b_stage_bytes = self.tile_n * self.row_bytes
        self.sfa_stage_bytes = config.sfa_blocks * 2 * SF_ATOM_BYTES
        self.sfb_stage_bytes = config.sf_blocks * 2 * SF_ATOM_BYTES
        self.tx_bytes = self.a_stage_bytes + self.b_stage_bytes + self.sfa_stage_bytes + self.sfb_stage_bytes
        self.tbuf_bytes = self.tile_m * SM90_PACKED_K_TILE * 2  # one decoded token K-tile

    @staticmethod
    def can_implement(cfg: Sm90Config, problem_sizes) -> bool:
        return sm90_config_is_legal(cfg) and sm90_is_valid_problem(problem_sizes)

    # ---------------- descriptor init kernel (once per pointer set) ----------------
    def _packed_smem_layout(self, rows):
        # rows x 64 bytes under the 64-byte swizzle (see sw64)
        return cute.make_composed_layout(
            cute.make_swizzle(2, 4, 3), 0,
            cute.make_layout((rows, self.row_bytes), stride=(self.row_bytes, 1)),
        )

    def _template_tensor(self, addr: Int64, rows: Int32, kbytes: Int32):
        ptr = cute.make_ptr(cutlass.Uint8, addr, cute.AddressSpace.gmem, assumed_align=16)
        return cute.make_tensor(ptr, cute.make_layout((rows, kbytes), stride=(kbytes, 1)))

    def _c_tensor(self, addr: Int64, m: Int32, n: Int32):
        """C (m x n fp16, row-major) of one group. The row pitch is rounded up to 8 elements:
        the TMA needs 16-byte pitches, and a group whose N is not a multiple of 8 never uses
        its C descriptor (the epilogue's scalar path)."""
        ptr = cute.make_ptr(cutlass.Float16, addr, cute.AddressSpace.gmem, assumed_align=16)
        pitch = (n + 7) // 8 * 8
        return cute.make_tensor(ptr, cute.make_layout((m, n), stride=(pitch, 1)))

    @staticmethod
    def _sw128_fp16_atom():
        """The 128-byte-swizzled atom of 8 rows x 64 fp16 that the token ring (wgmma's B)
        and the C staging boxes (the TMA store's source) are tiled from."""
        return cute.nvgpu.warpgroup.make_smem_layout_atom(
            sm90_utils.get_smem_layout_atom(utils.LayoutEnum.ROW_MAJOR, cutlass.Float16, 64),
            cutlass.Float16,
        )

    def _c_stage_layout(self):
        """One consumer WG's C staging box: (tile_m tokens, 64 weight rows) fp16, 128-byte
        rows under the 128-byte swizzle (sm90_c_box_offset), in a buffer of 128 rows."""
        return cute.tile_to_shape(
            self._sw128_fp16_atom(), (self.tile_m, SM90_WEIGHT_ROWS_PER_BLOCK), order=(0, 1)
        )

    def _make_tma_atoms(self, addr: Int64, rows: Int32, kbytes: Int32):
        op = cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp()
        t = self._template_tensor(addr, rows, kbytes)
        atom_a, _ = cute.nvgpu.cpasync.make_tiled_tma_atom(
            op, t, self._packed_smem_layout(self.tile_m), (self.tile_m, self.row_bytes)
        )
        atom_b, _ = cute.nvgpu.cpasync.make_tiled_tma_atom(
            op, t, self._packed_smem_layout(self.tile_n), (self.tile_n, self.row_bytes)
        )
        atom_c, _ = cute.nvgpu.cpasync.make_tiled_tma_atom(
            cute.nvgpu.cpasync.CopyBulkTensorTileS2GOp(), self._c_tensor(addr, rows, rows),
            self._c_stage_layout(), (self.tile_m, SM90_WEIGHT_ROWS_PER_BLOCK),
        )
        return atom_a, atom_b, atom_c

    @cute.jit
    def init_tensormaps(
        self,
        sizes_ptr: cute.Pointer,
        ptrs_ptr: cute.Pointer,
        tmaps_ptr: cute.Pointer,
        num_groups: Int32,
    ):
        """One CTA per group; the group count is a launch argument, so that one compiled
        kernel serves every count."""
        atom_a, atom_b, atom_c = self._make_tma_atoms(tmaps_ptr.toint(), Int32(128), Int32(128))
        self.init_kernel(atom_a, atom_b, atom_c, sizes_ptr, ptrs_ptr, tmaps_ptr).launch(
            grid=[num_groups, 1, 1], block=[32, 1, 1]
        )

    @cute.kernel
    def init_kernel(self, atom_a, atom_b, atom_c, sizes_ptr, ptrs_ptr, tmaps_ptr):
        g, _, _ = cute.arch.block_idx()
        mSizes = cute.make_tensor(sizes_ptr, cute.make_layout((4, 1 << 20), stride=(1, 4)))
        mPtrs = cute.make_tensor(ptrs_ptr, cute.make_layout((5, 1 << 20), stride=(1, 5)))
        m = mSizes[0, g]
        n = mSizes[1, g]
        kbytes = mSizes[2, g] // 2
        tA = self._template_tensor(mPtrs[0, g], m, kbytes)
        tB = self._template_tensor(mPtrs[1, g], n, kbytes)
        base = tmaps_ptr.toint() + Int64(g) * (SM90_NUM_DESC * SM90_DESC_BYTES)
        desc_a = cute.make_ptr(cutlass.Int64, base, cute.AddressSpace.gmem, assumed_align=128)
        desc_b = cute.make_ptr(
            cutlass.Int64, base + SM90_DESC_BYTES, cute.AddressSpace.gmem, assumed_align=128
        )
        desc_c = cute.make_ptr(
            cutlass.Int64, base + 2 * SM90_DESC_BYTES, cute.AddressSpace.gmem, assumed_align=128
        )
        tC = self._c_tensor(mPtrs[4, g], m, n)
        with cute.arch.elect_one():
            cute.nvgpu.cpasync.copy_tensormap(atom_a, desc_a)
            cute.nvgpu.cpasync.copy_tensormap(atom_b, desc_b)
            cute.nvgpu.cpasync.copy_tensormap(atom_c, desc_c)
        cute.arch.sync_warp()
        cute.nvgpu.cpasync.update_tma_descriptor(atom_a, tA, desc_a)
        cute.nvgpu.cpasync.update_tma_descriptor(atom_b, tB, desc_b)
        cute.nvgpu.cpasync.update_tma_descriptor(atom_c, tC, desc_c)
        cute.arch.sync_warp()
        cute.nvgpu.cpasync.fence_tma_desc_release()

    # ---------------- main kernel ----------------
    def _token_layout(self):
        """(tile_m, 64, 2 halves x token_buffers) fp16, K-major SW128: one 128-byte row per
        token and K-half."""
        return cute.tile_to_shape(
            self._sw128_fp16_atom(), (self.tile_m, SM90_DECODE_K, 2 * self.token_buffers),
            order=(0, 1, 2),
        )

    def _tiled_mma(self, tokens: int):
        """wgmma 64 weight rows x `tokens` per consumer warpgroup and atom, A (weights) from
        registers; a tile of tile_n rows repeats it `blocks` times per warpgroup."""
        return sm90_utils.make_trivial_tiled_mma(
            cutlass.Float16,
            cutlass.Float16,
            cute.nvgpu.warpgroup.OperandMajorMode.K,
            cute.nvgpu.warpgroup.OperandMajorMode.K,
            cutlass.Float32,
            (self.wgs, 1, 1),
            tiler_mn=(SM90_WEIGHT_ROWS_PER_BLOCK, tokens),
            a_source=cute.nvgpu.warpgroup.OperandSource.RMEM,
        )

    @cute.jit
    def __call__(
        self,
        sizes_ptr: cute.Pointer,
        ptrs_ptr: cute.Pointer,
        ranges_ptr: cute.Pointer,
        units_ptr: cute.Pointer,
        tmaps_ptr: cute.Pointer,
        partials_ptr: cute.Pointer,
        flags_ptr: cute.Pointer,
        num_ctas: Int32,
        unit_stride: Int32,
        num_groups: Int32,
    ):
        tiled_mma = self._tiled_mma(self.tile_m)
        sT_layout = self._token_layout()  # tokens: wgmma B

        @cute.struct
        class SharedStorage:
            mbar: cute.struct.MemRange[cutlass.Int64, self.stages * 2]
            tbar: cute.struct.MemRange[cutlass.Int64, self.token_buffers * 2]
            sDecT: cute.struct.Align[
                cute.struct.MemRange[cutlass.Float16, cute.cosize(sT_layout)], 1024
            ]
            sC: cute.struct.Align[
                cute.struct.MemRange[cutlass.Uint8, self.wgs * SM90_C_STAGE_BYTES], 1024
            ]
            sPkA: cute.struct.Align[
                cute.struct.MemRange[cutlass.Uint8, self.stages * self.a_stage_bytes], 1024
            ]
            sPkB: cute.struct.Align[
                cute.struct.MemRange[cutlass.Uint8, self.stages * self.b_stage_bytes], 1024
            ]
            sSFA: cute.struct.Align[
                cute.struct.MemRange[cutlass.Uint8, self.stages * self.sfa_stage_bytes], 128
            ]
            sSFB: cute.struct.Align[
                cute.struct.MemRange[cutlass.Uint8, self.stages * self.sfb_stage_bytes], 128
            ]

        self.shared_storage = SharedStorage
        self.kernel(
            tiled_mma, sT_layout, sizes_ptr, ptrs_ptr, ranges_ptr, units_ptr, tmaps_ptr,
            partials_ptr, flags_ptr, unit_stride, num_groups,
        ).launch(
            grid=[num_ctas, 1, 1],
            block=[self.cfg.threads, 1, 1],
            min_blocks_per_mp=1,
            use_pdl=self.cfg.pdl,
        )

    @cute.kernel
    def kernel(
        self,
        tiled_mma: cute.TiledMma,
        sT_layout: cute.ComposedLayout,
        sizes_ptr: cute.Pointer,
        ptrs_ptr: cute.Pointer,
        ranges_ptr: cute.Pointer,
        units_ptr: cute.Pointer,
        tmaps_ptr: cute.Pointer,
        partials_ptr: cute.Pointer,
        flags_ptr: cute.Pointer,
        unit_stride: Int32,
        num_groups: Int32,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if tidx == 0:
            self.prefetch_schedule(sizes_ptr, ptrs_ptr, ranges_ptr, units_ptr, unit_stride, num_groups)

        smem = utils.SmemAllocator()
        storage = smem.allocate(self.shared_storage)
        # packed stages: TMA -> consumers; every consumer thread arrives on the empty
        # barrier after its own reads of the stage (release_stage)
        ab_pipeline = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.mbar.data_ptr(),
            num_stages=self.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.cfg.consumer_threads),
            tx_count=self.tx_bytes,
            cta_layout_vmnk=cute.make_layout((1, 1, 1, 1)),
        )
        # decoded token ring: every consumer thread arrives on a buffer's full barrier once
        # its share is stored, and every one waits on it; its empty barriers go unused (the
        # ring's order argument is in the class docstring)
        tok_pipeline = pipeline.PipelineAsync.create(
            barrier_storage=storage.tbar.data_ptr(),
            num_stages=self.token_buffers,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.cfg.consumer_threads),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.cfg.consumer_threads),
        )
        if cutlass.const_expr(self.cfg.pdl):
            # Programmatic dependent launch: this grid may start while the previous kernel
            # in the queue (the previous call's GEMM) still runs, so that its launch and
            # the setup above overlap that kernel's tail. Nothing in global memory is read
            # before the wait: the previous kernel may be the one that wrote the inputs.
            # The trigger right after lets the next call's grid queue behind this one in
            # turn; its CTAs only fit on an SM once a CTA of this grid has left it.
            cute.arch.griddepcontrol_wait()
            cute.arch.griddepcontrol_launch_dependents()

        mSizes = cute.make_tensor(sizes_ptr, cute.make_layout((4, 1 << 20), stride=(1, 4)))
        mPtrs = cute.make_tensor(ptrs_ptr, cute.make_layout((5, 1 << 20), stride=(1, 5)))
        # this CTA's work units (WorkSchedule.tables): phase p is [span[p], span[p + 1])
        bidx, _, _ = cute.arch.block_idx()
        mRanges = cute.make_tensor(ranges_ptr, cute.make_layout((RANGE_FIELDS, 1 << 20), stride=(1, RANGE_FIELDS)))
        mUnits = cute.make_tensor(units_ptr, cute.make_layout((UNIT_FIELDS, 1 << 24), stride=(1, UNIT_FIELDS)))
        span = tuple(mRanges[i, bidx] for i in range(len(self.cfg.widths) + 1))
        split = (partials_ptr, flags_ptr)

        # one if/else over warpgroups, so that ptxas applies the setmaxnreg split
        consumer_regs, producer_regs = sm90_register_split(self.cfg)
        if warp_idx >= self.producer_warp:
            cute.arch.warpgroup_reg_dealloc(producer_regs)
            if warp_idx == self.producer_warp:
                self.producer(storage, ab_pipeline, mSizes, mPtrs, mUnits, tmaps_ptr, span)
        else:
            cute.arch.warpgroup_reg_alloc(consumer_regs)
            self.consumer(tidx, tiled_mma, sT_layout, storage, ab_pipeline,
                          tok_pipeline, mSizes, mPtrs, mUnits, tmaps_ptr, span, split)

    @cute.jit
    def prefetch_schedule(self, sizes_ptr, ptrs_ptr, ranges_ptr, units_ptr, unit_stride, num_groups):
        """Pulls into L1 what the start of a CTA reads: its ranges row, its first unit (at row
        bidx * unit_stride) and every group's sizes and pointers. Without it they are three
        dependent global loads (ranges -> unit -> sizes and pointers) before the first TMA
        issue, about 0.4 us each on the H200 (tools/sm90_trace.py timeline). Prefetched at
        entry, while the barriers are initialized, they moved the first TMA issue from
        1.97 to 1.50-1.60 us (the unit's read still trails the ranges row by ~0.5 us).
        The tables are written only by host copies ordered before the launch, never by a
        kernel, so this may run before the programmatic-launch wait."""
        bidx, _, _ = cute.arch.block_idx()
        prefetch_l1(ranges_ptr.toint() + Int64(bidx) * (RANGE_FIELDS * 4))
        prefetch_l1(units_ptr.toint() + Int64(bidx * unit_stride) * (UNIT_FIELDS * 4))
        for line in cutlass.range((num_groups * (4 * 4) + 127) // 128, unroll=1):
            prefetch_l1(sizes_ptr.toint() + Int64(line) * 128)
        for line in cutlass.range((num_groups * (5 * 8) + 127) // 128, unroll=1):
            prefetch_l1(ptrs_ptr.toint() + Int64(line) * 128)

    @cute.jit
    def release_stage(self, ab_pipeline, state):
        """This thread's reads of the packed stage are done (their values are in registers):
        arrive on the stage's empty barrier. Every thread arrives, not one lane per warp
        after a warp sync, so each read is ordered before the producer's refill by the
        thread's own arrive (compute-sanitizer's racecheck does not credit bar.warp.sync
        and reported the lane-0 form as WAR hazards)."""
        cute.arch.mbarrier_arrive(ab_pipeline.sync_object_empty.get_barrier(state.index))

    @cute.jit
    def producer(self, storage, ab_pipeline, mSizes, mPtrs, mUnits, tmaps_ptr, span):
        lane = cute.arch.lane_idx()
        is_leader = Int32(0)
        if lane == 0:
            is_leader = Int32(1)
        sA0 = storage.sPkA.data_ptr().toint()
        sB0 = storage.sPkB.data_ptr().toint()
        sSFA0 = storage.sSFA.data_ptr().toint()
        sSFB0 = storage.sSFB.data_ptr().toint()
        tmaps0 = tmaps_ptr.toint()
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        for u in cutlass.range(span[0], span[-1], unroll=1):
            g = mUnits[0, u]
            tm = mUnits[1, u]
            tn = mUnits[2, u]
            n = mSizes[1, g]
            rest_k = mSizes[2, g] // 64
            desc_a = tmaps0 + Int64(g) * (SM90_NUM_DESC * SM90_DESC_BYTES)
            desc_b = desc_a + SM90_DESC_BYTES
            tensormap_acquire(desc_a)
            tensormap_acquire(desc_b)
            row_a = tm * self.tile_m
            row_b = tn * self.tile_n
            # the 128-row scale blocks of this tile, at K-atom 0: 2 atoms (1 KB) per K-tile.
            # A weight block past the group's last one (N not a multiple of tile_n) copies
            # the last block again, so every stage's byte count stays tx_bytes; its rows
            # multiply TMA's zero-filled rows into outputs that are never stored.
            sfa_src = mPtrs[2, g] + Int64((row_a // 128) * rest_k) * SF_ATOM_BYTES
            if cutlass.const_expr(self.cfg.sfa_blocks > 1):
                # a 96-row token tile's two atoms (sm90_token_scale_atom); 128-row tiles
                # keep their one copy as measured (the clamp would change their PTX)
                m = mSizes[0, g]
                sfa_src = [
                    mPtrs[2, g] + Int64(sm90_token_scale_atom(row_a, b, m) * rest_k) * SF_ATOM_BYTES
                    for b in range(self.cfg.sfa_blocks)
                ]
            last_mb = (n + 127) // 128 - 1
            sfb_src = [
                mPtrs[3, g] + Int64(cutlass.min(row_b // 128 + b, last_mb) * rest_k) * SF_ATOM_BYTES
                for b in range(self.cfg.sf_blocks)
            ]
            for kt in cutlass.range(mUnits[3, u], mUnits[4, u], unroll=1):
                ab_pipeline.producer_acquire(state)
                mbar = ab_pipeline.producer_get_barrier(state).toint()
                s = state.index
                kb = kt * self.row_bytes
                tma_load_2d(sA0 + s * self.a_stage_bytes, desc_a, kb, row_a, mbar, is_leader)
                tma_load_2d(sB0 + s * self.b_stage_bytes, desc_b, kb, row_b, mbar, is_leader)
                koff = Int64(kt) * (2 * SF_ATOM_BYTES)
                if cutlass.const_expr(self.cfg.sfa_blocks > 1):
                    for b in cutlass.range_constexpr(self.cfg.sfa_blocks):
                        bulk_load(sSFA0 + s * self.sfa_stage_bytes + b * 2 * SF_ATOM_BYTES,
                                  sfa_src[b] + koff, 2 * SF_ATOM_BYTES, mbar, is_leader)
                else:
                    bulk_load(sSFA0 + s * self.sfa_stage_bytes, sfa_src + koff, self.sfa_stage_bytes,
                              mbar, is_leader)
                for b in cutlass.range_constexpr(self.cfg.sf_blocks):
                    bulk_load(sSFB0 + s * self.sfb_stage_bytes + b * 2 * SF_ATOM_BYTES,
                              sfb_src[b] + koff, 2 * SF_ATOM_BYTES, mbar, is_leader)
                ab_pipeline.producer_commit(state)
                state.advance()
        ab_pipeline.producer_tail(state)

    # ---------------- consumers ----------------
    @cute.jit
    def consumer(self, tidx, tiled_mma, sT_layout, storage, ab_pipeline,
                 tok_pipeline, mSizes, mPtrs, mUnits, tmaps_ptr, span, split):
        sT = storage.sDecT.get_tensor(sT_layout.outer, swizzle=sT_layout.inner)
        # ahead: the packed stage of the next K-tile (its tokens are decoded and its weights
        # loaded during the current one); tok_w: the ring buffer being written, tok_r: read
        states = (
            pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages),
            pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.token_buffers),
            pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.token_buffers),
        )
        for p in cutlass.range_constexpr(len(self.cfg.widths)):
            # phase p: an N = rows wgmma on the first rows of every token buffer
            rows = self.cfg.widths[p]
            mma = tiled_mma
            sT_p = sT
            if cutlass.const_expr(p > 0):
                mma = self._tiled_mma(rows)
                sT_p = cute.local_tile(sT, (rows, SM90_DECODE_K, 2 * self.token_buffers), (0, 0, 0))
            operands = self.mma_operands(mma, sT_p, tidx, rows)
            for u in cutlass.range(span[p], span[p + 1], unroll=1):
                states = self.consume_tile(u, rows, tidx, mma, *operands, storage,
                                           ab_pipeline, tok_pipeline, states, mSizes, mPtrs,
                                           mUnits, tmaps_ptr, split, span[-1] - 1)
        # the staging boxes stay allocated until their last TMA stores have read them
        bulk_wait_read(Int32(tidx % 128 == 0))

    @cute.jit
    def mma_operands(self, tiled_mma, sT, tidx, tokens: int):
        """This thread's wgmma operands for tiles of `tokens` (static) token columns."""
        thr_mma = tiled_mma.get_slice(tidx)
        # (MMA, MMA_N, MMA_K, halves x buffers): tokens from smem
        tCrT = tiled_mma.make_fragment_B(thr_mma.partition_B(sT))
        # (MMA, MMA_M = 1, MMA_K = 2) fp16 weight fragments of one wgmma group (one m64
        # block, 2 k16-steps), double-buffered, written as u32 pairs (sm90_fragment_index)
        a_shape = thr_mma.partition_shape_A((self.wgs * SM90_WEIGHT_ROWS_PER_BLOCK, SM90_PACKED_K_TILE // 4))
        tCrW = [tiled_mma.make_fragment_A(a_shape) for _ in range(2)]
        tCrW32 = [cute.recast_tensor(f, cutlass.Uint32) for f in tCrW]
        # one accumulator per m64 block: block b covers tile rows 64 wgs b .. 64 wgs (b + 1) - 1
        cC = cute.make_identity_tensor((self.wgs * SM90_WEIGHT_ROWS_PER_BLOCK, tokens))
        tCcC = thr_mma.partition_C(cC)  # (MMA, 1, 1) -> (weight row in the block, token)
        acc = [cute.make_rmem_tensor(tCcC.shape, cutlass.Float32) for _ in range(self.blocks)]
        return tCrT, tCrW, tCrW32, tCcC, acc

    @cute.jit
    def consume_tile(self, u, rows: int, tidx, tiled_mma, tCrT, tCrW, tCrW32, tCcC, acc,
                     storage, ab_pipeline, tok_pipeline, states, mSizes, mPtrs, mUnits, tmaps_ptr,
                     split, last_u):
        """The K-tiles of work unit u with `rows` (static) decoded token rows, then its
        epilogue (or, split-K, its partial sums); last_u is the CTA's last unit, whose C
        the epilogue stores without the TMA (store_box_vectors). Returns the pipeline states: reassigned by
        the caller, that is what makes the DSL carry them through its loop (a mutation
        inside a call is not seen there)."""
        g = mUnits[0, u]
        tm = mUnits[1, u]
        tn = mUnits[2, u]
        m = mSizes[0, g]
        k_tiles = mUnits[4, u] - mUnits[3, u]
        row_a = tm * self.tile_m
        tok = self.token_share(tidx, rows, tm)
        wgt = self.weight_share(tidx, tn)
        ahead, tok_w, tok_r = states
        for a in acc:
            a.fill(0.0)
        tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
        # the first K-tile's tokens and weights, before any wgmma of the tile
        packed, scales = self.token_chunks(storage, ab_pipeline, ahead, tok)
        self.store_token_words(storage, tok_w, tok, packed, scales, (0, 1))
        self.publish_tokens(tok_pipeline, tok_w)
        tok_w.advance()
        wm, sc = self.load_weights(storage, ahead, wgt)
        self.release_stage(ab_pipeline, ahead)
        ahead.advance()
        for _kt in cutlass.range(k_tiles - 1, unroll=1):
            ahead, tok_w, tok_r, wm, sc = self.k_tile(
                True, tiled_mma, tCrT, tCrW, tCrW32, acc, storage, ab_pipeline, tok_pipeline,
                ahead, tok_w, tok_r, tok, wgt, wm, sc,
            )
        ahead, tok_w, tok_r, wm, sc = self.k_tile(
            False, tiled_mma, tCrT, tCrW, tCrW32, acc, storage, ab_pipeline, tok_pipeline,
            ahead, tok_w, tok_r, tok, wgt, wm, sc,
        )
        cute.nvgpu.warpgroup.wait_group(0)
        last = u == last_u
        if cutlass.const_expr(self.cfg.split_k):
            # split-K: both sides of a slot use the same thread -> accumulator map
            role = mUnits[5, u]
            if role == UNIT_PARTIAL:
                self.store_partial(acc, split, mUnits[6, u], tidx, rows)
            elif role == UNIT_FIXUP:
                self.store_tile(acc, storage, tidx, tmaps_ptr, mSizes, mPtrs, g, m, row_a, tn, rows,
                                tok_w, last, (split, mUnits[7, u]))
            else:
                self.store_tile(acc, storage, tidx, tmaps_ptr, mSizes, mPtrs, g, m, row_a, tn, rows, tok_w, last)
        else:
            self.store_tile(acc, storage, tidx, tmaps_ptr, mSizes, mPtrs, g, m, row_a, tn, rows, tok_w, last)
        return ahead, tok_w, tok_r

    @cute.jit
    def store_tile(self, acc, storage, tidx, tmaps_ptr, mSizes, mPtrs, g, m, row_a, tn, rows: int,
                   tok_w, last, fixup=None):
        """The tile's C through the epilogue; a FIXUP (fixup = (split, slot)) first waits for
        the previous piece's slot and adds it on the way. With ring_staging, block 0 of
        each WG is staged in ring buffer tok_w + 2 (free once every consumer thread is past
        its wait_group(0): the barrier) and block 1 in the WG's own box, so that block 1
        never waits for block 0's store to read the box."""
        desc_c = tmaps_ptr.toint() + Int64(g) * (SM90_NUM_DESC * SM90_DESC_BYTES) + 2 * SM90_DESC_BYTES
        col = tn * self.tile_n + SM90_WEIGHT_ROWS_PER_BLOCK * (tidx // 128)
        base = None
        if cutlass.const_expr(fixup is not None):
            split, slot = fixup
            base = self.wait_partial(split, slot, tidx)
        # the boxes are free: every earlier store of this WG has read its box (the wait,
        # which also orders the element path's reads), and with ring_staging every
        # consumer thread is past its wait_group(0) (the barrier over all of them)
        c_addr, n = mPtrs[4, g], mSizes[1, g]
        lead = Int32(tidx % 128 == 0)
        bulk_wait_read(lead)
        own_box = storage.sC.data_ptr().toint() + (tidx // 128) * SM90_C_STAGE_BYTES
        boxes = [own_box]
        if cutlass.const_expr(self.ring_staging):
            cute.arch.barrier(barrier_id=SM90_CONSUMERS_BARRIER, number_of_threads=self.cfg.consumer_threads)
            ring = storage.sDecT.data_ptr().toint() + ((tok_w.index + 2) % self.token_buffers) * self.tbuf_bytes
            boxes = [ring + (tidx // 128) * SM90_C_STAGE_BYTES, own_box]
        else:
            cute.arch.barrier(barrier_id=1 + tidx // 128, number_of_threads=128)
        for b in cutlass.range_constexpr(self.blocks):
            self.epilogue(acc[b], boxes[b], tidx, desc_c, c_addr, m, n, row_a,
                          col + self.block_rows * b, rows, last,
                          None if base is None else base + b * self.partial_block_bytes)
        if cutlass.const_expr(self.ring_staging):
            # block 0's store has read the ring box (it did so while block 1 was staged)
            bulk_wait_read(lead, pending=1)

    @property
    def ring_staging(self) -> bool:
        """Whether a tile's epilogue stages block 0 in a token-ring buffer (at two m64 blocks
        per WG; one 32 KB buffer holds both WGs' 16 KB boxes), so that block 1 never waits
        for block 0's store to read the WG's own box. Buffer tok_w + 2 is free once every
        consumer thread is past its wait_group(0) (the barrier). Each WG's storing thread
        waits for that store's read at the end of the epilogue, after block 1 is staged
        (wait_group.read 1: all but block 1's store), before any arrival of its on the
        ring's full barriers, so no token store overwrites a box before it is read."""
        return self.blocks == 2

    # ---------------- split-K: partial sums between CTAs ----------------
    @property
    def partial_block_bytes(self) -> int:
        """One m64 block's accumulators of a WG in a workspace slot (16 bytes x 128 threads
        per group of 4)."""
        return self.tile_m // 8 * 128 * 16

    @cute.jit
    def partial_addr(self, split, slot, tidx):
        """This thread's first 16 bytes in workspace slot `slot`: per WG and m64 block, group
        i of 4 accumulators at 2048 i, the WG's 128 threads side by side (coalesced)."""
        wg_slot = Int64(slot * self.wgs + tidx // 128)
        return split[0].toint() + wg_slot * (self.blocks * self.partial_block_bytes) + (tidx % 128) * 16

    @cute.jit
    def flag_addr(self, split, slot, tidx):
        return split[1].toint() + Int64(slot * self.wgs + tidx // 128) * 4

    @cute.jit
    def wait_partial(self, split, slot, tidx):
        """Wait for slot `slot`'s flag (this WG's half), reset it for the next call (nothing
        else reads it in this grid; the next grid does only after griddepcontrol.wait), and
        return this thread's address in the slot."""
        if tidx % 128 == 0:
            flag = self.flag_addr(split, slot, tidx)
            seen = ld_acquire_u32(flag)
            while seen == 0:
                seen = ld_acquire_u32(flag)
            st_relaxed_zero(flag)
        cute.arch.barrier(barrier_id=1 + tidx // 128, number_of_threads=128)
        return self.partial_addr(split, slot, tidx)

    @cute.jit
    def store_partial(self, acc, split, slot, tidx, rows: int):
        """PARTIAL: this WG's fp32 accumulators -> slot `slot`, then its flag, once all 128
        threads' stores are issued (the barrier, then the release in flag_release).
        (A tile has one PARTIAL: a middle piece that waits, adds and stores, compiled into
        this branch, cost the tile_n 256 K-loop its uniform descriptor registers, 567 ->
        635 SASS instructions.)"""
        dst = self.partial_addr(split, slot, tidx)
        for b in cutlass.range_constexpr(self.blocks):
            for i in cutlass.range_constexpr(rows // 8):
                v = [acc[b][4 * i + e] for e in range(4)]
                st_global_v4_f32(dst + b * self.partial_block_bytes + i * 2048, *v)
        cute.arch.barrier(barrier_id=1 + tidx // 128, number_of_threads=128)
        if tidx % 128 == 0:
            flag_release(self.flag_addr(split, slot, tidx))

    @property
    def block_rows(self) -> int:
        """Tile rows between a WG's m64 blocks (block b of WG w: rows block_rows b + 64 w ..)."""
        return self.wgs * SM90_WEIGHT_ROWS_PER_BLOCK

    @cute.jit
    def weight_share(self, tidx, tn):
        """This thread's weight rows in weight tile tn: wgmma A fragment rows r0 and r0 + 8 of
        each m64 block, and its 16-byte chunk q (K 32q .. 32q + 31) of each. Returns the
        offsets of row r0's chunk in a packed stage and of its scale word in the stage's
        scale slab, and the prmt selector of the chunk's two K-block scales. Row r0 + 8 h
        of block b adds 64 (block_rows b + 8 h) bytes in the stage (same swizzle) and
        1024 b + 128 h in the slab (block_rows is 128 where blocks > 1; r0 % 32 + 8 < 32).
        The slab holds sf_blocks whole 128-row atoms from the one holding the tile's first
        row, which at tile_n 192 lies 64 rows into its atom for odd tn."""
        r0, q = sm90_weight_lane(tidx)
        w_off = sw64(r0, q)
        row = r0
        if cutlass.const_expr(self.tile_n % 128 != 0):
            row = r0 + (tn * self.tile_n) % 128
        return w_off, sm90_scale_word_offset(row, q), self.chunk_scale_selector(q)

    @cute.jit
    def chunk_scale_selector(self, q):
        """prmt selector of packed chunk q's two K-block scales in its K-atom's scale word:
        bytes 2 (q % 2) and 2 (q % 2) + 1 (K-blocks 2q, 2q + 1 of atom q // 2), each twice."""
        return Int32(sm90_scale_selector(0, 1)) + Int32(0x2222) * (q % 2)

    @cute.jit
    def token_share(self, tidx, rows: int, tm):
        """This thread's share of tile tm's token decode (the decoder_threads first consumer
        threads, `rows` static): words wpt * group .. + wpt - 1 of the 4 chunks of token row trow
        (sm90_token_lane). Word w of a chunk q gives P[4w .. 4w + 3]; P[4w + tt] goes to
        K-half w // 2 of the ring buffer, 16-byte chunk (trow % 8) ^ (4 (w % 2) + tt) under
        the SW128 XOR (sm90_token_slot), 4 bytes at 4q: the 4 chunks make one 16-byte store.
        Every thread decodes and stores, also rows past the group's M (TMA zero-filled) or
        past a narrow phase's width (never read at its wgmma N): a warp-uniform skip of
        those cost ptxas a branch around the stores that it paid for on every K-tile (K-loop
        534 -> 504 SASS instructions at tile_n 256 K-range without it, 353 -> 348 at 128).
        `live` is None (static: store) where every consumer WG decodes (decoder_threads); a
        third of three at 128 tokens reads the chunks of the first one and never stores.
        srow is the row's place in the stage's scale slab: a 96-row tile tm starts
        (96 tm) % 128 rows into its first atom."""
        decoders = self.cfg.decoder_threads
        _, wpt = sm90_token_split(rows, decoders)
        dtid = tidx % decoders
        trow, group = sm90_token_lane(dtid, rows, decoders)
        live = None
        if cutlass.const_expr(self.cfg.consumer_threads > decoders):
            live = tidx < decoders
        return trow, group, wpt, live, sm90_token_scale_row(trow, tm, self.tile_m)

    @cute.jit
    def token_chunks(self, storage, ab_pipeline, ahead, tok):
        """Waits for stage `ahead`; loads this thread's words of its row's 4 packed chunks
        (8-byte loads, 4-byte at wpt = 1) and the scale words of the row's two K-atoms,
        then turns those into the f16x2 scale of each chunk's K-block that the words lie in.
        All loads issue before the first conversion, so their latencies overlap."""
        trow, group, wpt, _, srow = tok
        ab_pipeline.consumer_wait(ahead)
        pk = storage.sPkA.data_ptr().toint() + ahead.index * self.a_stage_bytes
        sf = storage.sSFA.data_ptr().toint() + ahead.index * self.sfa_stage_bytes
        packed = []
        for q in cutlass.range_constexpr(4):
            addr = pk + sw64(trow, q) + 4 * wpt * group
            packed.append(ld_shared_v2(addr) if wpt == 2 else [ld_shared_u32(addr)])
        sel = sm90_token_scale_selector(group, wpt)
        words = [ld_shared_u32(sf + sm90_scale_word_offset(srow, 2 * a)) for a in range(2)]
        pairs = [scale_pair(words[a], sel) for a in range(2)]
        return packed, [pairs[q // 2][q % 2] for q in range(4)]

    @cute.jit
    def store_token_words(self, storage, tok_w, tok, packed, scales, words):
        """This thread's words number `words` (static, 0 .. wpt - 1; others are skipped) of
        its 4 chunks -> the ring buffer tok_w: per word and P index one 16-byte store of the
        4 chunks' P values (half the stores of 2 chunks x 4 words, a quarter of 1 x 4)."""
        trow, group, wpt, live, _ = tok
        if cutlass.const_expr(live is None):
            self._store_token_words(storage, tok_w, trow, group, wpt, packed, scales, words)
        elif live:
            self._store_token_words(storage, tok_w, trow, group, wpt, packed, scales, words)

    @cute.jit
    def _store_token_words(self, storage, tok_w, trow, group, wpt: int, packed, scales, words):
        base = storage.sDecT.data_ptr().toint() + tok_w.index * self.tbuf_bytes
        if cutlass.const_expr(self.uniform_addressing):
            offs = self.token_store_offsets(trow, group, wpt)
        else:
            base = base + trow * 128
        for i in words:
            if cutlass.const_expr(i < wpt):
                pq = [decode_e2m1_word(packed[q][i], scales[q]) for q in range(4)]
                w = wpt * group + i
                for tt in cutlass.range_constexpr(4):
                    if cutlass.const_expr(self.uniform_addressing):
                        addr = base + offs[i][tt]
                    else:
                        addr = base + (w // 2) * (self.tile_m * 128) + ((trow % 8) ^ (4 * (w % 2) + tt)) * 16
                    st_shared_v4(addr, pq[0][tt], pq[1][tt], pq[2][tt], pq[3][tt])

    @property
    def uniform_addressing(self) -> bool:
        """Whether the token stores and weight loads keep the buffer's uniform base apart
        from a loop-invariant thread offset, so that ptxas addresses them as [R + UR]: at
        one m64 block per WG (tile_n 128, 192). There it took 9 SASS instructions off the
        K-loop (348 -> 339) and measured 31.3 / 15.7 against 32.7 / 16.3 us on shapes 2 / 3;
        at tile_n 256 it took 12 off (504 -> 492) but ran shapes 0 / 1 at 110.7 / 70.3
        against 109.8 / 69.7 us (two alternating rounds each, notes/measurements.md,
        2026-12-01, eighth session, run 6), so 256 adds the offsets per access."""
        return self.blocks == 1

    @cute.jit
    def token_store_offsets(self, trow, group, wpt: int):
        """Byte offsets in a ring buffer of this thread's 16-byte token stores, by local word
        i and P index tt: word w = wpt group + i goes to K-half w // 2, row trow, chunk
        (trow % 8) ^ (4 (w % 2) + tt) (token_share)."""
        key = trow % 8
        return [[trow * 128 + ((wpt * group + i) // 2) * (self.tile_m * 128)
                 + (key ^ (4 * ((wpt * group + i) % 2) + tt)) * 16 for tt in range(4)] for i in range(wpt)]

    @cute.jit
    def publish_tokens(self, tok_pipeline, tok_w):
        # the proxy fence orders this thread's generic-proxy token stores before the async
        # proxy's wgmma reads that the full barrier hands them to
        cute.arch.fence_proxy("async.shared", space="cta")
        tok_pipeline.producer_commit(tok_w)

    @cute.jit
    def load_weights(self, storage, state, wgt):
        """This thread's weight rows of stage `state` (already waited for): the 16-byte chunk
        of each row (word j feeds k16-steps 2j, 2j + 1) and the f16x2 scales of its two
        K-blocks."""
        w_off, sf_off, sel = wgt
        pkB = storage.sPkB.data_ptr().toint() + state.index * self.b_stage_bytes
        sfB = storage.sSFB.data_ptr().toint() + state.index * self.sfb_stage_bytes
        wm = [[ld_shared_v4(self.smem_address(pkB, w_off, 64 * (self.block_rows * b + 8 * h)))
               for h in range(2)] for b in range(self.blocks)]
        sc = [[scale_pair(ld_shared_u32(self.smem_address(sfB, sf_off, 1024 * b + 128 * h)), sel)
               for h in range(2)] for b in range(self.blocks)]
        return wm, sc

    def smem_address(self, base, thread_offset, const: int):
        """base (uniform) + thread_offset (a thread's loop-invariant value) + const, grouped
        as uniform_addressing says: base + (thread_offset + const) lets ptxas fold the sum
        into [R + UR]."""
        if self.uniform_addressing:
            return base + (thread_offset + const)
        return base + thread_offset + const

    @cute.jit
    def k_tile(self, with_next: bool, tiled_mma, tCrT, tCrW, tCrW32, acc, storage,
               ab_pipeline, tok_pipeline, ahead, tok_w, tok_r, tok, wgt, wm, sc):
        """One K-tile: wgmmas on the weights `wm`, `sc` (loaded a K-tile earlier) and ring
        buffer tok_r's tokens. With `with_next` (static: all but a tile's last K-tile) it
        also decodes stage ahead's tokens into ring buffer tok_w (after the groups of
        words 0 and 1), loads stage ahead's weights for the next K-tile (after the last
        group, when this K-tile's are dead) and releases that stage: the loads' latency
        then hides behind the wgmmas in flight. The arrive on tok_w's full barrier comes
        one group after the thread's last token store (group blocks + 1 with 2 words per
        chunk, group 1 with 1: 64 rows and fewer), after a wait_group that left every
        wgmma of the previous K-tile done (the ring's order argument, class docstring)."""
        packed, scales = None, None
        wm_next, sc_next = wm, sc
        # 4 x blocks wgmma groups per K-tile: group g multiplies block g % blocks at k16-steps
        # 2j, 2j + 1 (word j = g // blocks of the rows' chunks), so a group's A fragment
        # is 8 registers and two of them are in flight
        groups = 4 * self.blocks
        for g in cutlass.range_constexpr(groups):
            j, b = divmod(g, self.blocks)
            f = g % 2
            # the group that read fragment f (two groups ago) is done
            cute.nvgpu.warpgroup.wait_group(1)
            for h in cutlass.range_constexpr(2):
                p = decode_e2m1_word(wm[b][h][j], sc[b][h][j // 2])
                for tt in cutlass.range_constexpr(4):  # P[4j + tt]: step tt // 2, slot tt % 2
                    tCrW32[f][sm90_fragment_index(h, tt % 2, 0, tt // 2, 1)] = p[tt]
            if cutlass.const_expr(g == 0):
                tok_pipeline.consumer_wait(tok_r)
            cute.nvgpu.warpgroup.fence()
            buf = tok_r.index
            for st in cutlass.range_constexpr(2):
                cute.gemm(tiled_mma, acc[b], tCrW[f][(None, None, st)],
                          tCrT[(None, None, 2 * (j % 2) + st, j // 2 + 2 * buf)], acc[b])
            cute.nvgpu.warpgroup.commit_group()
            if cutlass.const_expr(with_next):
                if cutlass.const_expr(g == 0):
                    packed, scales = self.token_chunks(storage, ab_pipeline, ahead, tok)
                # this thread's first word after the first group, its second (wpt 2) after
                # the next word's first group;
                # the fence and arrive one group after the last store (the stores have
                # completed by then, so the proxy fence does not wait for them), after a
                # wait_group that retired all of kt - 1 (any group's but the first's)
                wpt = tok[2]
                if cutlass.const_expr(g % self.blocks == 0 and j < wpt):
                    self.store_token_words(storage, tok_w, tok, packed, scales, (j,))
                if cutlass.const_expr(g == self.blocks * (wpt - 1) + 1):
                    self.publish_tokens(tok_pipeline, tok_w)
                if cutlass.const_expr(g == groups - 1):
                    wm_next, sc_next = self.load_weights(storage, ahead, wgt)
                    self.release_stage(ab_pipeline, ahead)
        if cutlass.const_expr(with_next):
            tok_w.advance()
            ahead.advance()
        tok_r.advance()
        return ahead, tok_w, tok_r, wm_next, sc_next

    @cute.jit
    def epilogue(self, acc, box, tidx, desc_c, c_addr, m, n, row_a, col, tokens: int, last,
                 partial=None):
        """One m64 block's accumulators (64 weight rows x `tokens` static) -> C rows row_a ..,
        columns col .. col + 63, through this WG's staging box. stmatrix.trans turns wgmma's
        fragments (a thread holds token pairs) into C's rows (8 weight rows = 16 bytes).
        Then one TMA store, which clips the rows past the group's M and the columns past its
        N: full and partial tiles take the same path, without predicates. Where C's rows
        have no 16-byte pitch or start (N % 8, an offset view) the TMA cannot address them
        and the WG stores the box element by element instead (consecutive lanes,
        consecutive columns).
        The caller (store_tile) made the box free; the proxy fence before the barrier makes
        the stmatrix writes visible to the TMA."""
        wtid = tidx % 128
        lead = Int32(wtid == 0)
        wg_barrier = 1 + tidx // 128  # named barrier of this WG's 128 threads
        pairs = tokens // 16
        for p0 in cutlass.range_constexpr(0, pairs, SM90_FIXUP_BATCH):
            batch = range(p0, min(pairs, p0 + SM90_FIXUP_BATCH))
            if cutlass.const_expr(partial is not None):
                # a FIXUP's partial sums: all loads of a batch issue before the first use, so
                # their L2 round trips overlap (the asm keeps program order, so one load per
                # use would pay one round trip each)
                w = {p: ld_global_relaxed_v4_f32(partial + 2 * p * 2048)
                     + ld_global_relaxed_v4_f32(partial + (2 * p + 1) * 2048) for p in batch}
            for p in batch:
                # matrices (j, h): accumulator columns 8 j .., rows 8 h ..; values 4 j + 2 h + e,
                # i.e. accumulators 8 p .. 8 p + 7 (workspace groups 2 p, 2 p + 1)
                x = [acc[8 * p + e] for e in range(8)]
                if cutlass.const_expr(partial is not None):
                    x = [x[e] + w[p][e] for e in range(8)]
                v = [pack_acc_f16x2(x[4 * j + 2 * h], x[4 * j + 2 * h + 1]) for j, h in ((0, 0), (0, 1), (1, 0), (1, 1))]
                stmatrix_x4_trans(box + sm90_c_stage_offset(wtid, p), *v)
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.barrier(barrier_id=wg_barrier, number_of_threads=128)
        if ((n % 8) | Int32(c_addr % 16)) == 0:
            if last:
                self.store_box_vectors(box, wtid, c_addr, m, n, row_a, col, tokens)
            else:
                tma_store_2d(desc_c, col, row_a, box, lead)
        else:
            self.store_box_elements(box, wtid, c_addr, m, n, row_a, col, tokens)

    @cute.jit
    def store_box_vectors(self, box, wtid, c_addr, m, n, row_a, col, tokens: int):
        """The staged box -> C with 16-byte stores by the WG's 128 threads, for the CTA's
        last tile: a TMA store would hold the CTA (and its SM, which the next call's CTA
        waits for) until the TMA unit has read the box, about 1 us after the store is
        issued on the H200 (tools/sm90_trace.py timeline); plain stores leave nothing
        reading shared memory once issued. Per pass 16 token rows x 8 chunks of 8 columns,
        8 consecutive lanes one row's 128 bytes; a chunk is wholly in C or wholly past N
        (n % 8 == 0, the TMA path's condition), rows past M are skipped."""
        j = wtid % 8
        gn = col + 8 * j
        for i in cutlass.range_constexpr(tokens // 16):
            tok = 16 * i + wtid // 8
            v = ld_shared_v4(box + sm90_c_box_offset(tok, 8 * j))
            gm = row_a + tok
            st_global_v4_b32(c_addr + (Int64(gm) * n + gn) * 2, *v, Int32(gm < m and gn < n))

    @cute.jit
    def store_box_elements(self, box, wtid, c_addr, m, n, row_a, col, tokens: int):
        """The staged box -> C with one predicated 2-byte store per element: per pass the WG
        covers 4 token rows x 64 columns, lane pairs of columns (sm90_c_stage_offset's
        swizzle)."""
        pair = wtid % 32
        for i in cutlass.range(tokens // 4, unroll=4):
            tok = 4 * i + wtid // 32
            word = ld_shared_u32(box + sm90_c_box_offset(tok, 2 * pair))
            gm = row_a + tok
            gn = col + 2 * pair
            addr = c_addr + (Int64(gm) * n + gn) * 2
            st_global_b16(addr, word, Int32(gm < m and gn < n))
            st_global_b16(addr + 2, word >> 16, Int32(gm < m and gn + 1 < n))
# <<< sm90 kernel


# Cost of a tile on the H200, measured (notes/measurements.md, 2026-12-01, second session):
# microseconds per 128-K K-tile by (tile_n, token rows), and a fixed cost per tile that takes
# in its prologue, epilogue and pipeline fill. Only ratios matter: they pick the tile_n.
# The narrower widths scale the full tile's figure by what one tile per CTA measured
# (tools/sm90_ktile_cost.py, 2026-12-01, fifth session: 1.572 / 1.396 / 1.111 / 0.928 us at
# tile_n 256 and 1.028 / 0.861 / 0.763 / 0.539 at 128 for 128 / 96 / 64 / 32 tokens): the
# weight decode, the same at every width, keeps narrow tiles dear.
# (256, 96) is fit, not scaled: at the measured ratio (1.53) the model gives shape 1 the
# (96, 64) phases, which ran it 2 us slower than (64,) in an alternating A/B (kernel 77.2 /
# 76.7 against 74.7 / 75.5 us) while they ran shape 0 3 us faster; 1.66 picks both right.
SM90_KTILE_US = {
    (256, 128): 1.72, (256, 96): 1.66, (256, 64): 1.22, (256, 32): 1.02,
    (128, 128): 1.01, (128, 96): 0.85, (128, 64): 0.75, (128, 32): 0.53,
    (192, 128): 1.34, (192, 96): 1.23, (192, 64): 0.95, (192, 32): 0.79,
}
# 96-row token tiles at tile_n 192 (all three WGs decode), measured one tile per CTA
# (tools/sm90_ktile_cost.py, thirteenth session): 0.967 / 0.840 / 0.752 us per K-tile at
# 96 / 64 / 32 tokens, in this table's units x 1.058 (its (192, 128) entry against that
# session's one-tile 1.267 us). Per MAC that is tile_n 128's rate (0.837 us per 128 x 128
# K-tile then): it decodes as many values per MAC, 1/96 + 1/192 = 2/128, though its K-loop
# has 277 SASS instructions per warp against 338.
SM90_KTILE_US_96_TOKENS = {(192, 96): 1.02, (192, 64): 0.89, (192, 32): 0.80}
SM90_TILE_US = {256: 5.0, 192: 3.0, 128: 1.8}
# Widths the chooser offers. tile_n 192 (three consumer WGs) measured slower on all four
# shapes (kernel 145.3 / 82.2 / 44.9 / 21.0 us whole, 128.9 / 79.0 / 35.7 / 21.7 K-range,
# against the chosen 111.5 / 74.0 / 33.5 / 16.9): its K-tile costs 0.86 us per 128 weight
# rows, between 128's 1.03 and 256's 0.78, and the model cannot tell it apart reliably.
# tile_n 192 at 96 tokens (all three WGs decode tokens) measured slower on all four
# shapes too: whole 150.7 / 77.7 / 34.8 / 17.4 us, K-range 131.6 / 69.9 / 32.8 / 17.9,
# against the chosen 109.1 / 69.3 / 29.4 / 15.3 (thirteenth session, two rounds alike).
SM90_TILE_N_CHOICES = (128, 256)
# Narrow phases the chooser offers, the preferred first (it wins a model tie). (96, 64)
# ran shape 0 at 116.9 against 124.9 us kernel with (64,) (tile_n 256 K-range), and it is
# faster even where no tile uses its 96 phase: shapes 2 / 3 at tile_n 128 ran 30.6 / 15.3,
# 30.6 / 15.2, 30.5 / 15.3 us against 31.2 / 15.6, 31.2 / 15.6, 31.3 / 15.5 with (64,)
# (three alternating rounds, notes/measurements.md, 2026-12-01, tenth session), with the
# same K-loop (338 against 339 SASS instructions): not explained.
SM90_NARROW_CHOICES = ((96, 64), (64,))


# A split piece's extra cost: storing or adding tile_n x 128 fp32 partial sums, and the
# FIXUP's wait where both pieces run at once. Fit to the H200 (notes/measurements.md,
# 2026-12-01, fourth session): with 2.5 the model picks the measured-best config on all
# four benchmark shapes.
SM90_FIXUP_US = {256: 2.5, 192: 1.8, 128: 1.2}
# Widths the chooser offers K-range (k_range_units) at. At tile_n 128 it measured slower
# on all four shapes (kernel 161.5 / 92.6 / 35.8 / 17.4 against 144.8 / 86.2 / 33.3 / 16.9
# us whole): its 2x more pieces each pay a pipeline fill and a partial.
SM90_K_RANGE_TILE_N = (256,)
# At tile_n 128 a problem of one wave (no more tiles than SMs) is offered split pieces cut
# by balanced_units instead: the long tiles' heads go to the idle and short CTAs, one split
# per long tile, every tile running at once (so the split keeps L2 sharing). Against whole
# tiles (notes/measurements.md, 2026-12-01, eleventh session, run 9, two rounds each):
# shape 2 29.6 / 29.6 against 30.5 / 30.5 us; G = 2 M = (64, 128) N = 2048 K = 4096
# 20.3 / 20.3 against 29.9 / 29.7; G = 1 M = 300 N = 4096 K = 4096 26.3 / 26.2 against
# 30.5 / 30.4; G = 2 M = (64, 200) N = 4096 K = 2048 17.3 / 17.3 against 18.0 / 17.9.
# On a problem of many waves its LPT order lost the L2 sharing (shape 0 at tile_n 256:
# 160.5 us against 109.1 with k_range_units), so it is not used there.
SM90_BALANCED_TILE_N = (128,)
# balanced_units sets its split points from these: the K-tile costs tools/sm90_ktile_cost.py
# measured at tile_n 128 (ninth session) by token width, and a unit / split cost. Shape 2
# ran the same within 0.2 us with (unit, split) = (1.0, 0.8), (0.5, 0.5), (1.5, 1.0) and
# (0.7, 1.4); the chooser's fitted table above (which ranks configs) cut its heads too
# short: 30.4-30.5 us.
SM90_BALANCE_KTILE_US = {128: 0.847, 96: 0.765, 64: 0.587, 32: 0.513}
SM90_BALANCE_UNIT_US, SM90_BALANCE_FIXUP_US = 1.0, 0.8


def sm90_cost_model(cfg: Sm90Config) -> tuple[tuple[float, ...], float, float]:
    """(us per K-tile in each phase, us per unit, us per split piece)."""
    table = SM90_KTILE_US_96_TOKENS if cfg.tile_m == 96 else SM90_KTILE_US
    kt_us = tuple(table[(cfg.tile_n, w)] for w in cfg.widths)
    return kt_us, SM90_TILE_US[cfg.tile_n], SM90_FIXUP_US[cfg.tile_n]


def sm90_work_schedule(sizes: Sequence[Sequence[int]], cfg: Sm90Config, num_sms: int) -> WorkSchedule:
    """The Hopper kernel's per-CTA work units: the phases of split_tiles_by_width, whole
    tiles in round robin, or split: a one-wave problem at a SM90_BALANCED_TILE_N width by
    balanced_units, anything else into K-range pieces of equal modeled time.

    Memoized (a WorkSchedule is immutable): the chooser models every candidate's schedule
    of a new problem, and the runner then builds the chosen one; a split schedule takes
    milliseconds of Python, which a call with new sizes would otherwise pay twice. The
    cost constants in use are part of the key, so a change to them is seen."""
    balance = None
    if cfg.split_k and cfg.tile_n in SM90_BALANCED_TILE_N:
        balance = (tuple(SM90_BALANCE_KTILE_US[w] for w in cfg.widths), SM90_BALANCE_UNIT_US,
                   SM90_BALANCE_FIXUP_US)
    return _sm90_work_schedule(tuple(map(tuple, sizes)), cfg, num_sms, sm90_cost_model(cfg), balance)


def sm90_splits_balanced(cfg: Sm90Config, num_tiles: int, num_sms: int) -> bool:
    """Whether a split config's pieces come from balanced_units (a one-wave problem at a
    SM90_BALANCED_TILE_N width) rather than k_range_units."""
    return cfg.split_k and cfg.tile_n in SM90_BALANCED_TILE_N and num_tiles <= num_sms


@functools.lru_cache(maxsize=32)
def _sm90_tiles(sizes: tuple, tile_n: int, widths: tuple) -> tuple[tuple, tuple[int, ...], tuple[int, ...]]:
    """(schedule rows, tiles per phase, K-tiles per group) of phased_tile_schedule, kept
    for the schedule generators and sm90_may_beat's probe of the same candidate."""
    rows, phase_sizes = phased_tile_schedule(sizes, tile_n, widths)
    return tuple(rows), phase_sizes, tuple(k // SM90_PACKED_K_TILE for _, _, k, _ in sizes)


@functools.lru_cache(maxsize=32)  # a few problems' candidates (about 6 each)
def _sm90_work_schedule(sizes: tuple, cfg: Sm90Config, num_sms: int, costs: tuple, balance) -> WorkSchedule:
    rows, phase_sizes, k_tiles = _sm90_tiles(sizes, cfg.tile_n, cfg.widths)
    if not cfg.split_k:
        return round_robin_units(rows, phase_sizes, k_tiles, persistent_grid(len(rows), num_sms))
    if balance is not None and sm90_splits_balanced(cfg, len(rows), num_sms):
        kt_us, unit_us, fixup_us = balance
        return balanced_units(rows, phase_sizes, k_tiles, num_sms, list(kt_us), unit_us, fixup_us)
    return k_range_units(rows, phase_sizes, k_tiles, num_sms, *costs)


def sm90_partial_floats(cfg: Sm90Config) -> int:
    """fp32 values of one workspace slot: a whole tile's accumulators (tile_n x tile_m)."""
    return cfg.tile_n * cfg.tile_m


def sm90_schedule(sizes: Sequence[Sequence[int]], cfg: Sm90Config, num_sms: int) -> HostSchedule:
    ws = sm90_work_schedule(sizes, cfg, num_sms)
    ranges, units = ws.tables()
    return HostSchedule(
        {"ranges": ranges, "units": units}, sum(map(len, ws.cta_units)), len(ranges),
        workspace_floats=ws.num_slots * sm90_partial_floats(cfg),
        num_flags=ws.num_slots * cfg.consumer_wgs,  # one arrival flag per slot and WG
        unit_stride=ws.unit_stride,
    )


def sm90_makespan_us(sizes: Sequence[Sequence[int]], cfg: Sm90Config, num_sms: int) -> float:
    """The slowest CTA's modeled time under the config's schedule."""
    if not cfg.split_k:
        return max(sm90_round_robin_cta_us(sizes, cfg, num_sms))
    return max(modeled_cta_us(sm90_work_schedule(sizes, cfg, num_sms), *sm90_cost_model(cfg)))


def sm90_round_robin_cta_us(sizes: Sequence[Sequence[int]], cfg: Sm90Config,
                            num_sms: int) -> list[float]:
    """modeled_cta_us of a whole-tile config's schedule (round_robin_units) without building
    it: the same costs summed in the same order, so the same floats. The config choice
    models every whole-tile candidate of a new problem this way."""
    kt_us, unit_us, _ = sm90_cost_model(cfg)
    costs = []
    for p, runs in enumerate(phased_tile_runs(sizes, cfg.tile_n, cfg.widths)):
        for tiles in runs:
            costs += [sizes[tiles[0][0]][2] // SM90_PACKED_K_TILE * kt_us[p] + unit_us] * len(tiles)
    grid = persistent_grid(len(costs), num_sms)
    return [sum(costs[c::grid]) for c in range(grid)]


def sm90_offers_split(sizes: Sequence[Sequence[int]], cfg: Sm90Config, num_sms: int) -> bool:
    """Whether the chooser considers split pieces at cfg's width: K-range at the
    SM90_K_RANGE_TILE_N widths, balanced_units at the SM90_BALANCED_TILE_N ones when the
    problem is one wave."""
    one_wave = sum(tiles_per_group(sizes, cfg.tile_m, cfg.tile_n)) <= num_sms
    return cfg.tile_n in SM90_K_RANGE_TILE_N or (cfg.tile_n in SM90_BALANCED_TILE_N and one_wave)


def sm90_may_beat(sizes: Sequence[Sequence[int]], cfg: Sm90Config, num_sms: int,
                  makespan: float) -> bool:
    """False when cfg's schedule is known to be slower than `makespan` by one greedy fill
    (k_range_fits, at makespan x (1 + SM90_BOUND_MARGIN) for the floats summed in another
    order); True otherwise, and always for a config not split by k_range_units."""
    if not cfg.split_k or makespan == math.inf:
        return True
    rows, phase_sizes, k_tiles = _sm90_tiles(tuple(map(tuple, sizes)), cfg.tile_n, cfg.widths)
    if sm90_splits_balanced(cfg, len(rows), num_sms):
        return True
    return k_range_fits(makespan * (1 + SM90_BOUND_MARGIN), rows, phase_sizes, k_tiles, num_sms,
                         *sm90_cost_model(cfg))


def sm90_makespan_lower_bound(sizes: Sequence[Sequence[int]], cfg: Sm90Config, num_sms: int) -> float:
    """A bound below sm90_makespan_us(sizes, cfg, num_sms) from the tiles' modeled costs
    alone, without building a schedule (O(groups)): every schedule covers each tile's
    K-tiles once, in units that each cost unit_us, on at most num_sms CTAs, so its slowest
    CTA has at least the mean; unsplit, the costliest tile also sits whole on one CTA. A
    tile's phase is split_tiles_by_width's (width_phase)."""
    kt_us, unit_us, _ = sm90_cost_model(cfg)
    total, top = 0.0, 0.0
    for m, n, k, _ in sizes:
        m_tiles = ceil_div(m, cfg.tile_m)
        if m_tiles == 0:
            continue
        k_tiles = k // SM90_PACKED_K_TILE
        used = m - (m_tiles - 1) * cfg.tile_m
        last = k_tiles * kt_us[width_phase(cfg.widths, used)] + unit_us
        full = k_tiles * kt_us[0] + unit_us
        total += ceil_div(n, cfg.tile_n) * ((m_tiles - 1) * full + last)
        top = max(top, full if m_tiles > 1 else last)
    return total / num_sms if cfg.split_k else max(total / num_sms, top)


# sm90_makespan_lower_bound against a makespan: the bound is exact arithmetic's mean, the
# makespan a max of sums in another order; a candidate is skipped only when its bound
# exceeds the best makespan by more than float rounding could
SM90_BOUND_MARGIN = 1e-9


def choose_sm90_config(sizes: Sequence[Sequence[int]], num_sms: int = 132) -> Sm90Config:
    """tile_n 256 halves the token decode per MAC but makes tiles twice as long; split
    pieces even out the CTAs at the price of partial sums (K-range at 256, balanced_units
    at 128 when the problem is one wave). Picked by the modeled makespan (ties go to the
    earlier, simpler config: whole tiles before split ones, 128 before 256).

    Candidates are modeled in order of sm90_makespan_lower_bound; those whose bound
    exceeds the best makespan found are never modeled, and a K-range candidate that one
    greedy fill shows slower (sm90_may_beat) is not either: the choice is the same as
    modeling all (tools/schedule_equivalence.py). This is the host's cost for problem
    sizes not seen before, where a split schedule takes about a millisecond of Python
    (tools/chooser_cost.py)."""
    configs = sm90_candidate_configs(sizes, num_sms)
    bounds = [sm90_makespan_lower_bound(sizes, cfg, num_sms) for cfg in configs]
    best = (math.inf, -1)  # (makespan, index): the first in list order wins a tie
    for i in sorted(range(len(configs)), key=bounds.__getitem__):
        if bounds[i] > best[0] * (1 + SM90_BOUND_MARGIN):
            break  # this bound and every later one: worse than the best
        if sm90_may_beat(sizes, configs[i], num_sms, best[0]):
            best = min(best, (sm90_makespan_us(sizes, configs[i], num_sms), i))
    return configs[best[1]]


def sm90_candidate_configs(sizes: Sequence[Sequence[int]], num_sms: int) -> list[Sm90Config]:
    """The configs choose_sm90_config picks from, in its tie-break order: whole tiles at each
    width and narrow choice, then the split ones it offers (sm90_offers_split). A config
    that would model the same as an earlier one (sm90_phase_signature: when no tile falls
    in the phase where two narrow choices differ) is left out: it could only tie, and a tie
    goes to the earlier one."""
    configs = [make_sm90_config(n, narrow=w) for n in SM90_TILE_N_CHOICES for w in SM90_NARROW_CHOICES]
    configs += [cfg for n in SM90_TILE_N_CHOICES for w in SM90_NARROW_CHOICES
                if sm90_offers_split(sizes, cfg := make_sm90_config(n, narrow=w, split_k=True), num_sms)]
    seen, distinct = set(), []
    for cfg in configs:
        signature = sm90_phase_signature(sizes, cfg)
        if signature not in seen:
            seen.add(signature)
            distinct.append(cfg)
    return distinct


def sm90_phase_signature(sizes: Sequence[Sequence[int]], cfg: Sm90Config) -> tuple:
    """What a config's modeled makespan depends on, O(groups): its tile width, whether it
    splits, and per non-empty phase in order, the token rows its tiles use, their width and
    cost per K-tile. Equal signatures put the same tiles in the same order at the same
    costs (phased_tile_schedule; balanced_units' costs go by width), so every schedule
    generator models them alike."""
    used = set()  # token rows a tile uses: tile_m for a full tile, M % tile_m for a last one
    for m, n, _, _ in sizes:
        if m and n:
            used.update(r for r in (min(m, cfg.tile_m), m % cfg.tile_m) if r)
    kt_us = sm90_cost_model(cfg)[0]
    phases = {}
    for r in sorted(used):
        phases.setdefault(width_phase(cfg.widths, r), []).append(r)
    return (cfg.tile_n, cfg.tile_m, cfg.split_k,
            tuple((tuple(rows), cfg.widths[p], kt_us[p]) for p, rows in sorted(phases.items())))


def sm90_can_implement(config: Sm90Config, sizes) -> tuple[bool, str]:
    if not sm90_config_is_legal(config):
        return False, f"illegal config {config}"
    if not sm90_is_valid_problem(sizes):
        return False, "the Hopper kernel needs K a multiple of 256 and L == 1"
    return True, ""


def compile_sm90(config: Sm90Config) -> CompiledKernels:
    """Compiles the descriptor-init and GEMM kernels of a config for sm_90a; one build serves
    every group count (the count is a launch argument of both)."""
    op = Sm90Fp4GroupedGemm(config)
    init_fn = cute.compile(
        op.init_tensormaps,
        fake_ptr(cutlass.Int32), fake_ptr(cutlass.Int64), fake_ptr(cutlass.Int64, 128), Int32(1),
    )
    gemm_fn = cute.compile(
        op,
        fake_ptr(cutlass.Int32), fake_ptr(cutlass.Int64), fake_ptr(cutlass.Int32),
        fake_ptr(cutlass.Int32), fake_ptr(cutlass.Int64, 128), fake_ptr(cutlass.Float32),
        fake_ptr(cutlass.Int32), Int32(1), Int32(1), Int32(1),
    )

    def init(ptrs, sizes, tensormaps):
        init_fn(
            device_ptr(sizes, cutlass.Int32), device_ptr(ptrs, cutlass.Int64),
            device_ptr(tensormaps, cutlass.Int64, 128), Int32(sizes.shape[0]),
        )

    def prepare(sizes, ptrs, tensormaps, sched, scratch):
        # without split-K the kernel is compiled without any access to the scratch
        partials = fake_ptr(cutlass.Float32) if scratch is None else device_ptr(scratch.partials, cutlass.Float32)
        flags = fake_ptr(cutlass.Int32) if scratch is None else device_ptr(scratch.flags, cutlass.Int32)
        args = (
            device_ptr(sizes, cutlass.Int32), device_ptr(ptrs, cutlass.Int64),
            device_ptr(sched.tables["ranges"], cutlass.Int32),
            device_ptr(sched.tables["units"], cutlass.Int32),
            device_ptr(tensormaps, cutlass.Int64, 128), partials, flags, Int32(sched.host.grid),
            Int32(sched.host.unit_stride), Int32(sizes.shape[0]),
        )
        return bind_launch(gemm_fn, args)

    return CompiledKernels(init, prepare)


def sm90_backend() -> KernelBackend:
    return KernelBackend(
        name="sm90",
        choose_config=choose_sm90_config,
        can_implement=sm90_can_implement,
        tile_shape=lambda cfg: (cfg.tile_m, cfg.tile_n),
        compile=compile_sm90,
        num_desc=SM90_NUM_DESC,
        schedule=sm90_schedule,
    )


# ======================================================================================
# 8b. FP4 decode kernel: the CUDA fallback's operands in one pass (any GPU the DSL targets)
# ======================================================================================
# >>> decode kernel
DECODE_THREADS = 256
# a job is one operand: addresses of its packed bytes, blocked scales and fp16 output, its
# 16-value blocks (rows x K/16), K/16 and K/64 (the scale atoms per 128 rows), as int64
DECODE_JOB_FIELDS = 6


def decode_scale_offset(r, j, rest_k):
    """Byte offset of row r's K-block j scale in a blocked scale tensor of the kernels'
    layout: 512-byte atoms of 128 rows x 4 K-blocks, (r // 128, j // 4) in row-major order
    of rest_k = K/64 atoms per 128 rows, CUTLASS's 32 x 4 x 4 order inside. Works on host
    ints and on kernel Int64s alike."""
    return ((r // 128) * rest_k + j // 4) * SF_ATOM_BYTES + (r % 32) * 16 + ((r % 128) // 32) * 4 + j % 4


@dsl_user_op
def ld_global_nc_v2(addr: Int64, *, loc=None, ip=None):
    return _asm_values(2, [_v(Int64(addr), loc, ip)], "ld.global.nc.v2.b32 {$0, $1}, [$2];",
                       "=r,=r,l", False, loc, ip)


@dsl_user_op
def ld_global_nc_u32(addr: Int64, *, loc=None, ip=None) -> Uint32:
    return _asm_value(Uint32, [_v(Int64(addr), loc, ip)], "ld.global.nc.b32 $0, [$1];", "=r,l",
                      loc, ip, side_effects=False)


@dsl_user_op
def ld_global_nc_u8(addr: Int64, *, loc=None, ip=None) -> Uint32:
    return _asm_value(Uint32, [_v(Int64(addr), loc, ip)], "ld.global.nc.u8 $0, [$1];", "=r,l",
                      loc, ip, side_effects=False)


@dsl_user_op
def mul_f16x2(a: Uint32, b: Uint32, *, loc=None, ip=None) -> Uint32:
    return _asm_value(Uint32, [_v(Uint32(a), loc, ip), _v(Uint32(b), loc, ip)],
                      "mul.rn.f16x2 $0, $1, $2;", "=r,r,r", loc, ip, side_effects=False)


class Fp4RowDecoder:
    """Packed E2M1 rows and their blocked E4M3 scales -> fp16 rows, exactly, for the fp16
    fallback (run_torch_fp16): every operand of a batch of groups in one launch, one pass
    over memory (9 bytes read, 32 written per 16 values), where the torch decode makes
    several (an int32 index, a gather, a multiply: about 10 bytes moved per value).

    Grid (blocks of the largest job / DECODE_THREADS, jobs): each thread one 16-value scale
    block of one job, its 8 packed bytes to 32 bytes of fp16. Table-driven, with no
    conversion instruction that only some GPUs have: a packed byte -> the f16x2 of its two
    E2M1 values (_e2m1_pair_table), an E4M3 byte -> the f16x2 (s, s) (_e4m3_pair_table), one
    f16x2 multiply per byte. An E2M1 value times an E4M3 scale has at most 6 significant
    bits and lies within 2^-10 .. 2688, so the fp16 product is exact (a NaN scale gives NaN
    as in the reference). Needs the kernels' layout: packed rows dense, scales in the
    blocked atom order (decode_scale_offset)."""

    @cute.jit
    def __call__(self, jobs_ptr: cute.Pointer, pair_ptr: cute.Pointer, scale_ptr: cute.Pointer,
                 num_jobs: Int32, max_blocks: Int32):
        self.kernel(jobs_ptr, pair_ptr, scale_ptr).launch(
            grid=[(max_blocks + DECODE_THREADS - 1) // DECODE_THREADS, num_jobs, 1],
            block=[DECODE_THREADS, 1, 1],
        )

    @cute.kernel
    def kernel(self, jobs_ptr, pair_ptr, scale_ptr):
        tidx, _, _ = cute.arch.thread_idx()
        bx, job, _ = cute.arch.block_idx()
        mJobs = cute.make_tensor(jobs_ptr, cute.make_layout((DECODE_JOB_FIELDS, 1 << 20), stride=(1, DECODE_JOB_FIELDS)))
        t = Int64(bx) * DECODE_THREADS + tidx
        if t < mJobs[3, job]:
            kblocks = mJobs[4, job]
            r = t // kblocks
            j = t - r * kblocks
            scale = ld_global_nc_u8(mJobs[1, job] + decode_scale_offset(r, j, mJobs[5, job]))
            s2 = ld_global_nc_u32(scale_ptr.toint() + Int64(scale) * 4)
            words = ld_global_nc_v2(mJobs[0, job] + t * 8)
            pairs = [
                mul_f16x2(ld_global_nc_u32(pair_ptr.toint() + Int64((words[i // 4] >> (8 * (i % 4))) & 0xFF) * 4), s2)
                for i in range(8)
            ]
            out = mJobs[2, job] + t * 32
            st_global_v4_b32(out, *pairs[:4], Int32(1))
            st_global_v4_b32(out + 16, *pairs[4:], Int32(1))


_decoders: dict[tuple[int, int], Any] = {}  # compute capability -> compiled decoder, or False


def compile_fp4_decoder():
    """Fp4RowDecoder compiled for the current device's architecture (CUTE_DSL_ARCH's when set,
    as in the compile-only tests)."""
    return cute.compile(Fp4RowDecoder(), fake_ptr(cutlass.Int64), fake_ptr(cutlass.Int32),
                        fake_ptr(cutlass.Int32), Int32(1), Int32(1))


def fp4_decoder(device: torch.device):
    """Fp4RowDecoder compiled for the device's architecture (once per architecture), or None
    where the CuTe DSL is missing or does not compile for it: the fp16 fallback then decodes
    with torch ops (one warning)."""
    if _DSL_IMPORT_ERROR is not None:
        return None
    arch = torch.cuda.get_device_capability(device)
    fn = _decoders.get(arch)
    if fn is None:
        try:
            with torch.cuda.device(device):
                fn = compile_fp4_decoder()
        except Exception as e:  # any failure leaves the torch decode, which needs nothing more
            warn_once(f"the FP4 decode kernel does not compile for sm_{arch[0]}{arch[1]} ({type(e).__name__}: "
                      f"{e}); the fp16 fallback decodes with torch ops")
            fn = False
        _decoders[arch] = fn
    return fn or None


def launch_decoder(decoder, jobs: Sequence[tuple[int, ...]], device: torch.device) -> None:
    """One decode launch on the device's default CUDA queue over `jobs` (decode_jobs' rows)."""
    if device.index is None:  # "cuda": the current device
        device = torch.device("cuda", torch.cuda.current_device())
    table = to_device_async(torch.tensor(jobs, dtype=torch.int64), device)
    with torch.cuda.device(device):  # the module and the default queue are the device's
        decoder(device_ptr(table, cutlass.Int64), device_ptr(_e2m1_pair_table(device), cutlass.Int32),
                device_ptr(_e4m3_pair_table(device), cutlass.Int32), Int32(len(jobs)),
                Int32(max(job[3] for job in jobs)))
# <<< decode kernel


# ======================================================================================
# 9. Dispatch
# ======================================================================================
_warned: set[str] = set()


def warn_once(reason: str) -> None:
    """One RuntimeWarning per distinct reason for the life of the process."""
    if reason not in _warned:
        _warned.add(reason)
        warnings.warn(f"nvfp4 grouped GEMM: {reason}", RuntimeWarning, stacklevel=3)


def requested_path() -> str:
    path = os.environ.get(PATH_ENV, "auto").strip().lower() or "auto"
    if path not in PATHS:
        raise ValueError(f"{PATH_ENV}={path!r}; expected one of {', '.join(PATHS)}")
    return path


def requested_self_check() -> bool | None:
    """NVFP4_GEMM_SELF_CHECK: 1 checks every kernel's first launch per config and problem
    size against the exact path, 0 none; unset, the backend decides (KernelBackend)."""
    value = os.environ.get(SELF_CHECK_ENV, "").strip().lower()
    if value in ("", "auto"):
        return None
    if value not in ("0", "1"):
        raise ValueError(f"{SELF_CHECK_ENV}={value!r}; expected 0, 1 or auto")
    return value == "1"


_device_paths: dict[torch.device, str] = {}


def select_path(device: torch.device) -> str:
    """The path for a device, decided at its first call (reading NVFP4_GEMM_PATH then)."""
    path = _device_paths.get(device)
    if path is None:
        path = _device_paths[device] = _decide_path(device, requested_path())
    return path


def _decide_path(device: torch.device, requested: str) -> str:
    if requested == "torch":
        return "torch"
    if device.type != "cuda":
        if requested != "auto":
            warn_once(f"{PATH_ENV}={requested} needs a CUDA device; running the exact torch path")
        return "torch"
    major, minor = torch.cuda.get_device_capability(device)
    native = {10: "sm100", 9: "sm90"}.get(major)
    if requested == "auto":
        if native is None:
            return "torch"
        requested = native
    if requested != native:
        warn_once(
            f"{PATH_ENV}={requested} but the GPU is sm_{major}{minor}; "
            "running the torch path"
        )
        return "torch"
    if _DSL_IMPORT_ERROR is not None:
        warn_once(f"the CuTe DSL (nvidia-cutlass-dsl) is missing ({_DSL_IMPORT_ERROR}); running the torch path")
        return "torch"
    return requested


_BACKENDS: dict[str, Callable[[], KernelBackend]] = {"sm100": sm100_backend, "sm90": sm90_backend}
_runners: dict[tuple[torch.device, str], GroupedGemmRunner] = {}
_last_runner: GroupedGemmRunner | None = None


def get_runner(device: torch.device, path: str) -> GroupedGemmRunner:
    runner = _runners.get((device, path))
    if runner is None:
        num_sms = torch.cuda.get_device_properties(device).multi_processor_count
        # setdefault: of two threads that both found none, both use the one stored first
        runner = _runners.setdefault((device, path), GroupedGemmRunner(
            _BACKENDS[path](), num_sms, self_check=requested_self_check(), device_index=device.index,
            other_devices=torch.cuda.device_count() > 1,
        ))
    return runner


def is_sticky_error(error: BaseException) -> bool:
    """Whether an error from the kernel path means the CUDA context is gone (a device fault:
    no fallback can run on it), by its CUDA error code where it has one, else by torch's
    wording of a fault."""
    code = cuda_error_code(error)
    if code is not None:
        return code in STICKY_CUDA_ERRORS
    text = str(error)
    return "CUDA error" in text or "illegal" in text


def _run_kernel_path(data, problem: GroupedProblem, path: str, miss: LayoutMiss | None = None):
    """The kernel's result, or None (with one warning) when the kernel cannot take it: a
    problem it declines, a build that fails, or a launch refused with the context still
    usable. A device fault propagates. `miss`: this call's LayoutMiss from the fast path,
    if it got that far."""
    global _last_runner
    runner = get_runner(problem.device, path)
    config, reason = runner.plan(problem)
    if config is None:
        warn_once(f"{path} kernel cannot take this call ({reason}); using a fallback path")
        return None
    try:
        out = runner.run(data, problem, config, miss)
    except KernelLaunchError as e:
        if e.sticky:
            raise
        # the runner retired the config: the same words as plan()'s for later calls, so
        # that warn_once says it once
        warn_once(f"{path} kernel cannot take this call ({config} {runner.rejected[config]}); using a fallback path")
        return None
    except Exception as e:  # a compile failure: the DSL's errors derive from Exception only
        if is_sticky_error(e):
            raise
        warn_once(f"{path} kernel failed to build for {config} ({type(e).__name__}: {e}); using a fallback path")
        return None
    _last_runner = runner
    return out


def run_scaled_mm(data, problem: GroupedProblem) -> list[torch.Tensor]:
    """cuBLAS FP4 GEMM per group through torch._scaled_mm (Blackwell only). Reads the
    blocked scales in place (the reordered tensors' storage is cuBLAS's layout); caches
    nothing."""
    abc_tensors, _, sf_reordered, _ = data
    for (a, b, c), (sfa, sfb), (m, n, _, _) in zip(abc_tensors, sf_reordered, problem.sizes):
        if m == 0 or n == 0:
            continue
        c[:, :, 0] = torch._scaled_mm(
            a[:, :, 0].view(torch.float4_e2m1fn_x2),
            b[:, :, 0].transpose(0, 1).view(torch.float4_e2m1fn_x2),
            sfa.permute(5, 2, 4, 0, 1, 3).reshape(-1),
            sfb.permute(5, 2, 4, 0, 1, 3).reshape(-1),
            bias=None,
            out_dtype=torch.float16,
        )
    return [abc[2] for abc in abc_tensors]


def custom_kernel(data: input_t) -> output_t:
    """The leaderboard entry point: computes every group into its c and returns the c list.

    data = (abc_tensors, sfasfb_tensors, sfasfb_reordered_tensors, problem_sizes), one entry
    per group g (G groups, L == 1):
        abc_tensors[g] = (a, b, c): a float4_e2m1fn_x2 [M, K/2, 1] and b [N, K/2, 1], two
            E2M1 values per byte, low nibble first, K-major; c float16 [M, N, 1], written
        sfasfb_tensors[g] = (sfa, sfb): the E4M3 scales [M, K/16, 1] and [N, K/16, 1] on
            the CPU (not read)
        sfasfb_reordered_tensors[g] = (sfa, sfb): the same scales on the GPU in cuBLAS's
            blocked layout, float8_e4m3fn (32, 4, ceil(MN/128), 4, ceil(K/64), 1): 128-row
            x 4-scale atoms of 512 bytes, row r of an atom at byte (r % 32) * 16 + (r // 32) * 4
        problem_sizes[g] = (M, N, K, L): ints, M and N >= 0 (0: an empty group), K a
            positive multiple of 16, L == 1
    c[m, n] = fp16(sum_k a[m, k] sfa[m, k // 16] b[n, k] sfb[n, k // 16]), fp32 sums.
    Bad input raises ValueError naming the group and the field.

    All GPU work is queued on the default CUDA queue, where the leaderboard's harness runs
    torch's work; a caller that works on another queue synchronizes before calling. CUDA
    graph capture is not supported. A call with the same tensor objects and sizes as an
    earlier one goes straight to the cached launch; anything else is validated first.
    """
    miss = None
    if _last_runner is not None:
        out = _last_runner.run_cached(data)
        if out.__class__ is list:
            return out
        miss = out
    problem = validate_inputs(data)
    path = select_path(problem.device)
    if path in _BACKENDS:
        out = _run_kernel_path(data, problem, path, miss)
        if out is not None:
            return out
        if path == "sm100" and problem.kernel_layout:
            try:
                return run_scaled_mm(data, problem)
            except RuntimeError as e:  # cuBLAS FP4 has shape limits of its own
                warn_once(f"torch._scaled_mm cannot take this call ({e}); running the torch path")
    elif path != "torch":
        warn_once(f"the {path} kernel is not built into this file; running the torch path")
    return run_torch_fallback(data, problem)
