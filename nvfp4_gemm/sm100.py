"""Blackwell (sm_100a): Sm100BlockScaledGroupedGemm, a tcgen05 kind::mxf4nvf4 block-scaled
grouped GEMM, with its config, legality checks, config choice, grid and compilation."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

from .binding import bind_launch, fake_ptr, gmem_arg, int_arg
from .common import (
    Int32,
    Int64,
    LayoutEnum,
    SmemAllocator,
    TensorMapManager,
    TensorMapUpdateMode,
    blockscaled_utils,
    cpasync,
    cute,
    cutlass,
    pipeline,
    sm100_utils,
    tcgen05,
    utils,
    warn_once,
)
from .kernel_runner import CompiledKernels, KernelBackend
from .ptx import ld_shared_v4, prefetch_l1, prefetch_lines, st_global_v4_b32
from .schedule import build_tile_schedule, columns_together, size_class
from .watchdog import (
    BLOCK_BYTES,
    LaunchWatch,
    WaitGuard,
    WatchSettings,
    barrier_any,
    fake_watch_args,
    injected_fault,
)

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


# Config and legality
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
    # a CTA's last tile leaves shared memory with 16-byte st.global instead of the TMA
    # store (store_epi_subtile_vectors): a trial, timed by tools/sm100_sweep.py only
    direct_last_store: bool = False

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
            f"{'_direct' if self.direct_last_store else ''}"
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


# The decode regime's MMA N: a token tile of 32 rows on the MMA's N side (swap-AB, one
# CTA). kind::mxf4nvf4 takes N = 8 .. 256 in steps of 8 with cta_group::1 (the DSL's
# BlockScaledMmaOp checks exactly that); 32 is the least the epilogue's 128 x 32 subtile
# (SM100_EPI_TILE_ELEMS) allows. SFB (the token scales) stays in whole 128-row atoms in
# shared memory and TMEM, as CUTLASS keeps it for N < 128 (make_smem_layout_sfb rounds N
# up to 128); the kernel reads atom tile_mma_n of it, so a 32-row token tile is right only
# as a group's first: sm100_problem_fits_config takes groups of at most 32 tokens.
SM100_TINY_MMA_N = 32


def sm100_is_tiny(cfg: Sm100Config) -> bool:
    """A config whose token tiles are narrower than a 128-row scale atom."""
    return cfg.mma_n < 128


def is_valid_sm100_tile(cfg: Sm100Config) -> tuple[bool, str]:
    if cfg.cta_group not in (1, 2):
        return False, f"cta_group must be 1 or 2, got {cfg.cta_group}"
    if cfg.mma_m != 128 * cfg.cta_group:
        return False, f"MMA M (= {cfg.mma_m}) must be 128 per CTA (cta_group {cfg.cta_group})"
    if cfg.mma_n == SM100_TINY_MMA_N and not (cfg.swap_ab and cfg.cta_group == 1):
        return False, f"MMA N = {SM100_TINY_MMA_N} (token tiles) needs swap-AB and one CTA"
    if cfg.mma_n not in (128, 256, SM100_TINY_MMA_N):
        return False, f"MMA N (= {cfg.mma_n}) must be 128 or 256 (or {SM100_TINY_MMA_N} with swap-AB)"
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
    tile_m: int, tile_n: int, swap_ab: bool, cta_group: int, acc_stages: int = 2,
    direct_last_store: bool = False,
) -> Sm100Config:
    """Config with as many A/B/SF stages as shared memory holds."""
    probe = Sm100Config(tile_m, tile_n, swap_ab, cta_group, 2, acc_stages)
    return Sm100Config(
        tile_m, tile_n, swap_ab, cta_group, sm100_ab_stages_for_smem(probe), acc_stages,
        direct_last_store=direct_last_store,
    )


# Host-side problem math
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


def sm100_problem_fits_config(cfg: Sm100Config, problem_sizes: Sequence[Sequence[int]]) -> tuple[bool, str]:
    """A tiny config (sm100_is_tiny) takes groups of at most tile_m tokens: one token tile
    per group, whose scales are the first rows of the group's first 128-row atom."""
    if sm100_is_tiny(cfg):
        for g, (m, *_rest) in enumerate(problem_sizes):
            if m > cfg.tile_m:
                return False, (f"group {g}: M = {m} > {cfg.tile_m}: the {cfg.name} config takes "
                               f"one token tile per group")
    return True, ""


def sm100_size_class(problem_sizes: Sequence[Sequence[int]]) -> tuple:
    """The class of a Blackwell problem's sizes (KernelBackend.size_class). A decode step,
    every group at most SM100_TINY_MMA_N tokens, is its sizes with every M rounded up to
    that: choose_sm100_config gives all of them the tiny config, whose one token tile per
    group makes the same tiles at any M of the class, so a mixture-of-experts step whose
    token counts change reuses the last step's plan and schedule (the schedule then orders
    the groups by K alone, as every tile's used rows read as the tile's). Any larger problem
    is its own class: its schedule's order (sm100_tile_order) follows the rows its groups'
    tiles use, as build_tile_schedule's does."""
    sizes = tuple(tuple(s) for s in problem_sizes)
    if sizes and max(m for m, *_ in sizes) <= SM100_TINY_MMA_N:
        return size_class(sizes, SM100_TINY_MMA_N)
    return sizes


def sm100_tile_order(problem_sizes: Sequence[Sequence[int]], tile_m: int, tile_n: int) -> list:
    """The Blackwell schedule's rows: build_tile_schedule's, each weight column's M tiles
    together (columns_together: a tile's MMA runs its whole token width, so a shorter last
    M tile costs a full one, and beside its column it reads the column's weights from L2)."""
    return columns_together(build_tile_schedule(problem_sizes, tile_m, tile_n))


# The last tile's direct stores (Sm100Config.direct_last_store, store_epi_subtile_vectors)
SM100_EPI_THREADS = 128  # the four epilogue warps
SM100_STORE_VECTOR = 8  # fp16 elements of one 16-byte store


def sm100_epi_chunk(tidx, p: int, chunks_per_line: int):
    """(chunk, line) of the p-th 16-byte chunk a thread stores of an epilogue subtile: lines
    run along the subtile's strided mode, chunks of 8 elements along its contiguous one.
    Consecutive threads take consecutive chunks of a line, so a warp's stores are whole C
    row segments (two of 256 bytes with swap-AB, eight of 64 bytes without); the 128
    threads cover the 128 x 32 subtile in 4 passes. Works on ints and DSL integers."""
    return tidx % chunks_per_line, p * (SM100_EPI_THREADS // chunks_per_line) + tidx // chunks_per_line


def swizzle_offset(x, bits: int, base: int, shift: int):
    """CuTe's Swizzle<bits, base, shift> of an offset: bits [base + shift, base + shift +
    bits) XORed into [base, base + bits). The DSL states shared-memory swizzles in bytes
    (S<3,4,3> is the 128-byte swizzle at any element width) and applies them to the byte
    address; works on ints and DSL integers."""
    return x ^ ((x >> shift) & (((1 << bits) - 1) << base))


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
    "swap_1cta_m32n128": make_sm100_config(SM100_TINY_MMA_N, 128, swap_ab=True, cta_group=1),
    "swap_2cta_m128n256_direct": make_sm100_config(128, 256, swap_ab=True, cta_group=2, direct_last_store=True),
}

