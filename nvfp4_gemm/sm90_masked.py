"""The Hopper kernel behind the masked op (moe.grouped_mm_masked): token counts on the GPU.

Two kernels a call, both on the caller's current CUDA stream:

  MaskedPlanKernel   one CTA: from masked_m, the sizes, ranges and units tables the GEMM
                     walks (masked_plan.py's algorithm, which its Python mirror tests);
  Sm90MaskedGemm     the leaderboard's Hopper GEMM (sm90.Sm90Fp4GroupedGemm) over a grid
                     fixed by the buffers (MaskedGrid), storing C only below each group's M.

plus, once per set of buffers, the descriptor init of the leaderboard kernel at max_m rows.
This module is not part of submission.py (tools/build_submission.py leaves it out): it
launches on the caller's stream, which the leaderboard's contract never selects.
"""

from __future__ import annotations

import dataclasses
import functools

import torch

from .binding import KernelArg, bind_launch, fake_ptr, gmem_arg, int_arg
from .common import Int32, Int64, SmemAllocator, cute, cutlass
from .masked_plan import (
    MASKED_MAX_GRID,
    MASKED_PLAN_THREADS,
    MaskedGrid,
    SplitCosts,
    hinted_rows,
    masked_grid,
    phase_counts,
    split_cuts,
)
from .masked_runner import MaskedRunner, env_switch
from .plan_device import block_scan, group_rows
from .ptx import prefetch_l2, prefetch_lines
from .schedule import MAX_PHASES, RANGE_FIELDS, UNIT_FIELDS, UNIT_FIXUP, UNIT_PARTIAL, UNIT_WHOLE
from .sm90 import SM90_DESC_BYTES, SM90_NUM_DESC, Sm90Fp4GroupedGemm
from .sm90_config import (
    SM90_PACKED_K_TILE,
    Sm90Config,
    sm90_candidate_configs,
    sm90_cost_model,
    sm90_makespan_us,
    sm90_partial_floats,
)
from .watchdog import WatchSettings, fake_watch_args

try:
    import cuda.bindings.driver as cuda_driver
except ImportError:  # the torch paths still import
    cuda_driver = None


@dataclasses.dataclass(frozen=True)
class MaskedPlanConfig:
    """What the plan kernel is compiled for: the GEMM config's tile width and phase widths
    (widths[0] is the tile's height), and a split-K config's costs (None: whole tiles)."""

    tile_n: int
    widths: tuple[int, ...]
    split: SplitCosts | None = None


def masked_plan_is_legal(cfg: MaskedPlanConfig) -> bool:
    """Descending widths, at most MAX_PHASES of them (the ranges row holds MAX_PHASES + 1);
    split costs, where given, one a phase, positive, with pieces of at least one K-tile."""
    w = cfg.widths
    split_ok = cfg.split is None or (len(cfg.split.kt) == len(w) and min(cfg.split.kt) > 0
                                     and cfg.split.unit >= 0 and cfg.split.fixup >= 0 and cfg.split.min_kt >= 1)
    return (0 < len(w) <= MAX_PHASES and all(x > 0 for x in w) and list(w) == sorted(set(w), reverse=True)
            and cfg.tile_n > 0 and split_ok)


def masked_split_costs(config: Sm90Config) -> SplitCosts | None:
    """The split plan's costs of a split-K config (None for a whole-tile one)."""
    return SplitCosts.of(*sm90_cost_model(config)) if config.split_k else None


