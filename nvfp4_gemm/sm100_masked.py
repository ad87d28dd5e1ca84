"""The Blackwell kernels for the masked op: token counts on the GPU, compiled for sm_100a.

Two kernels a call, on the caller's stream:

  MaskedSm100PlanKernel  one CTA: from masked_m, the sizes rows and the flat schedule the
                         GEMM walks (masked_plan.sm100_masked_schedule's algorithm, which
                         its Python mirror tests), with the schedule's length after it;
  Sm100MaskedGemm        the leaderboard's Blackwell GEMM (sm100.Sm100BlockScaledGroupedGemm)
                         over a grid fixed by the buffers, reading the schedule's length
                         once its grid dependency wait is over, storing C only below each
                         group's M (direct stores of every tile).

plus, once per set of buffers, the descriptor init at max_m rows. MaskedSm100Runner is
their host side. With no B200 here they are compile-checked only (tests/test_masked_plan.py
and tools/sm100_compile_check.py --masked), so the op runs them only where
NVFP4_GEMM_MASKED_SM100=1 asks for it, and checks each config's first run against the exact
path (docs/moe.md). Not part of submission.py.
"""

from __future__ import annotations

import dataclasses
import functools

import torch

from .binding import KernelArg, bind_launch, fake_ptr, gmem_arg, int_arg
from .common import Int32, Int64, SmemAllocator, cute, cutlass
from .masked_plan import MASKED_PLAN_THREADS, hinted_rows, sm100_masked_bound
from .masked_runner import MaskedRunner, env_switch
from .plan_device import block_scan, group_rows
from .ptx import prefetch_l2, prefetch_lines
from .sm100 import (
    SM100_DESC_BYTES,
    SM100_NUM_DESC,
    SM100_TILE_K,
    Sm100BlockScaledGroupedGemm,
    Sm100Config,
    choose_sm100_config,
    sm100_config_is_legal,
    sm100_grid_ctas,
    sm100_problem_fits_config,
)
from .watchdog import WatchSettings, fake_watch_args

try:
    import cuda.bindings.driver as cuda_driver
except ImportError:  # the torch paths still import
    cuda_driver = None


@dataclasses.dataclass(frozen=True)
class MaskedSm100PlanConfig:
    """What the plan kernel is compiled for: the GEMM config's tile along the problem's M
    (tokens) and N (weights)."""

    tile_m: int
    tile_n: int


def masked_sm100_plan_is_legal(cfg: MaskedSm100PlanConfig) -> bool:
    return cfg.tile_m > 0 and cfg.tile_n > 0