# Named configs no call takes: neither the table, the chooser nor SM100_ALTERNATIVES names
# them. tools/sm100_sweep.py times them beside today's config after every other case, so
# that a fault of their new code (a sticky one ends the process) costs only that pass.
# direct_last_store: the model's 0.9 us a call (tools/call_model.py --changes) from the
# last tile's stores, as the Hopper kernel measured (docs/design.md, sections 5 and 6).
SM100_TRIAL_CONFIGS = ("swap_2cta_m128n256_direct",)


# What a problem runs when its chosen config is retired (a failed self-check, a refused
# launch, a hang), in order, before torch._scaled_mm: on a never-run kernel a fault may
# belong to one variant only (the 2-CTA pair's handshakes, the swapped epilogue), so the
# others are tried first, each self-checked on its first launch. Which of them a problem
# takes is can_implement's to say.
SM100_ALTERNATIVES = ("swap_2cta_m128n256", "swap_1cta_m128n128", "plain_1cta_m128n128", "plain_2cta_m256n128",
                      "swap_1cta_m32n128")


def sm100_alternatives(cfg: Sm100Config) -> list:
    """SM100_ALTERNATIVES' configs other than cfg, in order (KernelBackend.alternatives)."""
    return [SM100_NAMED_CONFIGS[name] for name in SM100_ALTERNATIVES if SM100_NAMED_CONFIGS[name] != cfg]


def sm100_config_name(cfg: Sm100Config) -> str:
    """The SM100_NAMED_CONFIGS name of a config ('swap_2cta_m128n256'), else its own."""
    for name, named in SM100_NAMED_CONFIGS.items():
        if named == cfg:
            return name
    return cfg.name


def choose_sm100_config(problem_sizes: Sequence[Sequence[int]], num_sms: int = 148) -> Sm100Config:
    cfg = SM100_CONFIG_TABLE.get(sm100_problem_signature(problem_sizes))
    if cfg is None:
        max_m = max(ps[0] for ps in problem_sizes)
        min_n = min(ps[1] for ps in problem_sizes)
        if max_m <= SM100_TINY_MMA_N:
            # decode: 1-32 tokens a group, one 32-column MMA N tile each instead of 128 or
            # 256 (the MMA and the epilogue's TMEM drain shrink 4-8x; the weights' bytes,
            # the bound here, are the same)
            cfg = SM100_NAMED_CONFIGS["swap_1cta_m32n128"]
        elif min_n >= 1024:
            # the weight side N is large: it takes the 256-row 2-CTA MMA at any token count
            # (the benchmark shapes' config); for prefill (M 512-2048) the call model
            # predicts 38.6 against 54.3 us with plain_1cta_m128n128, whose 128 x 128
            # tiles read a third more bytes per output (python tools/sm100_sweep.py --plan,
            # regimes 9 and 10)
            cfg = SM100_NAMED_CONFIGS["swap_2cta_m128n256"]
        elif max_m <= 128:
            cfg = SM100_NAMED_CONFIGS["swap_1cta_m128n128"]
        else:
            cfg = SM100_NAMED_CONFIGS["plain_1cta_m128n128"]
    ok, reason = sm100_config_is_legal(cfg)
    assert ok, reason
    return cfg


def sm100_epi_layouts(cta_tile_shape_mnk, use_2cta: bool, c_layout, c_stages: int):
    """The epilogue's subtile of the accumulator, (EPI_TILE_M, EPI_TILE_N), and the fp16
    smem layout of its C_STAGE buffers, (EPI_TILE_M, EPI_TILE_N, C_STAGE): CUTLASS's, as
    the GEMM and the direct stores' GPU test build them (call within a jit)."""
    epi_tile = sm100_utils.compute_epilogue_tile_shape(cta_tile_shape_mnk, use_2cta, c_layout, cutlass.Float16)
    return epi_tile, sm100_utils.make_smem_layout_epi(cutlass.Float16, c_layout, epi_tile, c_stages)