class MaskedPlanKernel:
    """Per-group token counts on the GPU -> the Hopper GEMM's sizes, ranges and units tables.

    How it works (one CTA of MASKED_PLAN_THREADS threads, thread g for group g):
      1. thread g clamps masked_m[g] to 0 .. max_m, writes group g's sizes row (m, N, K,
         1) and counts its tiles per phase (masked_plan.phase_counts) into shared memory;
      2. an inclusive scan over the groups (Hillis-Steele, log2(threads) steps, all
         phases at once) gives each group's rows per phase up to its own, the last entry
         each phase's size, and so each phase's first row S_p of the schedule;
      3. with a split-K config, every thread decides alike from the phases' sizes whether
         to split (masked_plan.split_cuts), and thread c computes cut c into shared memory;
      4. the threads walk the upper bound of tiles (every group full: G x M tiles x N
         tiles), a thread per tile: a live tile (tm < the group's M tiles) is schedule row
         i = S_p + the group's exclusive offset in phase p + its index in the group's run.
         Whole tiles: a whole-tile unit at units row (i % grid) * unit_stride + i // grid.
         Split: the CTA whose cuts hold the tile's first K-tile (a binary search of the
         cuts) gets it, walked backwards from its last tile; a tile the next cut falls in
         is that CTA's PARTIAL and the next CTA's FIXUP (masked_plan.masked_tables);
      5. thread c writes CTA c's ranges row: its phase starts and end, from S_p and the
         live total, or from its cuts.
    It lets the GEMM's grid launch at once (griddepcontrol.launch_dependents): the GEMM
    reads no table before its griddepcontrol.wait, which waits for this grid's writes.

    Constraints: G <= MASKED_PLAN_THREADS; grid <= MASKED_MAX_GRID; the config as
    masked_plan_is_legal says.

    Follows the grouped schedulers of CUTLASS (a persistent CTA's linear tile index mapped
    to a group through the groups' tile counts) and FlashInfer's masked one, with the map
    made once a call into the host schedule's own table format instead of in every CTA;
    the split is stream-K's (CUTLASS's stream-K scheduler: each CTA an equal share of the
    K-tiles, a tile cut between two CTAs reduced through a workspace), with one cut a tile.
    """

    def __init__(self, config: MaskedPlanConfig):
        assert masked_plan_is_legal(config), config
        self.cfg = config
        self.tile_m = config.widths[0]
        self.phases = len(config.widths)

    @cute.jit
    def __call__(self, masked_ptr: cute.Pointer, sizes_ptr: cute.Pointer, ranges_ptr: cute.Pointer,
                 units_ptr: cute.Pointer, groups: Int32, max_m: Int32, n: Int32, k: Int32, k_tiles: Int32,
                 grid: Int32, unit_stride: Int32, stream: cuda_driver.CUstream):
        self.kernel(masked_ptr, sizes_ptr, ranges_ptr, units_ptr, groups, max_m, n, k, k_tiles, grid,
                    unit_stride).launch(grid=[1, 1, 1], block=[MASKED_PLAN_THREADS, 1, 1], stream=stream)

    @cute.jit
    def group_plan(self, m):
        """(M tiles, those in phase 0, the last M tile's phase) of a group of m rows
        (masked_plan.group_plan)."""
        m_tiles = (m + self.tile_m - 1) // self.tile_m
        last_rows = m - (m_tiles - 1) * self.tile_m
        last = Int32(0)
        for q in cutlass.range_constexpr(1, self.phases):
            if last_rows <= self.cfg.widths[q]:
                last = Int32(q)
        full = m_tiles
        if last != 0:
            full = m_tiles - 1
        return m_tiles, full, last

    @cute.jit
    def split_decision(self, totals, live, k_tiles, grid):
        """(1 where the plan splits, else 0; the layout's total weight): masked_plan.split_cuts'
        test, in 64-bit integers (a weight times a CTA index passes 2**31)."""
        s = self.cfg.split
        tile_w = [Int64(k_tiles * s.kt[q] + s.unit) for q in range(self.phases)]
        total = Int64(0)
        for q in cutlass.range_constexpr(self.phases):
            total = total + Int64(totals[q]) * tile_w[q]
        share = total // Int64(grid)
        whole = Int64((live + grid - 1) // grid) * tile_w[0]
        widest = Int64(k_tiles * max(s.kt) + s.unit + 2 * max(s.kt))
        split = Int32(0)
        if live > 0:
            if share >= widest:
                if share + Int64(s.unit + 2 * s.fixup) < whole:
                    split = Int32(1)
        return split, total

    @cute.jit
    def cut(self, c, totals, live, total, k_tiles, grid):
        """Cut c's position in K-tiles along the layout (masked_plan.split_cuts)."""
        s = self.cfg.split
        pos = live * k_tiles
        if c < grid:
            target = Int64(c) * total // Int64(grid)
            pos = Int32(0)
            found = Int32(0)
            for q in cutlass.range_constexpr(self.phases - 1, -1, -1):  # the layout's phase blocks
                tile_w = Int64(k_tiles * s.kt[q] + s.unit)
                block = Int64(totals[q]) * tile_w
                if found == 0:
                    if target < block:
                        t = target // tile_w
                        rest = Int32(target - t * tile_w) - s.unit
                        pos = pos + Int32(t) * k_tiles + cutlass.max(rest, Int32(0)) // s.kt[q]
                        found = Int32(1)
                    else:
                        target = target - block
                        pos = pos + totals[q] * k_tiles
            j = pos // k_tiles
            kt = pos - j * k_tiles
            if kt < s.min_kt:
                pos = j * k_tiles
            else:
                if kt > k_tiles - s.min_kt:
                    pos = (j + 1) * k_tiles
        return pos

    @cute.kernel
    def kernel(self, masked_ptr, sizes_ptr, ranges_ptr, units_ptr, groups, max_m, n, k, k_tiles, grid,
               unit_stride):
        tidx, _, _ = cute.arch.thread_idx()
        cute.arch.griddepcontrol_launch_dependents()
        threads = MASKED_PLAN_THREADS
        fields = {
            "rows": cute.struct.MemRange[cutlass.Int32, threads],
            "scan": cute.struct.MemRange[cutlass.Int32, MAX_PHASES * threads],
        }
        if cutlass.const_expr(self.cfg.split is not None):
            fields["cuts"] = cute.struct.MemRange[cutlass.Int32, MASKED_MAX_GRID + 1]
        storage = SmemAllocator().allocate(
            cute.struct(type("PlanStorage", (), {"__annotations__": fields})))
        sRows = storage.rows.get_tensor(cute.make_layout(threads))
        sScan = storage.scan.get_tensor(cute.make_layout((threads, MAX_PHASES), stride=(1, threads)))
        mMasked = cute.make_tensor(masked_ptr, cute.make_layout(1 << 20))
        mSizes = cute.make_tensor(sizes_ptr, cute.make_layout((4, 1 << 20), stride=(1, 4)))
        mRanges = cute.make_tensor(ranges_ptr, cute.make_layout((RANGE_FIELDS, 1 << 20), stride=(1, RANGE_FIELDS)))
        mUnits = cute.make_tensor(units_ptr, cute.make_layout((UNIT_FIELDS, 1 << 24), stride=(1, UNIT_FIELDS)))
        n_tiles = (n + self.cfg.tile_n - 1) // self.cfg.tile_n

        # 1. this thread's group: its rows, its sizes row, its tiles per phase
        m = group_rows(mMasked, mSizes, tidx, groups, max_m, n, k)
        sRows[tidx] = m
        m_tiles, full, last = self.group_plan(m)
        for p in cutlass.range_constexpr(self.phases):
            count = Int32(0)
            if cutlass.const_expr(p == 0):
                count = full * n_tiles
            else:
                if last == p:
                    count = n_tiles
            sScan[tidx, p] = count
        cute.arch.barrier()

        # 2. inclusive scan over the groups, every phase at once
        block_scan(sScan, tidx, self.phases, threads)
        totals = [sScan[threads - 1, p] for p in range(self.phases)]
        starts = [Int32(0) for _ in range(self.phases)]
        for p in cutlass.range_constexpr(1, self.phases):
            starts[p] = starts[p - 1] + totals[p - 1]
        live = starts[self.phases - 1] + totals[self.phases - 1]

        # 3. split or not, and the cuts (the layout puts phase q's tiles from layout[q] on)
        split = Int32(0)
        layout = [Int32(0) for _ in range(self.phases)]
        sCuts = None
        if cutlass.const_expr(self.cfg.split is not None):
            for q in cutlass.range_constexpr(self.phases - 2, -1, -1):
                layout[q] = layout[q + 1] + totals[q + 1]
            split, total = self.split_decision(totals, live, k_tiles, grid)
            sCuts = storage.cuts.get_tensor(cute.make_layout(MASKED_MAX_GRID + 1))
            if split != 0:
                for c in cutlass.range(tidx, grid + 1, threads, unroll=1):
                    sCuts[c] = self.cut(c, totals, live, total, k_tiles, grid)
            cute.arch.barrier()

        # 4. the live tiles of the upper bound -> their units rows
        m_bound = (max_m + self.tile_m - 1) // self.tile_m
        per_group = m_bound * n_tiles
        for idx in cutlass.range(tidx, groups * per_group, threads, unroll=1):
            g = idx // per_group
            r = idx - g * per_group
            tn = r // m_bound
            tm = r - tn * m_bound
            g_tiles, g_full, g_last = self.group_plan(sRows[g])
            if tm < g_tiles:
                # phase 0: the group's full tiles, column by column; else its last M tile
                i = starts[0] + sScan[g, 0] - g_full * n_tiles + tn * g_full + tm
                to_layout = layout[0] - starts[0]  # the tile's place in the split layout, less i
                if tm >= g_full:
                    for p in cutlass.range_constexpr(1, self.phases):
                        if g_last == p:
                            i = starts[p] + sScan[g, p] - n_tiles + tn
                            to_layout = layout[p] - starts[p]
                row = (i % grid) * unit_stride + i // grid
                unit = (g, tm, tn, Int32(0), k_tiles, Int32(UNIT_WHOLE), Int32(0), Int32(-1))
                if cutlass.const_expr(self.cfg.split is None):
                    self.write_unit(mUnits, row, unit)
                else:
                    if split == 0:
                        self.write_unit(mUnits, row, unit)
                    else:
                        self.write_split_tile(mUnits, sCuts, i + to_layout, (g, tm, tn), k_tiles, grid, unit_stride)

        # 5. each CTA's phase starts and end
        for c in cutlass.range(tidx, grid, threads, unroll=1):
            if cutlass.const_expr(self.cfg.split is None):
                self.write_round_robin_range(mRanges, c, starts, live, grid, unit_stride)
            else:
                if split == 0:
                    self.write_round_robin_range(mRanges, c, starts, live, grid, unit_stride)
                else:
                    self.write_split_range(mRanges, sCuts, c, layout, k_tiles, unit_stride)
            for f in cutlass.range_constexpr(self.phases + 1, RANGE_FIELDS):
                mRanges[f, c] = Int32(0)

    @cute.jit
    def write_round_robin_range(self, mRanges, c, starts, live, grid, unit_stride):
        """CTA c's ranges row of whole tiles: after ceil((S_p - c) / grid) of its rows."""
        base = c * unit_stride
        for p in cutlass.range_constexpr(self.phases):
            mRanges[p, c] = base + (starts[p] - c + grid - 1) // grid
        mRanges[self.phases, c] = base + (live - c + grid - 1) // grid

    @cute.jit
    def write_split_range(self, mRanges, sCuts, c, layout, k_tiles, unit_stride):
        """CTA c's ranges row of a split plan: its tiles from cut c to cut c + 1, phase p
        after those of the earlier phases (the layout's last, the CTA's first walked)."""
        base = c * unit_stride
        lo, hi = sCuts[c], sCuts[c + 1]
        first, last_tile = lo // k_tiles, (hi - 1) // k_tiles
        count = Int32(0)
        if hi > lo:
            count = last_tile - first + 1
        mRanges[0, c] = base
        for p in cutlass.range_constexpr(1, self.phases):
            before = last_tile - cutlass.max(first, layout[p - 1]) + 1
            mRanges[p, c] = base + cutlass.min(cutlass.max(before, Int32(0)), count)
        mRanges[self.phases, c] = base + count

    @cute.jit
    def write_unit(self, mUnits, row, unit):
        for f in cutlass.range_constexpr(UNIT_FIELDS):
            mUnits[f, row] = unit[f]

    @cute.jit
    def write_split_tile(self, mUnits, sCuts, t, tile, k_tiles, grid, unit_stride):
        """Tile t of the split layout -> the units of the CTA whose range holds its first
        K-tile (the last c < grid with cut c <= t * k_tiles, by a binary search), and where
        that range ends inside the tile, the next CTA's FIXUP of the rest."""
        start = t * k_tiles
        lo, hi = Int32(0), grid  # cut lo <= start < cut hi
        for _ in cutlass.range_constexpr(MASKED_MAX_GRID.bit_length()):
            if hi - lo > 1:
                mid = (lo + hi) // 2
                if sCuts[mid] <= start:
                    lo = mid
                else:
                    hi = mid
        end = sCuts[lo + 1]
        row = lo * unit_stride + (end - 1) // k_tiles - t
        kt1 = cutlass.min(end - start, k_tiles)
        g, tm, tn = tile
        if kt1 == k_tiles:
            self.write_unit(mUnits, row, (g, tm, tn, Int32(0), k_tiles, Int32(UNIT_WHOLE), Int32(0), Int32(-1)))
        else:
            self.write_unit(mUnits, row, (g, tm, tn, Int32(0), kt1, Int32(UNIT_PARTIAL), lo, Int32(-1)))
            nxt = (lo + 1) * unit_stride + (sCuts[lo + 2] - 1) // k_tiles - t
            self.write_unit(mUnits, nxt, (g, tm, tn, kt1, k_tiles, Int32(UNIT_FIXUP), Int32(0), lo))


class Sm90MaskedGemm(Sm90Fp4GroupedGemm):
    """The Hopper GEMM over the masked plan's tables (Sm90Fp4GroupedGemm says how it works).

    What differs:
      - the grid (MaskedGrid.grid) covers the upper bound of tiles; a CTA whose ranges are
        empty (fewer live tiles than CTAs) leaves at once;
      - every tile's C goes out by 16-byte stores predicated on its group's M
        (DIRECT_STORES): the C descriptors hold max_m rows, so a TMA store would write the
        rows at or above masked_m[g], which the op leaves alone;
      - before the grid dependency wait, the tables the plan kernel writes (sizes, ranges,
        units) are prefetched into L2 only: the plan may still be writing them, and L2,
        unlike L1, is where its writes land;
      - it launches on the caller's stream, with the descriptor init too.
    A split-K config walks the plan's PARTIAL and FIXUP units as the leaderboard path's
    (Sm90Fp4GroupedGemm), with the buffers' workspace: a slot and its flags per cut.
    Constraints: Sm90Fp4GroupedGemm's.
    """

    DIRECT_STORES = True

    def __init__(self, config: Sm90Config):
        super().__init__(config, WatchSettings(enabled=False))

    @cute.jit
    def __call__(self, sizes_ptr: cute.Pointer, ptrs_ptr: cute.Pointer, ranges_ptr: cute.Pointer,
                 units_ptr: cute.Pointer, tmaps_ptr: cute.Pointer, partials_ptr: cute.Pointer,
                 flags_ptr: cute.Pointer, num_ctas: Int32, unit_stride: Int32, num_groups: Int32,
                 record_ptr: cute.Pointer, claim_ptr: cute.Pointer, launch_tag: Int32, timeout_ns: Int64,
                 stream: cuda_driver.CUstream):
        """Sm90Fp4GroupedGemm.__call__'s arguments (the watchdog's are null: it is compiled
        out; so are split-K's for a whole-tile config), then the stream."""
        self.launch_gemm((sizes_ptr, ptrs_ptr, ranges_ptr, units_ptr, tmaps_ptr, partials_ptr, flags_ptr,
                          num_ctas, unit_stride, num_groups, record_ptr, claim_ptr, launch_tag, timeout_ns),
                         {"stream": stream})

    @cute.jit
    def init_on(self, sizes_ptr: cute.Pointer, ptrs_ptr: cute.Pointer, tmaps_ptr: cute.Pointer,
                num_groups: Int32, stream: cuda_driver.CUstream):
        """init_tensormaps on the caller's stream."""
        atom_a, atom_b, atom_c = self._make_tma_atoms(tmaps_ptr.toint(), Int32(128), Int32(128))
        self.init_kernel(atom_a, atom_b, atom_c, sizes_ptr, ptrs_ptr, tmaps_ptr).launch(
            grid=[num_groups, 1, 1], block=[32, 1, 1], stream=stream)

    @cute.jit
    def prefetch_schedule(self, sizes_ptr, ptrs_ptr, ranges_ptr, units_ptr, tmaps_ptr, unit_stride, num_groups):
        """Sm90Fp4GroupedGemm.prefetch_schedule, with the plan kernel's tables into L2 only
        (the class docstring says why); the pointer table, written by host copies before the
        launch, still goes to L1."""
        bidx, _, _ = cute.arch.block_idx()
        lane = cute.arch.lane_idx()
        if lane == 0:
            prefetch_l2(ranges_ptr.toint() + Int64(bidx) * (RANGE_FIELDS * 4))
            prefetch_l2(units_ptr.toint() + Int64(bidx * unit_stride) * (UNIT_FIELDS * 4))
        prefetch_lines(sizes_ptr.toint(), num_groups * (4 * 4), lane, True)
        prefetch_lines(ptrs_ptr.toint(), num_groups * (5 * 8), lane, False)
        prefetch_lines(tmaps_ptr.toint(), num_groups * (SM90_NUM_DESC * SM90_DESC_BYTES), lane, True)


@dataclasses.dataclass(frozen=True)
class MaskedKernels:
    """One config's compiled masked kernels: the descriptor init, the plan and the GEMM."""

    config: Sm90Config
    init: object
    plan: object
    gemm: object


def _fake_queue():
    return cuda_driver.CUstream(0)


@functools.lru_cache(maxsize=8)
def compile_masked_sm90(config: Sm90Config) -> MaskedKernels:
    """Compiles the three kernels of a config for sm_90a (no GPU needed)."""
    op = Sm90MaskedGemm(config)
    plan = MaskedPlanKernel(MaskedPlanConfig(config.tile_n, tuple(config.widths), masked_split_costs(config)))
    i32, i64 = cutlass.Int32, cutlass.Int64
    init_fn = cute.compile(op.init_on, fake_ptr(i32), fake_ptr(i64), fake_ptr(i64, 128), Int32(1), _fake_queue())
    plan_fn = cute.compile(plan, fake_ptr(i32), fake_ptr(i32), fake_ptr(i32), fake_ptr(i32),
                           *[Int32(1)] * 7, _fake_queue())
    gemm_fn = cute.compile(op, fake_ptr(i32), fake_ptr(i64), fake_ptr(i32), fake_ptr(i32), fake_ptr(i64, 128),
                           fake_ptr(cutlass.Float32), fake_ptr(i32), Int32(1), Int32(1), Int32(1),
                           *fake_watch_args(), _fake_queue())
    return MaskedKernels(config, init_fn, plan_fn, gemm_fn)


def bind_masked(kernels: MaskedKernels, grid: MaskedGrid, tables: dict, queue: int):
    """(init, plan, gemm) launchers on stream handle `queue` for one set of buffers:
    tables holds masked_m's address and the device tensors sizes, desc_sizes, ptrs,
    ranges, units, tmaps (and a split-K config's partials and flags)."""
    q = cuda_driver.CUstream(queue)
    t = tables
    init = bind_launch(kernels.init, (gmem_arg(t["desc_sizes"], cutlass.Int32), gmem_arg(t["ptrs"], cutlass.Int64),
                                      gmem_arg(t["tmaps"], cutlass.Int64, 128), int_arg(Int32, grid.groups), q))
    plan = bind_launch(kernels.plan, (
        KernelArg(cutlass.Int32, t["masked_m"], True), gmem_arg(t["sizes"], cutlass.Int32),
        gmem_arg(t["ranges"], cutlass.Int32), gmem_arg(t["units"], cutlass.Int32),
        *(int_arg(Int32, v) for v in (grid.groups, grid.max_m, grid.n, grid.k, grid.k_tiles, grid.grid,
                                      grid.unit_stride)), q))
    gemm = bind_launch(kernels.gemm, (
        gmem_arg(t["sizes"], cutlass.Int32), gmem_arg(t["ptrs"], cutlass.Int64),
        gmem_arg(t["ranges"], cutlass.Int32), gmem_arg(t["units"], cutlass.Int32),
        gmem_arg(t["tmaps"], cutlass.Int64, 128),
        *((gmem_arg(t["partials"], cutlass.Float32), gmem_arg(t["flags"], cutlass.Int32)) if "flags" in t
          else (KernelArg(cutlass.Float32, 0, True), KernelArg(cutlass.Int32, 0, True))),
        int_arg(Int32, grid.grid), int_arg(Int32, grid.unit_stride), int_arg(Int32, grid.groups),
        KernelArg(cutlass.Int32, 0, True), KernelArg(cutlass.Int32, 0, True), int_arg(Int32, 0), int_arg(Int64, 0), q))
    return init, plan, gemm


def device_tables(grid: MaskedGrid, config: Sm90Config, device: torch.device) -> dict:
    """The device tables of one set of buffers, uninitialized (the plan writes sizes,
    ranges and units every call; the caller fills desc_sizes and ptrs once, and zeroes a
    split-K config's flags, which each FIXUP resets after use)."""
    def ints(*shape, dtype=torch.int32):
        return torch.empty(shape, dtype=dtype, device=device)
    tables = {
        "sizes": ints(max(grid.groups, 1), 4),
        "ranges": ints(grid.grid, RANGE_FIELDS),
        "units": ints(grid.grid * grid.unit_stride, UNIT_FIELDS),
        "tmaps": ints(max(grid.groups, 1) * SM90_NUM_DESC * SM90_DESC_BYTES // 8, dtype=torch.int64),
    }
    if config.split_k:
        slots = max(grid.slots, 1)
        tables["partials"] = ints(slots * sm90_partial_floats(config), dtype=torch.float32)
        tables["flags"] = ints(slots * config.consumer_wgs)
    return tables


# ------------------------------------------------------------------ host side of a call
def masked_config_grid(config: Sm90Config, groups: int, max_m: int, n: int, k: int, num_sms: int) -> MaskedGrid:
    """The launch shape of config for these buffers."""
    return masked_grid(groups, max_m, n, k, SM90_PACKED_K_TILE, config.tile_n, config.widths, num_sms,
                       masked_split_costs(config))


# The split plan (MaskedPlanKernel step 3) is on unless NVFP4_GEMM_MASKED_SPLIT=0 turns it
# off: whole tiles only, as before it ran on a GPU (docs/moe.md, What is verified).
MASKED_SPLIT_ENV = "NVFP4_GEMM_MASKED_SPLIT"


def masked_split_enabled() -> bool:
    """Whether split-K configs may serve the masked op: NVFP4_GEMM_MASKED_SPLIT unset or 1
    (the default), 0 for whole tiles only."""
    return env_switch(MASKED_SPLIT_ENV, "1")


def choose_masked_config(groups: int, max_m: int, n: int, k: int, expected_m: int | None,
                         num_sms: int, split: bool = False) -> Sm90Config:
    """The config the leaderboard path's chooser models fastest for G groups of expected_m
    rows (max_m without the hint): a hint picks the config, never a result. With `split`
    (masked_split_enabled) a split-K config competes, only where the plan would split
    those rows (masked_plan.split_cuts), so that it is never chosen for a split the plan
    then does not make."""
    m = hinted_rows(expected_m, max_m)
    sizes = [(m, n, k, 1)] * groups

    def plan_splits(cfg):
        grid = masked_config_grid(cfg, groups, max_m, n, k, num_sms)
        return split_cuts([groups * c for c in phase_counts(m, grid)], grid) is not None

    configs = [cfg for cfg in sm90_candidate_configs(sizes, num_sms)
               if not cfg.split_k or (split and plan_splits(cfg))]
    return min(configs, key=lambda cfg: sm90_makespan_us(sizes, cfg, num_sms))


def masked_kernel_refusal(p, a, sfa, b, sfb) -> str | None:
    """Why the Hopper kernel cannot take this call (None: it can): the problem's sizes and
    the operands' alignment, from metadata alone."""
    if p.k % 256:
        return f"K = {p.k} is not a multiple of 256"
    if p.groups > MASKED_PLAN_THREADS:
        return f"G = {p.groups} groups is more than the plan kernel's {MASKED_PLAN_THREADS}"
    for name, t in (("a", a), ("b", b), ("sfa", sfa), ("sfb", sfb)):
        if t.data_ptr() % 16:
            return f"'{name}' does not start on a 16-byte boundary (TMA)"
    return None


class MaskedSm90Runner(MaskedRunner):
    """The masked op on a Hopper GPU (masked_runner.MaskedRunner says what a call costs):
    the plan and the GEMM on the current stream, configs by choose_masked_config."""

    KERNEL = "the Hopper kernel"

    def __init__(self, device: torch.device, num_sms: int, maxsize: int = 64, check_first_run: bool = False):
        super().__init__(device, num_sms, maxsize, check_first_run)
        # read once, as the path switch is (moe._kernel_runner): not on every call
        self.split = masked_split_enabled()

    def choose(self, p, expected_m) -> Sm90Config:
        return choose_masked_config(p.groups, p.max_m, p.n, p.k, expected_m, self.num_sms, self.split)

    def launch_shape(self, config, p) -> MaskedGrid:
        return masked_config_grid(config, p.groups, p.max_m, p.n, p.k, self.num_sms)

    def refusal(self, p, a, sfa, b, sfb, out) -> str | None:
        return masked_kernel_refusal(p, a, sfa, b, sfb)

    def allocate(self, shape: MaskedGrid, config, p) -> dict:
        t = device_tables(shape, config, self.device)
        t["ptrs"] = torch.empty((p.groups, 5), dtype=torch.int64, device=self.device)
        t["desc_sizes"] = torch.empty((p.groups, 4), dtype=torch.int32, device=self.device)
        return t

    def desc_sizes(self, shape: MaskedGrid) -> tuple[int, int, int, int]:
        return shape.max_m, shape.n, shape.k, 1

    def compile(self, config):
        return compile_masked_sm90(config)

    def bind(self, kernels, shape, tables: dict, queue: int) -> tuple:
        return bind_masked(kernels, shape, tables, queue)