class MaskedSm100PlanKernel:
    """Per-group token counts on the GPU -> the Blackwell GEMM's sizes rows and schedule.

    How it works (one CTA of MASKED_PLAN_THREADS threads, thread g for group g):
      1. thread g clamps masked_m[g] to 0 .. max_m, writes group g's sizes row (m, N, K,
         1) and notes its M tiles if it has a full-height one (section A of
         masked_plan's order) and whether it is one shorter tile (section B);
      2. an inclusive scan over the groups (Hillis-Steele, both values at once) gives each
         section-A group its first row and the sections' sizes;
      3. a section-B thread ranks its group among section B's by rows descending, ties in
         group order (a pass over the groups' rows in shared memory), kept in place of its
         section-B scan entry;
      4. the threads walk the upper bound of tiles (every group full), a thread per tile:
         a live tile's (group, tile along M, tile along N) goes to its row;
      5. thread 0 writes the schedule's length at row `bound`, after the last row a call
         can have.
    It lets the GEMM's grid launch at once (griddepcontrol.launch_dependents); the GEMM
    reads the schedule and its length only after its griddepcontrol.wait.

    Constraints: G <= MASKED_PLAN_THREADS; every group's N and K the same.

    Follows CUTLASS's grouped schedulers as MaskedPlanKernel does (sm90_masked.py), in the
    Blackwell schedule's own order and table (one flat list, clusters striding over it).
    """

    def __init__(self, config: MaskedSm100PlanConfig):
        assert masked_sm100_plan_is_legal(config), config
        self.cfg = config

    @cute.jit
    def __call__(self, masked_ptr: cute.Pointer, sizes_ptr: cute.Pointer, schedule_ptr: cute.Pointer,
                 groups: Int32, max_m: Int32, n: Int32, k: Int32, bound: Int32, stream: cuda_driver.CUstream):
        self.kernel(masked_ptr, sizes_ptr, schedule_ptr, groups, max_m, n, k, bound).launch(
            grid=[1, 1, 1], block=[MASKED_PLAN_THREADS, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, masked_ptr, sizes_ptr, schedule_ptr, groups, max_m, n, k, bound):
        tidx, _, _ = cute.arch.thread_idx()
        cute.arch.griddepcontrol_launch_dependents()
        threads = MASKED_PLAN_THREADS
        tile_m, tile_n = self.cfg.tile_m, self.cfg.tile_n
        fields = {
            "rows": cute.struct.MemRange[cutlass.Int32, threads],
            "scan": cute.struct.MemRange[cutlass.Int32, 2 * threads],
        }
        storage = SmemAllocator().allocate(cute.struct(type("PlanStorage", (), {"__annotations__": fields})))
        sRows = storage.rows.get_tensor(cute.make_layout(threads))
        sScan = storage.scan.get_tensor(cute.make_layout((threads, 2), stride=(1, threads)))
        mMasked = cute.make_tensor(masked_ptr, cute.make_layout(1 << 20))
        mSizes = cute.make_tensor(sizes_ptr, cute.make_layout((4, 1 << 20), stride=(1, 4)))
        mSched = cute.make_tensor(schedule_ptr, cute.make_layout((3, 1 << 24), stride=(1, 3)))
        n_tiles = (n + tile_n - 1) // tile_n

        # 1. this thread's group: rows, sizes row, its section
        m = group_rows(mMasked, mSizes, tidx, groups, max_m, n, k)
        sRows[tidx] = m
        a_tiles = Int32(0)
        if m >= tile_m:
            a_tiles = (m + tile_m - 1) // tile_m
        short = Int32(0)
        if m > 0:
            if m < tile_m:
                short = Int32(1)
        sScan[tidx, 0] = a_tiles
        sScan[tidx, 1] = short
        cute.arch.barrier()

        # 2. inclusive scan over the groups, both values at once
        block_scan(sScan, tidx, 2, threads)
        a_rows = sScan[threads - 1, 0] * n_tiles
        live = a_rows + sScan[threads - 1, 1] * n_tiles

        # 3. this section-B group's rank, kept where step 4's threads read it
        rank = Int32(0)
        if short != 0:
            for h in cutlass.range(groups, unroll=1):
                x = sRows[h]
                if x > 0:
                    if x < tile_m:
                        if (x > m) | ((x == m) & (h < tidx)):
                            rank = rank + 1
        cute.arch.barrier()  # every rank read its rows before any rank is written over the scan
        if short != 0:
            sScan[tidx, 1] = rank
        cute.arch.barrier()

        # 4. the live tiles of the upper bound -> their rows
        m_bound = (max_m + tile_m - 1) // tile_m
        per_group = m_bound * n_tiles
        for idx in cutlass.range(tidx, groups * per_group, threads, unroll=1):
            g = idx // per_group
            r = idx - g * per_group
            tn = r // m_bound
            tm = r - tn * m_bound
            rows = sRows[g]
            g_tiles = (rows + tile_m - 1) // tile_m
            if tm < g_tiles:
                # section B: after section A, by the group's rank; section A: after the
                # earlier section-A groups' M tiles (the inclusive scan less its own)
                i = a_rows + sScan[g, 1] * n_tiles + tn
                if rows >= tile_m:
                    i = (sScan[g, 0] - g_tiles) * n_tiles + tn * g_tiles + tm
                mSched[0, i] = g
                mSched[1, i] = tm
                mSched[2, i] = tn

        # 5. the schedule's length, after the longest a call can have
        if tidx == 0:
            mSched[0, bound] = live
            mSched[1, bound] = Int32(0)
            mSched[2, bound] = Int32(0)


class Sm100MaskedGemm(Sm100BlockScaledGroupedGemm):
    """The Blackwell GEMM over the masked plan's schedule (Sm100BlockScaledGroupedGemm says
    how it works).

    What differs:
      - the grid covers the upper bound of tiles; the schedule's length, which the plan
        writes at row num_tiles (the bound), is read after the grid dependency wait
        (live_tiles), and a cluster past it runs no tile;
      - every tile's C goes out by the direct stores predicated on its group's M and N
        (DIRECT_STORES; the config must have direct_last_store): the C descriptors hold
        max_m rows, so a TMA store would write rows at or above masked_m[g];
      - before the wait, the schedule row and the sizes, which the plan writes, are
        prefetched into L2 only;
      - it launches on the caller's stream, with the descriptor init too.
    Constraints: Sm100BlockScaledGroupedGemm's, direct_last_store, no watchdog.
    """

    DIRECT_STORES = True

    def __init__(self, config: Sm100Config):
        assert config.direct_last_store, config
        super().__init__(config, WatchSettings(enabled=False))

    @cute.jit
    def __call__(self, sizes_ptr: cute.Pointer, ptrs_ptr: cute.Pointer, schedule_ptr: cute.Pointer,
                 tensormaps_ptr: cute.Pointer, num_tiles: Int32, num_ctas: Int32, num_groups: Int32,
                 record_ptr: cute.Pointer, claim_ptr: cute.Pointer, launch_tag: Int32, timeout_ns: Int64,
                 stream: cuda_driver.CUstream):
        """Sm100BlockScaledGroupedGemm.__call__'s arguments (num_tiles: the bound; the
        watchdog's are null, it is compiled out), then the stream."""
        self.launch_gemm((sizes_ptr, ptrs_ptr, schedule_ptr, tensormaps_ptr, num_tiles, num_ctas, num_groups,
                          record_ptr, claim_ptr, launch_tag, timeout_ns), {"stream": stream})

    @cute.jit
    def init_on(self, sizes_ptr: cute.Pointer, ptrs_ptr: cute.Pointer, tensormaps_ptr: cute.Pointer,
                num_groups: Int32, stream: cuda_driver.CUstream):
        """init_descriptors on the caller's stream."""
        self.launch_init((sizes_ptr, ptrs_ptr, tensormaps_ptr, num_groups), {"stream": stream})

    @cute.jit
    def live_tiles(self, mSched, num_tiles):
        """The plan's schedule length, at row num_tiles (never more than the bound)."""
        count = cute.make_tensor(mSched.iterator + num_tiles * 3, cute.make_layout(1))
        return cutlass.min(count[0], num_tiles)

    @cute.jit
    def prefetch_start(self, mSizes, mSched, mDesc, cluster_idx, num_tiles):
        """Sm100BlockScaledGroupedGemm.prefetch_start with the plan's tables (the schedule
        row, the sizes) into L2 only: the plan may still be writing them."""
        lane = cute.arch.lane_idx()
        num_groups = cute.size(mSizes, mode=[0])
        if lane == 0:
            if cluster_idx < num_tiles:
                row = mSched.iterator.toint() + Int64(cluster_idx) * (3 * 4)
                prefetch_l2(row)
        prefetch_lines(mSizes.iterator.toint(), num_groups * (4 * 4), lane, True)
        prefetch_lines(mDesc.iterator.toint(), num_groups * (SM100_NUM_DESC * SM100_DESC_BYTES), lane, True)


@dataclasses.dataclass(frozen=True)
class MaskedSm100Kernels:
    """One config's compiled masked kernels: the descriptor init, the plan and the GEMM."""

    config: Sm100Config
    init: object
    plan: object
    gemm: object


@functools.lru_cache(maxsize=8)
def compile_masked_sm100(config: Sm100Config) -> MaskedSm100Kernels:
    """Compiles the three kernels of a config (direct_last_store) for sm_100a; without a GPU,
    CUTE_DSL_ARCH=sm_100a selects the target."""
    op = Sm100MaskedGemm(config)
    plan = MaskedSm100PlanKernel(MaskedSm100PlanConfig(config.tile_m, config.tile_n))
    i32, i64 = cutlass.Int32, cutlass.Int64
    queue = cuda_driver.CUstream(0)
    init_fn = cute.compile(op.init_on, fake_ptr(i32), fake_ptr(i64), fake_ptr(i64, SM100_DESC_BYTES), Int32(1),
                           queue)
    plan_fn = cute.compile(plan, fake_ptr(i32), fake_ptr(i32), fake_ptr(i32), *[Int32(1)] * 5, queue)
    gemm_fn = cute.compile(op, fake_ptr(i32), fake_ptr(i64), fake_ptr(i32), fake_ptr(i64, SM100_DESC_BYTES),
                           Int32(1), Int32(config.cta_group), Int32(1), *fake_watch_args(), queue)
    return MaskedSm100Kernels(config, init_fn, plan_fn, gemm_fn)


# ------------------------------------------------------------------ host side of a call
# The Blackwell masked kernels are opt-in until they have run on a B200: they are
# compile-checked only, and the masked GEMM has no watchdog, so a hang would not fall back.
MASKED_SM100_ENV = "NVFP4_GEMM_MASKED_SM100"


def masked_sm100_enabled() -> bool:
    """Whether the Blackwell kernels may serve the masked op: NVFP4_GEMM_MASKED_SM100=1
    (default off: the torch path)."""
    return env_switch(MASKED_SM100_ENV, "0")


def choose_masked_sm100_config(groups: int, max_m: int, n: int, k: int, expected_m: int | None,
                               num_sms: int) -> Sm100Config | str:
    """The leaderboard path's Blackwell config for G groups of expected_m rows (max_m
    without the hint), with every tile's C by the direct stores (direct_last_store, which
    Sm100MaskedGemm needs); where that config cannot take max_m rows a group (the decode
    config takes one token tile a group), the config for max_m rows. A str: why none can."""
    m = hinted_rows(expected_m, max_m)
    cfg = choose_sm100_config([(m, n, k, 1)] * groups, num_sms)
    if not sm100_problem_fits_config(cfg, [(max_m, n, k, 1)])[0]:
        cfg = choose_sm100_config([(max_m, n, k, 1)] * groups, num_sms)
    cfg = dataclasses.replace(cfg, direct_last_store=True)
    ok, reason = sm100_config_is_legal(cfg)
    if not ok:
        return f"config {cfg.name}: {reason}"
    ok, reason = sm100_problem_fits_config(cfg, [(max_m, n, k, 1)])
    return cfg if ok else reason


def masked_sm100_refusal(p, a, sfa, b, sfb, out) -> str | None:
    """Why the Blackwell kernels cannot take this call (None: they can), from metadata."""
    if p.k % SM100_TILE_K:
        return f"K = {p.k} is not a multiple of {SM100_TILE_K}"
    if p.n % 8:
        return f"N = {p.n} is not a multiple of 8 (16-byte rows of out)"
    if p.groups > MASKED_PLAN_THREADS:
        return f"G = {p.groups} groups is more than the plan kernel's {MASKED_PLAN_THREADS}"
    for name, t in (("a", a), ("b", b), ("sfa", sfa), ("sfb", sfb), ("out", out)):
        if t.data_ptr() % 16:
            return f"'{name}' does not start on a 16-byte boundary (TMA, 16-byte stores)"
    return None


@dataclasses.dataclass(frozen=True)
class MaskedSm100Shape:
    """The launch shape of one config for one set of buffers: `bound` schedule rows (every
    group full) and `ctas` CTAs (sm100_grid_ctas of the bound)."""

    groups: int
    max_m: int
    n: int
    k: int
    bound: int
    ctas: int


def masked_sm100_shape(config: Sm100Config, groups: int, max_m: int, n: int, k: int, num_sms: int,
                       device_index: int | None) -> MaskedSm100Shape:
    bound = sm100_masked_bound(groups, max_m, n, config.tile_m, config.tile_n)
    return MaskedSm100Shape(groups, max_m, n, k, bound, sm100_grid_ctas(config, bound, num_sms, device_index))


def masked_sm100_tables(shape: MaskedSm100Shape, device: torch.device) -> dict:
    """The device tables of one set of buffers, uninitialized: the plan writes sizes and
    the schedule (its length at row `bound`) every call; the caller fills desc_sizes and
    ptrs once."""
    def ints(*dims, dtype=torch.int32):
        return torch.empty(dims, dtype=dtype, device=device)
    groups = max(shape.groups, 1)
    return {
        "sizes": ints(groups, 4),
        "schedule": ints(shape.bound + 1, 3),
        "tmaps": ints(groups * SM100_NUM_DESC * SM100_DESC_BYTES // 8, dtype=torch.int64),
        "ptrs": ints(groups, 5, dtype=torch.int64),
        "desc_sizes": ints(groups, 4),
    }


def masked_sm100_args(shape: MaskedSm100Shape, tables: dict, queue: int) -> tuple[tuple, tuple, tuple]:
    """The (init, plan, gemm) launch arguments of one set of buffers on stream handle
    `queue` (masked_sm100_tables, with masked_m's address under "masked_m"), in the order
    compile_masked_sm100 compiles them; the GEMM's watchdog arguments are null (it is
    compiled out)."""
    q = cuda_driver.CUstream(queue)
    t = tables
    i32, i64 = cutlass.Int32, cutlass.Int64
    init = (gmem_arg(t["desc_sizes"], i32), gmem_arg(t["ptrs"], i64), gmem_arg(t["tmaps"], i64, SM100_DESC_BYTES),
            int_arg(Int32, shape.groups), q)
    plan = (KernelArg(i32, t["masked_m"], True), gmem_arg(t["sizes"], i32), gmem_arg(t["schedule"], i32),
            *(int_arg(Int32, v) for v in (shape.groups, shape.max_m, shape.n, shape.k, shape.bound)), q)
    gemm = (gmem_arg(t["sizes"], i32), gmem_arg(t["ptrs"], i64), gmem_arg(t["schedule"], i32),
            gmem_arg(t["tmaps"], i64, SM100_DESC_BYTES),
            int_arg(Int32, shape.bound), int_arg(Int32, shape.ctas), int_arg(Int32, shape.groups),
            KernelArg(i32, 0, True), KernelArg(i32, 0, True), int_arg(Int32, 0), int_arg(Int64, 0), q)
    return init, plan, gemm


def bind_masked_sm100(kernels: MaskedSm100Kernels, shape: MaskedSm100Shape, tables: dict, queue: int):
    """(init, plan, gemm) launchers of masked_sm100_args."""
    return tuple(bind_launch(fn, args) for fn, args in
                 zip((kernels.init, kernels.plan, kernels.gemm), masked_sm100_args(shape, tables, queue)))


class MaskedSm100Runner(MaskedRunner):
    """The masked op on a Blackwell GPU (masked_runner.MaskedRunner says what a call
    costs): the plan and the GEMM on the current stream, configs by
    choose_masked_sm100_config."""

    KERNEL = "the Blackwell kernel"

    def choose(self, p, expected_m) -> Sm100Config | str:
        return choose_masked_sm100_config(p.groups, p.max_m, p.n, p.k, expected_m, self.num_sms)

    def launch_shape(self, config, p) -> MaskedSm100Shape:
        return masked_sm100_shape(config, p.groups, p.max_m, p.n, p.k, self.num_sms, self.device.index)

    def refusal(self, p, a, sfa, b, sfb, out) -> str | None:
        return masked_sm100_refusal(p, a, sfa, b, sfb, out)

    def allocate(self, shape: MaskedSm100Shape, config, p) -> dict:
        return masked_sm100_tables(shape, self.device)

    def desc_sizes(self, shape: MaskedSm100Shape) -> tuple[int, int, int, int]:
        return shape.max_m, shape.n, shape.k, 1

    def compile(self, config):
        return compile_masked_sm100(config)

    def bind(self, kernels, shape, tables: dict, queue: int) -> tuple:
        return bind_masked_sm100(kernels, shape, tables, queue)