@cute.jit
def store_epi_subtile_vectors(
    tidx: Int32,
    sC_base: Int32,
    c_smem: cute.ComposedLayout,
    c_buffer: Int32,
    contiguous: cutlass.Constexpr[int],
    c_addr: Int64,
    origin: tuple,
    extents: tuple,
    strides: tuple,
):
    """One epilogue subtile staged in sC -> C with 16-byte stores by the 128 epilogue
    threads, for a CTA's last tile (Sm100Config.direct_last_store). A TMA store keeps the
    CTA, and its SM, which the next call's CTA waits for, until the TMA unit has read the
    buffer: about 1 us after the store is issued on the Hopper kernel (docs/design.md,
    section 6, 2444083); plain stores leave nothing reading shared memory once issued.

    sC_base: the byte address of sC, 1024-byte aligned (so the swizzle of an offset is that
    of the address); c_smem: sC's (EPI_TILE_M, EPI_TILE_N, C_STAGE) layout; contiguous: the
    subtile mode that is contiguous in C and in sC (0 with swap-AB); origin: gC's
    coordinates of the subtile's element (0, 0); extents, strides: gC's (elements), in gC's
    mode order. A 16-byte chunk lies wholly inside C or wholly past its contiguous extent
    (a multiple of 8, is_valid_sm100_problem); chunks past either extent are not stored, as
    the TMA store clips them."""
    outer = c_smem.outer
    swz = c_smem.inner
    elem_bytes = 2  # fp16 C
    size_c = cute.size(outer, mode=[contiguous])
    size_s = cute.size(outer, mode=[1 - contiguous])
    chunks_per_line = size_c // SM100_STORE_VECTOR
    for p in cutlass.range_constexpr(size_c * size_s // (SM100_STORE_VECTOR * SM100_EPI_THREADS)):
        chunk, line = sm100_epi_chunk(tidx, p, chunks_per_line)
        # (EPI_TILE_M, EPI_TILE_N) coordinates of the chunk's first element
        crd = (chunk * SM100_STORE_VECTOR, line) if contiguous == 0 else (line, chunk * SM100_STORE_VECTOR)
        off = cute.crd2idx((crd[0], crd[1], c_buffer), outer) * elem_bytes
        v = ld_shared_v4(sC_base + swizzle_offset(off, swz.num_bits, swz.num_base, swz.num_shift))
        g0 = origin[0] + crd[0]
        g1 = origin[1] + crd[1]
        addr = c_addr + (Int64(g0) * strides[0] + Int64(g1) * strides[1]) * elem_bytes
        st_global_v4_b32(addr, *v, Int32(g0 < extents[0] and g1 < extents[1]))


# Kernel
class Sm100BlockScaledGroupedGemm:
    """Persistent, warp-specialized NVFP4 grouped GEMM (tcgen05 kind::mxf4nvf4.block_scale).

    How it works:
      1. init_descriptors (one CTA per group) writes each group's five TMA descriptors (A, B,
         SFA, SFB, C) into a global table, once per set of pointers (the runner's cache).
      2. The GEMM launches min(tiles, resident clusters) clusters of cta_group CTAs
         (sm100_grid_ctas); each walks the host's static schedule rows t, t + clusters, ...
         (group, tile along M, tile along N), with programmatic dependent launch.
      3. The TMA warp loads a tile's A / B K-slices and their scale slices into an ab_stages
         smem ring, through the group's descriptors.
      4. The MMA warp copies the scales to TMEM and issues tcgen05.mma kind::mxf4nvf4
         (2-CTA with cta_group 2) into one of acc_stages TMEM accumulators.
      5. The four epilogue warps drain an accumulator (TMEM -> registers -> fp16 -> smem)
         while the next tile's MMAs run, and TMA-store it to C, which clips partial tiles;
         with direct_last_store a CTA's last tile leaves smem through predicated 16-byte
         stores instead (store_epi_subtile_vectors), so nothing holds the SM after it.
      With swap_ab the weights (N) take the MMA's M and the tokens its N.

    Constraints: K a multiple of 256 (SM100_TILE_K), N a multiple of 8 (16-byte C rows),
    L == 1, M and N >= 1 per group; every tensor in the dense layout the descriptors
    address, A / B / scales / C 16-byte aligned (is_valid_sm100_problem, the runner's
    plan). The config must pass sm100_config_is_legal (TMEM columns, shared memory); the
    decode config (MMA N = 32) takes groups of at most 32 tokens (sm100_problem_fits_config).

    Follows CUTLASS's CuTe DSL example grouped_blockscaled_gemm.py
    (https://github.com/NVIDIA/cutlass/blob/main/examples/python/CuTeDSL/blackwell/grouped_blockscaled_gemm.py):
    its warp roles, pipelines and per-group descriptor updates, with descriptors built by
    a separate kernel and a host-side static schedule instead of its tile scheduler.

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

    # with direct_last_store: every tile's C by the direct stores, predicated on the group's
    # M and N, never by the TMA (the masked op's subclass, sm100_masked.py, whose C
    # descriptors hold max_m rows)
    DIRECT_STORES = False

    def __init__(self, config: Sm100Config, watch: WatchSettings = WatchSettings()):
        ok, reason = sm100_config_is_legal(config)
        if not ok:
            raise ValueError(f"illegal Sm100Config {config}: {reason}")
        self.cfg = config
        self.watch = watch
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
        # the 2-CTA teardown barrier's arrivals: without the watchdog the peer's epilogue
        # warp 0 (32 threads); with it every warp of both CTAs once (pair_arrive)
        self.pair_exit_count = 2 * (self.threads_per_cta // 32) if watch.enabled else 32
        self.num_tmem_alloc_cols = SM100_TMEM_COLUMNS

    # ----------------------------------------------------------------- legality
    @staticmethod
    def can_implement(
        config: Sm100Config, problem_sizes: Sequence[Sequence[int]]
    ) -> tuple[bool, str]:
        ok, reason = sm100_config_is_legal(config)
        if not ok:
            return False, reason
        ok, reason = is_valid_sm100_problem(problem_sizes)
        if not ok:
            return False, reason
        return sm100_problem_fits_config(config, problem_sizes)

    # ----------------------------------------------------------------- static layouts
    def _make_tiled_mmas(self):
        tiled_mma = sm100_utils.make_blockscaled_trivial_tiled_mma(
            self.ab_dtype,
            self.ab_dtype,
            cute.nvgpu.OperandMajorMode.K,
            cute.nvgpu.OperandMajorMode.K,
            self.sf_dtype,
            SM100_SF_VEC_SIZE,
            self.cta_group,
            self.mma_tiler_mn,
        )
        # SFB is copied per CTA with a 1-CTA shaped MMA view
        tiled_mma_sfb = sm100_utils.make_blockscaled_trivial_tiled_mma(
            self.ab_dtype,
            self.ab_dtype,
            cute.nvgpu.OperandMajorMode.K,
            cute.nvgpu.OperandMajorMode.K,
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
        self.epi_tile, self.c_smem_layout_staged = sm100_epi_layouts(
            self.cta_tile_shape_mnk, self.use_2cta, self.c_layout, self.num_c_stage
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
        self.launch_init((sizes_ptr, ptrs_ptr, tensormaps_ptr, num_groups), {})

    def launch_init(self, args: tuple, launch_options: dict):
        """The body of init_descriptors (traced inside a jit function), plus launch_options
        for .launch (a subclass's own launch settings; none here)."""
        sizes_ptr, ptrs_ptr, tensormaps_ptr, num_groups = args
        _, _, mSizes, mDesc, atoms, _ = self._launch_setup(sizes_ptr, tensormaps_ptr, num_groups)
        # (G, 5) a, b, sfa, sfb, c
        mPtrs = cute.make_tensor(ptrs_ptr, cute.make_layout((num_groups, 5), stride=(5, 1)))
        # tensormap.replace works on a 128-byte aligned smem copy of the descriptor; the
        # fields as objects (this module's annotations are strings, which cute.struct
        # resolves only inside a jit function's own body)
        fields = {"desc": cute.struct.Align[
            cute.struct.MemRange[cutlass.Int64, SM100_NUM_DESC * SM100_DESC_BYTES // 8], SM100_DESC_BYTES]}
        self.init_storage = cute.struct(type("InitStorage", (), {"__annotations__": fields}))
        self.init_kernel(atoms, mSizes, mPtrs, mDesc).launch(
            grid=(num_groups, 1, 1), block=[32, 1, 1], **launch_options
        )

    @cute.kernel
    def init_kernel(
        self, atoms: tuple, mSizes: cute.Tensor, mPtrs: cute.Tensor, mDesc: cute.Tensor
    ):
        group, _, _ = cute.arch.block_idx()
        smem = SmemAllocator()
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
        ptrs_ptr: cute.Pointer,
        schedule_ptr: cute.Pointer,
        tensormaps_ptr: cute.Pointer,
        num_tiles: cutlass.Int32,
        num_ctas: cutlass.Int32,
        num_groups: cutlass.Int32,
        record_ptr: cute.Pointer,
        claim_ptr: cute.Pointer,
        launch_tag: cutlass.Int32,
        timeout_ns: cutlass.Int64,
    ):
        """Launch the persistent GEMM on `num_ctas` CTAs (a multiple of cta_group); the last
        four arguments are the watchdog's (LaunchWatch)."""
        self.launch_gemm((sizes_ptr, ptrs_ptr, schedule_ptr, tensormaps_ptr, num_tiles, num_ctas, num_groups,
                          record_ptr, claim_ptr, launch_tag, timeout_ns), {})

    def launch_gemm(self, args: tuple, launch_options: dict):
        """The body of __call__ (traced inside a jit function): the shared storage and the
        kernel's launch with __call__'s arguments, plus launch_options for .launch (a
        subclass's own launch settings; none here)."""
        (sizes_ptr, ptrs_ptr, schedule_ptr, tensormaps_ptr, num_tiles, num_ctas, num_groups, record_ptr,
         claim_ptr, launch_tag, timeout_ns) = args
        tiled_mma, tiled_mma_sfb, mSizes, mDesc, atoms, tma_tensors = self._launch_setup(
            sizes_ptr, tensormaps_ptr, num_groups
        )
        # (T, 3) group, tile_m_idx, tile_n_idx
        mSched = cute.make_tensor(schedule_ptr, cute.make_layout((num_tiles, 3), stride=(3, 1)))
        # (G, 5) a, b, sfa, sfb, c: the direct stores' C addresses (the TMA's are in mDesc)
        mPtrs = cute.make_tensor(ptrs_ptr, cute.make_layout((num_groups, 5), stride=(5, 1)))
        self.num_tma_load_bytes = sm100_tma_bytes_per_stage(self.cfg)

        # each pipeline's full and empty barriers, then the watchdog's stage numbers (the
        # fields as objects: this module's annotations are strings, which cute.struct
        # resolves only inside a jit function's own body)
        fields = {
            "ab_mbar": cute.struct.MemRange[cutlass.Int64, 4 * self.num_ab_stage],
            "acc_mbar": cute.struct.MemRange[cutlass.Int64, 4 * self.num_acc_stage],
            # 2-CTA: the pair's TMEM release (the peer's epilogue warp 0 arrives); with the
            # watchdog the pair's exit barrier (every warp of both CTAs arrives)
            "tmem_dealloc_mbar": cutlass.Int64,
            # the MMA warp's last tcgen05 operations are done (its teardown commit)
            "mma_done_mbar": cutlass.Int64,
            "watch": cute.struct.MemRange[cutlass.Int64, BLOCK_BYTES // 8],  # WaitGuard's
            "tmem_holding_buf": cutlass.Int32,
            # (EPI_TILE_M, EPI_TILE_N, C_STAGE)
            "sC": cute.struct.Align[cute.struct.MemRange[self.c_dtype, cute.cosize(self.c_smem_layout_staged.outer)],
                                    SM100_SMEM_ALIGN],
            # (MMA, MMA_M, MMA_K, STAGE)
            "sA": cute.struct.Align[cute.struct.MemRange[self.ab_dtype, cute.cosize(self.a_smem_layout_staged.outer)],
                                    SM100_SMEM_ALIGN],
            # (MMA, MMA_N, MMA_K, STAGE)
            "sB": cute.struct.Align[cute.struct.MemRange[self.ab_dtype, cute.cosize(self.b_smem_layout_staged.outer)],
                                    SM100_SMEM_ALIGN],
            # (MMA, MMA_M, MMA_K, STAGE)
            "sSFA": cute.struct.Align[cute.struct.MemRange[self.sf_dtype, cute.cosize(self.sfa_smem_layout_staged)],
                                      SM100_SMEM_ALIGN],
            # (MMA, MMA_N, MMA_K, STAGE)
            "sSFB": cute.struct.Align[cute.struct.MemRange[self.sf_dtype, cute.cosize(self.sfb_smem_layout_staged)],
                                      SM100_SMEM_ALIGN],
        }
        SharedStorage = cute.struct(type("SharedStorage", (), {"__annotations__": fields}))
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
            mPtrs,
            mSched,
            mDesc,
            num_tiles,
            (record_ptr, claim_ptr, launch_tag, timeout_ns),
        ).launch(
            grid=(num_ctas, 1, 1),
            block=[self.threads_per_cta, 1, 1],
            cluster=(*self.cluster_shape_mn, 1),
            min_blocks_per_mp=1,
            use_pdl=self.cfg.pdl,
            **launch_options,
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
        mPtrs: cute.Tensor,
        mSched: cute.Tensor,
        mDesc: cute.Tensor,
        num_tiles: cutlass.Int32,
        watch_args: tuple,
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

        if warp_idx == self.tma_warp_id:
            self.prefetch_start(mSizes, mSched, mDesc, cluster_idx, num_tiles)

        smem = SmemAllocator()
        storage = smem.allocate(self.shared_storage)
        # the watchdog's block, ordered before any wait by the CTA barrier (the clusters'
        # barriers below are relaxed: they order the mbarrier inits, not plain stores)
        guard = WaitGuard(self.watch, storage.watch.data_ptr().toint(), self.threads_per_cta // 32, (
            (("sm100.tma.empty", "sm100.tma.tail", "sm100.mma.full", "sm100.tma.drain"), storage.ab_mbar.data_ptr(),
             self.num_ab_stage),
            (("sm100.mma.acc_empty", "sm100.mma.tail", "sm100.epilogue.acc_full"), storage.acc_mbar.data_ptr(),
             self.num_acc_stage),
        ), peer=self.use_2cta)
        if cutlass.const_expr(self.watch.enabled):
            guard.start(tidx == 0, watch_args, cta_rank_in_cluster ^ 1)
            cute.arch.sync_threads()

        # TMA warp -> MMA warp: the leader's barrier counts both CTAs' TMA bytes
        ab_pipeline = pipeline.PipelineTmaUmma.create(
            barrier_storage=storage.ab_mbar.data_ptr(),
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
            barrier_storage=storage.acc_mbar.data_ptr(),
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
                    # without the watchdog the peer's epilogue warp 0 arrives once it no
                    # longer reads TMEM; with it, every warp of both CTAs once it issues
                    # nothing more into either CTA (pair_exit)
                    cute.arch.mbarrier_init(storage.tmem_dealloc_mbar.ptr, self.pair_exit_count)
        if cutlass.const_expr(self.watch.enabled):
            if warp_idx == self.tma_warp_id:
                with cute.arch.elect_one():
                    # one tcgen05.commit of the (leader's) MMA warp, multicast to the pair
                    cute.arch.mbarrier_init(storage.mma_done_mbar.ptr, 1)
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
        sC_base = storage.sC.data_ptr().toint()  # the direct stores' (byte address, 1024-aligned)

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
        num_tiles = self.live_tiles(mSched, num_tiles)

        if warp_idx == self.tma_warp_id:
            self.load(
                guard,
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
                (storage.tmem_dealloc_mbar.ptr, cta_rank_in_cluster),
            )
        if warp_idx == self.mma_warp_id:
            self.mma(
                guard,
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
                storage.mma_done_mbar.ptr,
                is_leader_cta,
                mSizes,
                mSched,
                cluster_idx,
                num_clusters,
                num_tiles,
                (storage.tmem_dealloc_mbar.ptr, cta_rank_in_cluster),
            )
        if warp_idx < self.mma_warp_id:
            self.epilogue(
                guard,
                lay,
                tidx,
                warp_idx,
                acc_pipeline,
                tma_atom_c,
                tCgC,
                sC,
                sC_base,
                tCtAcc_fake,
                storage.tmem_holding_buf.ptr,
                storage.tmem_dealloc_mbar.ptr,
                storage.mma_done_mbar.ptr,
                cta_rank_in_cluster,
                mSizes,
                mPtrs,
                mSched,
                mDesc,
                cluster_idx,
                num_clusters,
                num_tiles,
            )

    def live_tiles(self, mSched, num_tiles):
        """The schedule rows the roles walk, read once the grid dependency wait is over:
        num_tiles, the launch's (a subclass whose schedule a kernel writes reads it there)."""
        return num_tiles

    @cute.jit
    def prefetch_start(self, mSizes, mSched, mDesc, cluster_idx, num_tiles):
        """The TMA warp pulls in what the CTA's first tile reads, before the grid dependency
        wait, as the Hopper kernel does (Sm90GroupedGemm.prefetch_schedule): into L1 its
        schedule row and every group's sizes, host-written tables that no kernel writes;
        into L2 only, every group's descriptors, which the init kernel writes and which an
        L2 prefetch cannot hold stale (ptx.prefetch_l2). After the harness's L2 flush each
        of these is a DRAM round trip in the chain schedule row -> sizes -> descriptor ->
        first TMA; prefetched here they overlap the previous kernel's tail."""
        lane = cute.arch.lane_idx()
        num_groups = cute.size(mSizes, mode=[0])
        if lane == 0:
            if cluster_idx < num_tiles:
                row = mSched.iterator.toint() + Int64(cluster_idx) * (3 * 4)
                prefetch_l1(row)
                prefetch_l1(row + (3 * 4 - 1))  # a row may straddle two lines
        prefetch_lines(mSizes.iterator.toint(), num_groups * (4 * 4), lane, False)
        prefetch_lines(mDesc.iterator.toint(), num_groups * (SM100_NUM_DESC * SM100_DESC_BYTES), lane, True)

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
        guard,
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
        pair,
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
        # abort protocol: ok turns 0 at the first wait that gives up, and no load issues
        # after it; issued counts the stages whose loads went out (the drain's)
        ok = Int32(1)
        issued = Int32(0)
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
            if cutlass.const_expr(not guard.enabled):
                if producer_state.count < k_tiles:
                    peek_empty = ab_pipeline.producer_try_acquire(producer_state)
            for _k in cutlass.range(0, k_tiles, 1, unroll=1):
                if cutlass.const_expr(not guard.enabled):
                    self.acquire_stage(guard, ab_pipeline, producer_state, peek_empty, t, False)
                elif ok != 0:
                    ok = self.acquire_stage(guard, ab_pipeline, producer_state, peek_empty, t,
                                            (t == cluster_idx) & (producer_state.count == 0))
                full_bar = ab_pipeline.producer_get_barrier(producer_state)
                k = producer_state.count
                s = producer_state.index
                if ok != 0:
                    for (atom, gTile, sStages, mask, _), desc in zip(operands, descs):
                        cute.copy(
                            atom,
                            gTile[(None, k)],
                            sStages[(None, s)],
                            tma_bar_ptr=full_bar,
                            mcast_mask=mask,
                            tma_desc_ptr=manager.get_tensormap_ptr(desc, cute.AddressSpace.generic),
                        )
                issued = issued + ok
                producer_state.advance()
                if cutlass.const_expr(not guard.enabled):
                    peek_empty = cutlass.Boolean(1)
                    if producer_state.count < k_tiles:
                        peek_empty = ab_pipeline.producer_try_acquire(producer_state)
            t = self.next_tile(guard, t, num_clusters, num_tiles, ok)
        # keep the CTA alive until the MMA warp released every stage it was sent, and (with
        # the watchdog) until the loads it issued have landed
        self.stages_tail(guard, ab_pipeline, producer_state, "sm100.tma.tail", num_tiles, ok)
        self.drain_loads(guard, ab_pipeline, issued, num_tiles)
        self.pair_arrive(guard, pair)
        guard.leave(cute.arch.lane_idx() == 0)

    # ----------------------------------------------------------------- watchdog
    @cute.jit
    def next_tile(self, guard, t, num_clusters, num_tiles, ok):
        """The role's next schedule row; with the watchdog, past the last one once a wait of
        the role gave up (ok 0) or the CTA gave up (the role leaves its loop)."""
        t = t + num_clusters
        if cutlass.const_expr(guard.enabled):
            if (ok == 0) | (guard.aborted() != 0):
                t = num_tiles
        return t

    def wait(self, guard, *args, **kwargs):
        """guard.wait (WaitGuard): called through the kernel, since the DSL carries through a
        dynamic loop every object whose method the loop body calls."""
        return guard.wait(*args, **kwargs)

    def drain(self, guard, *args, **kwargs):
        """guard.drain, called through the kernel as wait is."""
        guard.drain(*args, **kwargs)

    def aborted(self, guard):
        return guard.aborted()

    @cute.jit
    def acquire_stage(self, guard, ab_pipeline, state, peek, tile, first):
        """Waits until stage `state` is empty, then (leader CTA) arms its full barrier with
        both CTAs' byte count. Returns whether to issue the stage's loads: always without the
        watchdog; with it, only while the wait completed and the CTA has not given up (a CTA
        must not leave its SM with a TMA write into its shared memory in flight). first
        (injected sm100.mma.full builds): the CTA's first stage, which then expects 16 bytes
        more than its loads bring."""
        ok = Int32(1)
        if cutlass.const_expr(not guard.enabled):
            ab_pipeline.producer_acquire(state, peek)
        else:
            ok = guard.wait(ab_pipeline.sync_object_empty.get_barrier(state.index), state.phase,
                            "sm100.tma.empty", tile, state.count, check_abort=True)
            tx = Int32(self.num_tma_load_bytes)
            extra = injected_fault(guard, "sm100.mma.full", first)
            if cutlass.const_expr(extra is not None):
                tx = tx + 16 * extra
            if (ok != 0) & ab_pipeline.is_leader_cta:
                with cute.arch.elect_one():
                    cute.arch.mbarrier_arrive_and_expect_tx(ab_pipeline.producer_get_barrier(state), tx)
        return ok

    @cute.jit
    def stages_tail(self, guard, ab_pipeline, state, site: str, num_tiles, ok):
        """The TMA warp's tail: the MMA warp released every stage this warp filled (its
        commits must not land on a barrier of a CTA that left). With the watchdog, only
        while no wait of the warp gave up (ok): after that the MMA warp releases nothing
        more, and the drain and the pair's exit keep the CTA instead."""
        if cutlass.const_expr(not guard.enabled):
            ab_pipeline.producer_tail(state)
        else:
            for i in cutlass.range_constexpr(self.num_ab_stage):
                if ok != 0:
                    ok = self.wait(guard, ab_pipeline.sync_object_empty.get_barrier(state.index), state.phase, site,
                                   num_tiles, Int32(i))
                state.advance()

    @cute.jit
    def drain_loads(self, guard, ab_pipeline, issued, num_tiles):
        """With the watchdog, the leader CTA's TMA warp waits until the loads of the last
        stages it issued have landed (their full barriers, which count both CTAs' bytes):
        a CTA must not leave its SM with a TMA write into its shared memory in flight, and
        the peer leaves only after this warp's arrive on the pair's exit (pair_arrive).
        Stage issue n of the CTA's (0-based) went to stage n % S, the (n // S)-th fill of
        that stage, so its full barrier's phase of parity (n // S) % 2 completes when its
        loads land. A drain (not cut short by the abort flag): where it expires too, the
        barrier is short of bytes no load brings (sm100.mma.full's fault), not waiting
        for a load in flight."""
        if cutlass.const_expr(guard.enabled):
            if ab_pipeline.is_leader_cta:
                for i in cutlass.range_constexpr(self.num_ab_stage):
                    n = issued - 1 - i
                    if n >= 0:
                        self.drain(guard, ab_pipeline.sync_object_full.get_barrier(n % self.num_ab_stage),
                                   (n // self.num_ab_stage) % 2, "sm100.tma.drain", num_tiles, n)

    @cute.jit
    def pair_arrive(self, guard, pair, fault=None):
        """With the watchdog in a CTA pair: this warp issues nothing more into either CTA
        (loads, MMAs, commits, remote arrives); lane 0 arrives on both CTAs' exit barriers,
        which each CTA's epilogue warp 0 waits on before it frees TMEM (the CTA leaves only
        after that warp). fault: sm100.teardown.peer's, in epilogue warp 0 of CTA 1."""
        if cutlass.const_expr(guard.enabled and self.use_2cta):
            pair_mbar, rank = pair
            if cutlass.const_expr(fault is None):
                if cute.arch.lane_idx() == 0:
                    cute.arch.mbarrier_arrive(pair_mbar)
                    cute.arch.mbarrier_arrive(pair_mbar, rank ^ 1)
            elif (cute.arch.lane_idx() == 0) & (fault == 0):
                cute.arch.mbarrier_arrive(pair_mbar)
                cute.arch.mbarrier_arrive(pair_mbar, rank ^ 1)

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
        guard,
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
        mma_done_ptr,
        is_leader_cta,
        mSizes: cute.Tensor,
        mSched: cute.Tensor,
        cluster_idx: cutlass.Int32,
        num_clusters: cutlass.Int32,
        num_tiles: cutlass.Int32,
        pair,
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
        # abort protocol: ok turns 0 at the first wait that gives up; after it this warp
        # issues no tcgen05.cp, MMA or commit but the teardown's
        ok = Int32(1)
        t = cluster_idx
        while t < num_tiles:
            group = mSched[(t, 0)]
            k_tiles = mSizes[(group, 2)] // SM100_TILE_K
            # (MMA, MMA_M, MMA_N)
            tCtAcc = tCtAcc_base[(None, None, None, acc_state.index)]
            consumer_state.reset_count()
            peek_full = cutlass.Boolean(1)
            if cutlass.const_expr(not guard.enabled):
                if consumer_state.count < k_tiles and is_leader_cta:
                    peek_full = ab_pipeline.consumer_try_wait(consumer_state)
            first_tile = t == cluster_idx
            last_tile = t + num_clusters >= num_tiles
            if is_leader_cta:
                if cutlass.const_expr(not guard.enabled):
                    acc_pipeline.producer_acquire(acc_state)
                else:
                    ok = self.wait(guard, acc_pipeline.sync_object_empty.get_barrier(acc_state.index),
                                   acc_state.phase, "sm100.mma.acc_empty", t, Int32(0))
            # the first MMA of a tile must overwrite the TMEM accumulator
            tiled_mma.set(tcgen05.Field.ACCUMULATE, False)
            for _k in cutlass.range(0, k_tiles, 1, unroll=1):
                if cutlass.const_expr(not guard.enabled):
                    if is_leader_cta:
                        ab_pipeline.consumer_wait(consumer_state, peek_full)
                        self.mma_stage(tiled_mma, tCtAcc, tCrA, tCrB, tCtSFA, tCtSFB, copy_s2t_sfa, tCsSFA_s2t,
                                       tCtSFA_s2t, copy_s2t_sfb, tCsSFB_s2t, tCtSFB_s2t, num_k_blocks,
                                       ab_pipeline, consumer_state, None)
                else:
                    if is_leader_cta & (ok != 0):
                        ok = self.wait(guard, ab_pipeline.sync_object_full.get_barrier(consumer_state.index),
                                       consumer_state.phase, "sm100.mma.full", t, consumer_state.count)
                    if is_leader_cta & (ok != 0):
                        fault = self.release_fault(guard, first_tile, last_tile, consumer_state.count, k_tiles)
                        self.mma_stage(tiled_mma, tCtAcc, tCrA, tCrB, tCtSFA, tCtSFB, copy_s2t_sfa, tCsSFA_s2t,
                                       tCtSFA_s2t, copy_s2t_sfb, tCsSFB_s2t, tCtSFB_s2t, num_k_blocks,
                                       ab_pipeline, consumer_state, fault)
                consumer_state.advance()
                if cutlass.const_expr(not guard.enabled):
                    peek_full = cutlass.Boolean(1)
                    if consumer_state.count < k_tiles:
                        if is_leader_cta:
                            peek_full = ab_pipeline.consumer_try_wait(consumer_state)
            if is_leader_cta & (ok != 0):
                fault = injected_fault(guard, "sm100.epilogue.acc_full", first_tile)
                if cutlass.const_expr(fault is None):
                    acc_pipeline.producer_commit(acc_state)
                elif fault == 0:
                    acc_pipeline.producer_commit(acc_state)
            acc_state.advance()
            t = self.next_tile(guard, t, num_clusters, num_tiles, ok)
        if cutlass.const_expr(not guard.enabled):
            acc_pipeline.producer_tail(acc_state)
        else:
            # the epilogue released the last accumulator (as producer_tail; not after a
            # give-up, when the epilogue releases nothing more), then, on every path, every
            # tcgen05 operation of this warp is done before the epilogue frees TMEM: a commit
            # (the pair's with 2-CTA MMAs) on the teardown barrier, which the epilogue drains
            if is_leader_cta:
                for _ in cutlass.range_constexpr(self.num_acc_stage - 1):
                    acc_state.advance()
                if ok != 0:
                    ok = self.wait(guard, acc_pipeline.sync_object_empty.get_barrier(acc_state.index),
                                   acc_state.phase, "sm100.mma.tail", num_tiles, Int32(0))
                fault = injected_fault(guard, "sm100.teardown.mma_done", True)
                with cute.arch.elect_one():
                    if cutlass.const_expr(fault is None):
                        self.commit_to(acc_pipeline, mma_done_ptr)
                    elif fault == 0:
                        self.commit_to(acc_pipeline, mma_done_ptr)
        self.pair_arrive(guard, pair)
        guard.leave(cute.arch.lane_idx() == 0)

    @cute.jit
    def mma_stage(self, tiled_mma, tCtAcc, tCrA, tCrB, tCtSFA, tCtSFB, copy_s2t_sfa, tCsSFA_s2t, tCtSFA_s2t,
                  copy_s2t_sfb, tCsSFB_s2t, tCtSFB_s2t, num_k_blocks, ab_pipeline, consumer_state, fault):
        """One full stage: its scales to TMEM, its MMAs, and the stage's release (a
        tcgen05.commit, which frees it once these MMAs have read it; fault: the injected
        release fault, None in other builds)."""
        s2t_stage = (None, None, None, None, consumer_state.index)
        cute.copy(copy_s2t_sfa, tCsSFA_s2t[s2t_stage], tCtSFA_s2t)
        cute.copy(copy_s2t_sfb, tCsSFB_s2t[s2t_stage], tCtSFB_s2t)
        for kb in cutlass.range(num_k_blocks, unroll_full=True):
            kb_coord = (None, None, kb, consumer_state.index)
            tiled_mma.set(tcgen05.Field.SFA, tCtSFA[(None, None, kb)].iterator)
            tiled_mma.set(tcgen05.Field.SFB, tCtSFB[(None, None, kb)].iterator)
            cute.gemm(tiled_mma, tCtAcc, tCrA[kb_coord], tCrB[kb_coord], tCtAcc)
            tiled_mma.set(tcgen05.Field.ACCUMULATE, True)
        if cutlass.const_expr(fault is None):
            ab_pipeline.consumer_release(consumer_state)
        elif fault == 0:
            ab_pipeline.consumer_release(consumer_state)

    @cute.jit
    def release_fault(self, guard, first_tile, last_tile, k, k_tiles):
        """The injected fault of the MMA warp's release of k-block k: the first one of the
        CTA (sm100.tma.empty) or its last (sm100.tma.tail); None in other builds."""
        fault = None
        if cutlass.const_expr(guard.injects("sm100.tma.empty")):
            fault = injected_fault(guard, "sm100.tma.empty", first_tile & (k == 0))
        if cutlass.const_expr(guard.injects("sm100.tma.tail")):
            fault = injected_fault(guard, "sm100.tma.tail", last_tile & (k == k_tiles - 1))
        return fault

    @cute.jit
    def acc_release_fault(self, guard, first_tile, last_tile):
        """The injected fault of the epilogue's release of an accumulator: of the CTA's first
        tile (sm100.mma.acc_empty) or its last (sm100.mma.tail); None in other builds."""
        fault = None
        if cutlass.const_expr(guard.injects("sm100.mma.acc_empty")):
            fault = injected_fault(guard, "sm100.mma.acc_empty", first_tile)
        if cutlass.const_expr(guard.injects("sm100.mma.tail")):
            fault = injected_fault(guard, "sm100.mma.tail", last_tile)
        return fault

    def commit_to(self, acc_pipeline, mbar_ptr):
        """tcgen05.commit of this thread's earlier tcgen05 operations to mbar_ptr, multicast
        to the CTA pair as the accumulator commits are (in an elect_one block)."""
        if acc_pipeline.producer_mask is None:
            tcgen05.commit(mbar_ptr)
        else:
            tcgen05.commit(mbar_ptr, acc_pipeline.producer_mask, acc_pipeline.cta_group)

    # ----------------------------------------------------------------- epilogue warps
    @cute.jit
    def epilogue(
        self,
        guard,
        lay: Sm100KernelLayouts,
        tidx: cutlass.Int32,
        warp_idx: cutlass.Int32,
        acc_pipeline,
        tma_atom_c: cute.CopyAtom,
        tCgC: cute.Tensor,
        sC: cute.Tensor,
        sC_base: cutlass.Int32,
        tCtAcc_fake: cute.Tensor,
        tmem_holding_ptr,
        tmem_dealloc_mbar_ptr,
        mma_done_ptr,
        cta_rank_in_cluster,
        mSizes: cute.Tensor,
        mPtrs: cute.Tensor,
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
            direct = False
            c_addr, c_m, c_n, gC_sub = None, None, None, None  # the direct stores' (direct_last_store)
            if cutlass.const_expr(self.cfg.direct_last_store):
                if cutlass.const_expr(self.DIRECT_STORES):
                    direct = True
                else:
                    direct = t + num_clusters >= num_tiles
                # C's address and extents, read before the accumulator wait: their latency
                # (DRAM after the harness's L2 flush) passes under the tile's MMAs
                c_addr = mPtrs[(group, SM100_DESC_C)]
                c_m = mSizes[(group, 0)]
                c_n = mSizes[(group, 1)]
                # gC's coordinates of each subtile's element (0, 0), as the TMA store's boxes
                # (EPI_TILE_M, EPI_TILE_N, EPI_M * EPI_N)
                gC_sub = cute.group_modes(gC_epi[(None, None, None, None, tile_mma_m, tile_mma_n, 0)], 2, 4)
            # (T2R, T2R_M, T2R_N, EPI_M * EPI_N)
            tTR_tAcc = cute.group_modes(
                tTR_tAcc_base[(None, None, None, None, None, acc_state.index)], 3, 5
            )
            if cutlass.const_expr(not guard.enabled):
                acc_pipeline.consumer_wait(acc_state)
                c_buffer_count = self.epilogue_tile(
                    guard, lay, tidx, warp_idx, acc_pipeline, acc_state, tma_atom_c, tiled_copy_t2r, tiled_copy_r2s,
                    tTR_tAcc, tTR_rAcc, tRS_rC, tRS_sC, bSG_sC, bSG_gC, sC_base, manager, desc_c, c_pipeline,
                    c_buffer_count, direct, c_addr, c_m, c_n, gC_sub, t, cluster_idx, num_clusters, num_tiles)
                acc_state.advance()
                t = t + num_clusters
            else:
                ok = self.wait(guard, acc_pipeline.sync_object_full.get_barrier(acc_state.index), acc_state.phase,
                               "sm100.epilogue.acc_full", t, Int32(0))
                # the four warps decide together (their named barriers need all four): the
                # tile is read and stored only where every warp's wait completed and the
                # CTA has not given up; after that they issue no TMEM load, store or
                # release, and leave their loop
                stop = barrier_any(int(Sm100Barrier.EPILOGUE), num_epi_threads,
                                   (ok == 0) | (self.aborted(guard) != 0))
                if stop == 0:
                    c_buffer_count = self.epilogue_tile(
                        guard, lay, tidx, warp_idx, acc_pipeline, acc_state, tma_atom_c, tiled_copy_t2r,
                        tiled_copy_r2s, tTR_tAcc, tTR_rAcc, tRS_rC, tRS_sC, bSG_sC, bSG_gC, sC_base, manager, desc_c,
                        c_pipeline, c_buffer_count, direct, c_addr, c_m, c_n, gC_sub, t, cluster_idx, num_clusters,
                        num_tiles)
                acc_state.advance()
                t = t + num_clusters
                if stop != 0:
                    t = num_tiles

        if warp_idx == self.epilog_warp_ids[0]:
            cute.arch.relinquish_tmem_alloc_permit(is_two_cta=self.use_2cta)
        cute.arch.barrier(barrier_id=int(Sm100Barrier.EPILOGUE), number_of_threads=num_epi_threads)
        if cutlass.const_expr(not guard.enabled):
            if warp_idx == self.epilog_warp_ids[0]:
                if cutlass.const_expr(self.use_2cta):
                    # the pair's MMAs write both CTAs' TMEM: free only when the peer is done too
                    cute.arch.mbarrier_arrive(tmem_dealloc_mbar_ptr, cta_rank_in_cluster ^ 1)
                    cute.arch.mbarrier_wait(tmem_dealloc_mbar_ptr, 0)
                cute.arch.dealloc_tmem(acc_tmem_ptr, self.num_tmem_alloc_cols, is_two_cta=self.use_2cta)
            c_pipeline.producer_tail()
        else:
            # the TMA stores have read their smem (a wait the TMA unit ends on its own)
            c_pipeline.producer_tail()
            fault = injected_fault(guard, "sm100.teardown.peer", warp_idx == self.epilog_warp_ids[0], cta=1)
            self.pair_arrive(guard, (tmem_dealloc_mbar_ptr, cta_rank_in_cluster), fault)
            if warp_idx == self.epilog_warp_ids[0]:
                # drains, not cut short by the abort flag: every tcgen05 operation that
                # writes this CTA's TMEM is done (the MMA warp's teardown commit, issued on
                # every path), and in a pair every warp of both CTAs issues nothing more
                # into either (the pair's exit); only then is TMEM freed
                self.drain(guard, mma_done_ptr, Int32(0), "sm100.teardown.mma_done", num_tiles, Int32(0))
                if cutlass.const_expr(self.use_2cta):
                    self.drain(guard, tmem_dealloc_mbar_ptr, Int32(0), "sm100.teardown.peer", num_tiles, Int32(0))
                cute.arch.dealloc_tmem(acc_tmem_ptr, self.num_tmem_alloc_cols, is_two_cta=self.use_2cta)
        guard.leave(tidx % 32 == 0)

    @cute.jit
    def epilogue_tile(self, guard, lay, tidx, warp_idx, acc_pipeline, acc_state, tma_atom_c, tiled_copy_t2r,
                      tiled_copy_r2s, tTR_tAcc, tTR_rAcc, tRS_rC, tRS_sC, bSG_sC, bSG_gC, sC_base, manager, desc_c,
                      c_pipeline, c_buffer_count, direct, c_addr, c_m, c_n, gC_sub, t, cluster_idx, num_clusters,
                      num_tiles):
        """One tile's accumulator (already waited for): TMEM -> registers -> fp16 -> smem ->
        C, subtile by subtile, then the accumulator stage's release. Returns the count of
        C buffers used so far."""
        num_epi_threads = 32 * len(self.epilog_warp_ids)
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
            if cutlass.const_expr(self.cfg.direct_last_store):
                if direct:
                    if warp_idx == self.epilog_warp_ids[0]:
                        # the last TMA store may still read the buffer the next subtile
                        # fills: done before the barrier below lets anyone write it
                        cute.arch.cp_async_bulk_wait_group(0, read=True)
                    store_epi_subtile_vectors(
                        tidx, sC_base, lay.c_smem, c_buffer, 0 if self.cfg.swap_ab else 1, c_addr,
                        gC_sub[(0, 0, sub)], (c_n, c_m) if self.cfg.swap_ab else (c_m, c_n),
                        (1, c_n) if self.cfg.swap_ab else (c_n, 1),
                    )
                else:
                    self.store_subtile_tma(warp_idx, tma_atom_c, bSG_sC, bSG_gC, c_buffer, sub, manager,
                                           desc_c, c_pipeline)
            else:
                self.store_subtile_tma(warp_idx, tma_atom_c, bSG_sC, bSG_gC, c_buffer, sub, manager,
                                       desc_c, c_pipeline)
            cute.arch.barrier(
                barrier_id=int(Sm100Barrier.EPILOGUE), number_of_threads=num_epi_threads
            )
        # the accumulator stage is free once every epilogue warp has read it; tcgen05.ld
        # is asynchronous, so wait::ld must retire this warp's TMEM reads before the
        # MMA warp may overwrite the stage
        cute.arch.fence_view_async_tmem_load()
        fault = self.acc_release_fault(guard, t == cluster_idx, t + num_clusters >= num_tiles)
        with cute.arch.elect_one():
            if cutlass.const_expr(fault is None):
                acc_pipeline.consumer_release(acc_state)
            elif fault == 0:
                acc_pipeline.consumer_release(acc_state)
        return c_buffer_count

    @cute.jit
    def store_subtile_tma(self, warp_idx, tma_atom_c, bSG_sC, bSG_gC, c_buffer, sub, manager, desc_c,
                          c_pipeline):
        """Epilogue warp 0 stores a staged subtile with the TMA, which clips it to C."""
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


# Compilation (works without a GPU: fake pointers)


def sm100_can_implement(config: Sm100Config, sizes) -> tuple[bool, str]:
    return Sm100BlockScaledGroupedGemm.can_implement(config, sizes)


def compile_sm100(config: Sm100Config, watch: WatchSettings = WatchSettings()) -> CompiledKernels:
    """Compiles the descriptor-init and GEMM kernels of a config for sm_100a, with the
    watchdog as `watch` says; one build serves every group count (a launch argument of
    both). (Without a GPU, CUTE_DSL_ARCH=sm_100a selects the target.)"""
    kernel = Sm100BlockScaledGroupedGemm(config, watch)
    desc_align = SM100_DESC_BYTES
    init_fn = cute.compile(
        kernel.init_descriptors,
        fake_ptr(cutlass.Int32), fake_ptr(cutlass.Int64), fake_ptr(cutlass.Int64, desc_align),
        Int32(1),
    )
    gemm_fn = cute.compile(
        kernel,
        fake_ptr(cutlass.Int32), fake_ptr(cutlass.Int64), fake_ptr(cutlass.Int32), fake_ptr(cutlass.Int64, desc_align),
        Int32(1), Int32(config.cta_group), Int32(1), *fake_watch_args(),
    )

    def init(ptrs, sizes, tensormaps):
        return bind_launch(init_fn, (
            gmem_arg(sizes, cutlass.Int32), gmem_arg(ptrs, cutlass.Int64),
            gmem_arg(tensormaps, cutlass.Int64, desc_align), int_arg(Int32, sizes.shape[0]),
        ))

    def prepare(sizes, ptrs, tensormaps, sched, scratch, watch: LaunchWatch):
        args = (
            gmem_arg(sizes, cutlass.Int32), gmem_arg(ptrs, cutlass.Int64), gmem_arg(sched.schedule, cutlass.Int32),
            gmem_arg(tensormaps, cutlass.Int64, desc_align), int_arg(Int32, sched.host.num_tiles),
            int_arg(Int32, sched.host.grid), int_arg(Int32, sizes.shape[0]), *watch.args(),
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
        size_class=sm100_size_class,
        tile_order=sm100_tile_order,
        alternatives=sm100_alternatives,
        config_name=sm100_config_name,
        fallback="torch._scaled_mm",
    )
