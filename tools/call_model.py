"""A model of one leaderboard call on a GPU: its predicted time as fixed costs plus bytes
over bandwidth, with the wave structure, the weight re-reads (L2 or DRAM), the bytes each
SM can keep in flight, the MMA time where it binds, and the host's time to issue the call.

    python tools/call_model.py --table     # "B200, predicted" in docs/performance.md
    python tools/call_model.py --h200      # the same model against the Hopper kernel's measured times
    python tools/call_model.py --case "m: [192, 320]; n: [3072, 3072]; k: [4096, 4096]"

How a call is modelled (all host-side, no GPU):

- A config's schedule gives each CTA cluster its units in order (the Blackwell kernel's
  round robin over its schedule's rows, sm100_tile_order; the Hopper kernel's sm90_work_schedule). A unit
  loads its K range of one weight panel (tile_n rows) and one token panel (tile_m rows),
  with their scales, and stores its C tile.
- A unit's loads come from L2 when the same panel and K-tile were loaded less than
  `l2_reuse_bytes` of DRAM traffic before (measured in the bytes the call has requested
  from DRAM so far), else from DRAM. Adjacent M tiles of one weight column (the schedule
  keeps them adjacent) thus read the weights once; a re-read a wave later may not.
- A fluid simulation runs the units: the busy clusters share the DRAM bandwidth equally
  (water-filling), each capped by the bytes it can keep in flight over the load latency
  (stages x stage bytes / latency, Little's law) and by its unit's compute time (the
  MMA, or on Hopper the measured K-tile cost of decode and wgmma). Idle clusters (a
  partial last wave, fewer tiles than clusters) pull nothing.
- A call's GPU time is the kernel's fixed cost (prologue to the first MMA, the last
  tile's epilogue and store, less what programmatic dependent launch overlaps with the
  previous call) plus the simulation's makespan. The makespan is split into "bytes"
  (the call's DRAM bytes at the full bandwidth) and "tail" (the rest: partial waves,
  clusters that cannot pull their share, MMA-bound stretches, per-tile gaps).
- The leaderboard times 15 calls between one pair of CUDA events after an L2 flush. The
  host issues them back to back with the flush's duration as a head start (loop_mean_us);
  a round whose calls take the host longer than the flush and the GPU's own work leaves
  the GPU waiting. The flush is a 64 GB fill (FLUSH_BYTES), several milliseconds: the
  host's 15 calls of a round, warm (5 us each) or on new inputs (a few hundred us each),
  are issued before it ends, so every round is GPU-bound. The ranked mode's mean also
  holds the first round, whose calls meet their inputs for the first time and add the
  GPU's share of that (each table's upload and descriptor init, FIRST_CALL_GPU_US) to
  their calls (ranked_mean_us).

Error against the H200 (h200_validation, tests/test_call_model.py): the Hopper kernel's
eleven measured cases of docs/performance.md are predicted within MAX_H200_ERROR.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="tools/call_model.py", description=__doc__.split("\n\n")[0],
        epilog="Runs on the CPU (no GPU).")
    ap.add_argument("--table", action="store_true", help="the B200 prediction per benchmark shape and config")
    ap.add_argument("--h200", action="store_true", help="the model against the Hopper kernel's measured times")
    ap.add_argument("--changes", action="store_true", help="what each change to the Blackwell kernel is worth")
    ap.add_argument("--case", help="one problem as an eval.py spec line: every Blackwell config that takes it")
    ap.add_argument("--first-call", action="store_true",
                    help="the ranked mean under each measured host cost of a call on new inputs")
    return ap


if __name__ == "__main__":
    _parser().parse_args()  # --help and argument errors answer before torch loads

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from nvfp4_gemm.schedule import (  # noqa: E402
    UNIT_PARTIAL,
    UNIT_WHOLE,
    balanced_units,
    k_range_units,
    round_robin_units,
)
from nvfp4_gemm.sm90_config import (  # noqa: E402
    SM90_KTILE_US,
    SM90_KTILE_US_32_TOKENS,
    SM90_PACKED_K_TILE,
    choose_sm90_config,
    sm90_packed_stage_bytes,
    sm90_work_schedule,
)
from nvfp4_gemm.sm100 import (  # noqa: E402
    SM100_NAMED_CONFIGS,
    SM100_TILE_K,
    SM100_TRIAL_CONFIGS,
    choose_sm100_config,
    sm100_config_name,
    sm100_grid_ctas,
    sm100_stage_bytes,
    sm100_tile_order,
)

SF_VEC = 16  # one E4M3 scale per 16 K values (task.yml)
SF_ATOM_ROWS = 128  # blocked scale layout: atoms of 128 rows x 4 scales (eval.py scale_bytes)
# The flush before each timed round: eval.py's loop calls utils.clear_l2_cache_large, as
# the leaderboard's harness does (gpu-mode/reference-kernels, utils.clear_l2_cache_large:
# torch.randn((16000, 1024, 1024)), fp32), 64 GB written. At the DRAM rate at best, so its
# duration as the host's head start is a lower bound.
FLUSH_BYTES = 16000 * 1024 * 1024 * 4
# What a call on new inputs adds to the GPU's time (the table's upload and descriptor
# init): an H100's first-round CUDA-event time a call (tools/probes/host_ab.py --first-round:
# 117.6 / 76.0 / 35.5 / 20.3 us) less eval.py benchmark's mean in the same run (110.69 /
# 69.97 / 30.13 / 14.95, two runs), 6.91 / 6.04 / 5.38 / 5.36 us on the benchmark shapes
# (G = 8, 8, 2, 2), a line through the means, DSL 4.5.2, 46aaedc's submission.py.
# Not measured on a B200.
FIRST_CALL_GPU_US = (5.00, 0.185)  # (fixed us, us a group)
CALLS_PER_ROUND = 15  # eval.py NUM_ITERATIONS_PER_BENCHMARK: one event pair around 15 calls
# eval.py run_leaderboard: at most 100 rounds, stopped early only when the standard error
# falls under 0.1 % of the mean; a first round slower than the rest by its GPU share
# (FIRST_CALL_GPU_US: 25-98 % of a benchmark shape's call on a B200, predicted) keeps it
# above that for hundreds of rounds, so the ranked mean is over all 100
RANKED_ROUNDS = 100


@dataclass(frozen=True)
class Machine:
    """A GPU and the host that drives it, each figure sourced where it is set."""

    name: str
    num_sms: int
    dram_bytes_per_us: float  # sustained DRAM read rate
    l2_bytes: int
    load_latency_us: float  # a TMA load's round trip from DRAM
    fp4_flops_per_sm_us: float | None  # dense FP4 MMA rate per SM (None: no FP4 tensor cores)
    host_call_us: float  # host time of a warm call (same tensors as an earlier call)
    first_call_us_per_group: float  # host time of a call on inputs it has not seen, per group
    # share of L2 that holds lines for a later re-read (the rest: other panels, C, the
    # flush's leftovers, and on a two-die part the other die's half)
    l2_reuse_share: float = 0.5
    first_call_fixed_us: float = 0.0  # a call on new inputs: host time beside the per-group part

    def first_call_us(self, groups: int) -> float:
        """Host time of a call on inputs it has not seen (the ranked mode's first round)."""
        return self.first_call_fixed_us + self.first_call_us_per_group * groups

    @property
    def l2_reuse_bytes(self) -> float:
        return self.l2_bytes * self.l2_reuse_share

    @property
    def flush_us(self) -> float:
        """The L2 flush's fill, the host's head start on the timed calls."""
        return FLUSH_BYTES / self.dram_bytes_per_us


B200 = Machine(
    name="B200",
    # 148 SMs, 74 per die (chipsandcheese.com, "Nvidia's B200: Keeping the CUDA Juggernaut
    # Rolling"); the kernel's grid is 74 two-CTA clusters (design.md, section 5)
    num_sms=148,
    # task.yml's speed of light: every benchmark's bytes (eval.py bytes_of) at 7.69 TB/s give
    # its 18.833 / 10.667 / 2.406 / 1.525 us (tests/test_call_model.py); 96 % of NVIDIA's
    # 8 TB/s, as the H200's read rate is 95 % of its rated 4.8 TB/s
    dram_bytes_per_us=7.69e6,
    l2_bytes=126_000_000,  # 126 MB over two dies (chipsandcheese.com, the same article)
    # not measured on a B200: the H200's first TMA load from DRAM, 1.2-1.7 us
    # (tools/tma_probe.py as of 5119a5f, docs/performance.md)
    load_latency_us=1.5,
    # 9 PFLOPS dense FP4 (NVIDIA HGX B200 datasheet; 18 with sparsity) is 148 SMs x 32768
    # FLOP per clock at 1.86 GHz; at task.yml's 1.5 GHz (its speed of light's clock):
    fp4_flops_per_sm_us=32768 * 1500.0,
    # not measured on the leaderboard's host: the H200 host's warm call, 5.02 / 5.18 us at
    # G = 2 / 8 (tools/probes/host_ab.py, 57bdde6, docs/performance.md "Host time")
    host_call_us=5.1,
    # not measured on the leaderboard's host: a call on new inputs as the ranked mode's
    # first round makes them, real launches, on an H100's host under DSL 4.5.2 (the runners'):
    # first-round medians 257.4 / 212.5 us a call at G = 2 (shapes 2, 3) and 372.6 / 362.7
    # at G = 8 (shapes 0, 1), a line through the means (python tools/probes/host_ab.py
    # OLD.py NEW.py --first-round --rounds 6, the old file, 46aaedc's submission.py).
    # Hidden under the flush (FLUSH_BYTES).
    first_call_us_per_group=22.1,
    first_call_fixed_us=190.7,
)

H200 = Machine(
    name="H200",
    num_sms=132,
    # the sum over 2 GiB in the run of docs/performance.md's figures (c7c3551): 4577.5 GB/s
    dram_bytes_per_us=4.5775e6,
    l2_bytes=50 * 1024 * 1024,  # 50 MB (NVIDIA H100 / H200 SXM: the GH100's L2 as shipped)
    load_latency_us=1.5,  # first TMA load from DRAM 1.2-1.7 us (tools/tma_probe.py, 5119a5f)
    fp4_flops_per_sm_us=None,  # no FP4 tensor cores: the Hopper kernel's K-tile costs
    host_call_us=5.1,  # 5.02 / 5.18 us at G = 2 / 8 (tools/probes/host_ab.py, 57bdde6)
    # not measured on the H200's host: the H100 host's (B200 above); hidden under the flush
    first_call_us_per_group=22.1,
    first_call_fixed_us=190.7,
)


@dataclass(frozen=True)
class KernelCosts:
    """A kernel's fixed costs per call and per tile on a machine."""

    prologue_us: float  # a CTA's start to its first MMA (first loads after the L2 flush)
    epilogue_us: float  # the last MMA to the kernel's end (accumulators out, C stored)
    pdl_overlap_us: float  # what programmatic dependent launch hides behind the previous call
    tile_switch_us: float = 0.0  # per later unit of a CTA, not overlapped with loads

    @property
    def fixed_us(self) -> float:
        return self.prologue_us + self.epilogue_us - self.pdl_overlap_us


# The Hopper kernel on the H200, measured (docs/performance.md, "Where the Hopper kernel's
# time goes"): about 4 us from a one-tile CTA's start to its first wgmma (schedule loads,
# then a first TMA round trip of about 1.8 us from DRAM; tools/probes/sm90_trace.py); the
# epilogue 0.7 us, and the CTA leaves 0.1 us after it with the last tile's direct stores
# (2444083); programmatic dependent launch hides 1.6-2.0 us a call (design.md, section 6).
SM90_PROLOGUE_US = 4.0
SM90_EPILOGUE_US = 0.7 + 0.1
PDL_OVERLAP_US = 1.8
# Later tiles of a CTA: 2.3-2.7 us each at tile_n 256, 1.05 at 128 beyond their K-tiles
# (docs/performance.md, "Later tiles", tools/probes/sm90_trace.py)
SM90_TILE_SWITCH_US = {256: 2.5, 128: 1.05}
# The Hopper kernel's K-tile (128 K) cost by (tile_n, token width), one tile per CTA
# (python tools/probes/sm90_ktile_cost.py, 801693d; docs/performance.md "K-tile costs")
SM90_KTILE_MEASURED_US = {
    (256, 128): 1.449, (256, 96): 1.285, (256, 64): 1.052, (256, 32): 0.892,
    (128, 128): 0.863, (128, 96): 0.773, (128, 64): 0.592, (128, 32): 0.520,
}
# The decode tile (32 tokens) has no probe figure: the chooser's fit (SM90_KTILE_US_32_TOKENS)
# scaled by the probe's 256 x 128 K-tile over the chooser table's (1.449 / 1.72)
SM90_DECODE_TILE_SCALE = SM90_KTILE_MEASURED_US[(256, 128)] / SM90_KTILE_US[(256, 128)]
# A split piece's extra cost (partial sums out, or the wait and add): the chooser's fit
# (SM90_FIXUP_US: 2.5 at tile_n 256, 1.2 at 128) in the same measured units
SM90_FIXUP_MEASURED_US = {256: 2.5 * SM90_DECODE_TILE_SCALE, 128: 1.2 * SM90_DECODE_TILE_SCALE}

# The Blackwell kernel on a B200: not measured. Its prologue takes the same steps as the
# Hopper kernel's (schedule row, sizes, a descriptor fetched from global memory after the
# flush, then the first TMA round trip), taken at the H200's 4 us. Its last tile ends
# with a TMA store whose drain kept the Hopper CTA 0.9 us longer than direct stores did
# (1.0 against 0.1 us, 2444083). Two TMEM accumulator stages let the epilogue drain one
# tile while the next tile's MMAs run, and the TMA warp loads ahead across tiles
# (design.md, section 5): no gap between a CTA's tiles.
# Both kernels prefetch every group's descriptors into L2 before griddepcontrol.wait
# (Sm100BlockScaledGroupedGemm.prefetch_start, Sm90Fp4GroupedGemm.prefetch_schedule). On
# the Hopper kernel that saved 0.32 / 0.21 / 0.13 / 0.01 us a call on the four benchmark
# shapes, old and new alternating on an H100 (python tools/probes/kernel_ab.py OLD NEW
# --rounds 6, 4dc4b2f against ef0b2ca): far from the DRAM round trip (1.5 us) a fetch on the
# critical path would cost, so the descriptor's fetch mostly overlapped the schedule's
# loads already. Taken at the mean; the H200 figures above predate it.
SM100_DESC_PREFETCH_SAVING_US = 0.17
SM100_PROLOGUE_US = 4.0 - SM100_DESC_PREFETCH_SAVING_US
SM100_EPILOGUE_US = 0.7 + 1.0
SM100_DIRECT_STORE_SAVING_US = 0.9
SM100_COSTS = KernelCosts(SM100_PROLOGUE_US, SM100_EPILOGUE_US, PDL_OVERLAP_US, 0.0)


def sm100_costs(cfg) -> KernelCosts:
    """A Blackwell config's fixed costs: SM100_COSTS, less the TMA store's drain where the
    last tile stores directly (Sm100Config.direct_last_store)."""
    if cfg.direct_last_store:
        return replace(SM100_COSTS, epilogue_us=SM100_COSTS.epilogue_us - SM100_DIRECT_STORE_SAVING_US)
    return SM100_COSTS

# The best legitimate public entry's times on the four benchmark shapes, us
# (docs/performance.md, "B200: the speed of light")
PUBLIC_ENTRY_US = (27.9, 19.4, 8.5, 6.4)
# task.yml's speed of light per benchmark shape, us
TASK_SOL_US = (18.833, 10.667, 2.406, 1.525)


# Units of work
@dataclass(frozen=True)
class Unit:
    """One unit of a cluster's list: K-tiles [kt0, kt1) of tile (g, tm, tn)."""

    group: int
    tm: int
    tn: int
    kt0: int
    kt1: int
    weight_bytes_per_kt: int  # the weight panel's rows, values and scales, per K-tile
    token_bytes_per_kt: int  # the token panel's rows and its whole scale atoms, per K-tile
    c_bytes: int  # fp16 C written by this unit (0: a split tile's first piece)
    compute_us: float  # MMA (or decode and wgmma) time at full speed
    gap_us: float = 0.0  # before the unit: the tile switch and split-piece costs


@dataclass(frozen=True)
class CallPlan:
    """What a config does with a problem: each cluster's units, and what one cluster can
    keep in flight."""

    label: str
    clusters: tuple[tuple[Unit, ...], ...]
    inflight_bytes: float  # per cluster: stages x stage bytes x CTAs
    costs: KernelCosts
    num_tiles: int
    resident_clusters: int  # clusters the GPU holds at once (the persistent grid's bound)

    @property
    def waves(self) -> float:
        return self.num_tiles / self.resident_clusters


def _panel_bytes(rows: int, k_tile: int) -> int:
    """Bytes of `rows` rows of one K-tile: FP4 values and E4M3 scales."""
    return rows * (k_tile // 2 + k_tile // SF_VEC)


def _token_bytes(used: int, k_tile: int) -> int:
    """A token tile's FP4 rows plus its scales, read as whole 128-row atoms (the scale
    tensor's padding is real memory)."""
    atoms = -(-used // SF_ATOM_ROWS)
    return used * (k_tile // 2) + atoms * SF_ATOM_ROWS * (k_tile // SF_VEC)


def sm100_plan(sizes: Sequence[Sequence[int]], cfg, machine: Machine = B200,
               costs: KernelCosts | None = None, clusters: int | None = None,
               order=sm100_tile_order, split: str | None = None) -> CallPlan:
    """The Blackwell kernel's call: its schedule's rows (`order`: the kernel's own,
    sm100_tile_order, or another such as build_tile_schedule's, whose separate runs of a
    group's last, shorter M tiles read their weights again) in round robin over the
    persistent grid of sm100_grid_ctas (or `clusters`, where the max-active-clusters query
    says fewer fit). A change the kernel does not have, for what it would be worth: split
    cuts tiles into K pieces as the Hopper kernel's generators do ("balanced":
    balanced_units, "k-range": k_range_units), each piece after the first paying
    SM100_SPLIT_PIECE_US."""
    sizes = [tuple(s) for s in sizes if s[0] and s[1]]
    costs = sm100_costs(cfg) if costs is None else costs
    rows = order(sizes, cfg.tile_m, cfg.tile_n)
    # the grid: one cluster per tile at most, or every resident cluster for split pieces
    resident = clusters or sm100_grid_ctas(cfg, 1 << 30, machine.num_sms) // cfg.cta_group
    grid = resident if split is not None else min(resident, len(rows))
    kt = SM100_TILE_K
    k_tiles = [k // kt for _, _, k, _ in sizes]
    inflight = cfg.cta_group * cfg.ab_stages * sm100_stage_bytes(cfg)
    if split is None:
        ws = round_robin_units(rows, (len(rows),), k_tiles, grid)
    else:
        # a full tile's K-tile at the cluster's share of DRAM, or at its in-flight cap
        share = min(machine.dram_bytes_per_us / grid, inflight / machine.load_latency_us)
        kt_us = (_panel_bytes(cfg.tile_n, kt) + _token_bytes(cfg.tile_m, kt)) / share
        make = {"balanced": balanced_units, "k-range": k_range_units}[split]
        ws = make(rows, (len(rows),), k_tiles, grid, [kt_us], costs.tile_switch_us, SM100_SPLIT_PIECE_US)
    flops = 2 * cfg.mma_m * cfg.mma_n * kt  # one stage's MMAs over the cluster
    mma_kt_us = flops / (cfg.cta_group * machine.fp4_flops_per_sm_us)
    per_cluster = _units(ws, sizes, cfg.tile_m, cfg.tile_n, kt, lambda c, p: mma_kt_us,
                         costs.tile_switch_us, SM100_SPLIT_PIECE_US)
    label = sm100_config_name(cfg) + ("" if split is None else f" {split}")
    return CallPlan(label, per_cluster, inflight, costs, len(rows), resident)


# A split piece's extra cost on the Blackwell kernel (not built there): one 128 x 256 fp32
# partial (128 KB) written to and read back from L2 by one cluster, each way about half a
# microsecond at its in-flight rate (7 x 28,672 bytes per CTA over the load latency)
SM100_SPLIT_PIECE_US = 1.0


def _units(ws, sizes, tile_m: int, tile_n: int, k_tile: int, kt_us, switch_us: float,
           piece_us: float) -> tuple[tuple[Unit, ...], ...]:
    """A WorkSchedule's units per CTA (or cluster) as the simulation's Units. kt_us(c, p):
    compute per K-tile of CTA c's unit in phase p. A CTA's first unit starts after the
    prologue, which holds its start-up; each later one after the tile switch; a split piece
    (PARTIAL or FIXUP) pays piece_us too. A PARTIAL writes fp32 sums to its workspace
    slot, not C."""
    out = []
    for c, cta in enumerate(ws.cta_units):
        units = []
        for i, ((g, tm, tn, kt0, kt1, role, _, _), p) in enumerate(zip(cta, ws.phases(c))):
            m, n = sizes[g][:2]
            used_m = min(tile_m, m - tm * tile_m)
            used_n = min(tile_n, n - tn * tile_n)
            gap = (switch_us if i else 0.0) + (piece_us if role != UNIT_WHOLE else 0.0)
            c_bytes = 0 if role == UNIT_PARTIAL else 2 * used_m * used_n
            units.append(Unit(g, tm, tn, kt0, kt1, _panel_bytes(used_n, k_tile), _token_bytes(used_m, k_tile),
                              c_bytes, (kt1 - kt0) * kt_us(c, p), gap))
        out.append(tuple(units))
    return tuple(out)


def sm90_ktile_us(cfg, width: int) -> float:
    """The measured cost of one of cfg's K-tiles at a token width (the decode tile's from
    the chooser's fit, scaled to the probe's units)."""
    if cfg.tile_m == 32:
        return SM90_KTILE_US_32_TOKENS[(cfg.tile_n, width)] * SM90_DECODE_TILE_SCALE
    return SM90_KTILE_MEASURED_US[(cfg.tile_n, width)]


def sm90_plan(sizes: Sequence[Sequence[int]], cfg=None, machine: Machine = H200) -> CallPlan:
    """The Hopper kernel's call: sm90_work_schedule's units per CTA (whole tiles, or split
    pieces), at the measured K-tile, tile-switch and split-piece costs."""
    sizes = [tuple(s) for s in sizes]
    cfg = cfg or choose_sm90_config(sizes, machine.num_sms)
    ws = sm90_work_schedule(sizes, cfg, machine.num_sms)
    switch = SM90_TILE_SWITCH_US[cfg.tile_n]
    kt_us = [sm90_ktile_us(cfg, w) for w in cfg.widths]
    clusters = _units(ws, sizes, cfg.tile_m, cfg.tile_n, SM90_PACKED_K_TILE, lambda c, p: kt_us[p],
                      switch, SM90_FIXUP_MEASURED_US[cfg.tile_n])
    costs = KernelCosts(SM90_PROLOGUE_US, SM90_EPILOGUE_US, PDL_OVERLAP_US, switch)
    inflight = cfg.stages * sm90_packed_stage_bytes(cfg)
    num_tiles = sum(len(c) for c in clusters)
    return CallPlan(cfg.name, clusters, inflight, costs, num_tiles, len(clusters))


# The fluid simulation
@dataclass
class Flow:
    """What the simulation found: the makespan after the prologue, the DRAM and L2 bytes,
    and the lower bounds each limit alone sets."""

    makespan_us: float
    dram_bytes: float
    l2_bytes: float
    mma_us: float  # the busiest cluster's compute time alone
    inflight_us: float  # the busiest cluster's loads at its in-flight cap alone


class _Reuse:
    """Which K-tiles of which panels L2 still holds: a panel K-tile read again within
    `window` bytes of DRAM traffic since its last read hits."""

    def __init__(self, window: float):
        self.window = window
        self.last: dict[tuple, float] = {}

    def split(self, key: tuple, kt0: int, kt1: int, per_kt: int, now: float) -> tuple[float, float]:
        """(DRAM bytes, L2 bytes) of reading K-tiles [kt0, kt1) of a panel."""
        dram = l2 = 0.0
        for kt in range(kt0, kt1):
            seen = self.last.get((key, kt))
            if seen is not None and now - seen < self.window:
                l2 += per_kt
            else:
                dram += per_kt
            self.last[(key, kt)] = now
        return dram, l2


def simulate(plan: CallPlan, machine: Machine) -> Flow:
    """Runs the plan's clusters side by side. Between events (a unit's end, a gap's end)
    every busy cluster progresses at a constant rate: the DRAM bandwidth water-filled over
    the clusters' demands, each demand capped by the cluster's in-flight bytes over the
    load latency and by its unit's compute time."""
    bw = machine.dram_bytes_per_us
    cap = plan.inflight_bytes / machine.load_latency_us  # bytes per us one cluster can pull
    reuse = _Reuse(machine.l2_reuse_bytes)
    requested = 0.0  # DRAM bytes requested so far (the reuse clock)
    n = len(plan.clusters)
    nxt = [0] * n  # next unit index per cluster
    left = [0.0] * n  # fraction of the current unit left (0: none running)
    gap_end = [0.0] * n
    cur = [None] * n  # (load bytes, dram bytes, compute us) of the running unit
    t = 0.0
    total_dram = total_l2 = 0.0
    mma_us = max((sum(u.compute_us for u in c) for c in plan.clusters), default=0.0)
    inflight_us = 0.0

    def start(c: int) -> None:
        nonlocal requested, total_dram, total_l2
        u = plan.clusters[c][nxt[c]]
        nxt[c] += 1
        wd, wl = reuse.split(("w", u.group, u.tn), u.kt0, u.kt1, u.weight_bytes_per_kt, requested)
        td, tl = reuse.split(("t", u.group, u.tm), u.kt0, u.kt1, u.token_bytes_per_kt, requested)
        dram = wd + td + u.c_bytes
        requested += dram
        total_dram += dram
        total_l2 += wl + tl
        cur[c] = (wd + wl + td + tl, dram, u.compute_us)
        left[c] = 1.0

    waiting = []  # clusters whose next unit starts after its gap
    for c in range(n):
        if plan.clusters[c]:
            start(c)
    while True:
        active = [c for c in range(n) if left[c] > 0]
        gaps = [c for c in waiting if gap_end[c] > t]
        if not active and not gaps:
            break
        # each active cluster's top progress rate (units per us) and its DRAM demand then
        top = {}
        for c in active:
            load, dram, comp = cur[c]
            rate = math.inf
            if load > 0:
                rate = min(rate, cap / load)
            if comp > 0:
                rate = min(rate, 1.0 / comp)
            if rate == math.inf:
                rate = 1e9  # an empty unit
            top[c] = rate
        demands = sorted((top[c] * cur[c][1], c) for c in active)
        rate = dict(top)
        budget, k = bw, len(demands)
        for i, (d, _c) in enumerate(demands):  # water-filling: the smallest demands first
            share = budget / (k - i)
            if d <= share:
                budget -= d
            else:
                for _, c2 in demands[i:]:
                    rate[c2] = share / cur[c2][1]
                break
        step = min([left[c] / rate[c] for c in active] + [gap_end[c] - t for c in gaps])
        step = max(step, 0.0)
        for c in active:
            left[c] = max(0.0, left[c] - rate[c] * step)
        t += step
        for c in active:
            if left[c] <= 1e-12:
                left[c] = 0.0
                if nxt[c] < len(plan.clusters[c]):
                    gap_end[c] = t + plan.clusters[c][nxt[c]].gap_us
                    waiting.append(c)
        for c in list(waiting):
            if gap_end[c] <= t + 1e-12:
                waiting.remove(c)
                start(c)
    for c in range(n):
        loads = 0.0
        for u in plan.clusters[c]:
            loads += (u.kt1 - u.kt0) * (u.weight_bytes_per_kt + u.token_bytes_per_kt)
        inflight_us = max(inflight_us, loads / cap)
    return Flow(t, total_dram, total_l2, mma_us, inflight_us)


# A call, a round and the ranked mean
@dataclass
class Prediction:
    """One config on one problem: the GPU time of a call and where it goes, the host's floor
    and what the leaderboard's loop would read."""

    label: str
    gpu_us: float
    fixed_us: float
    bytes_us: float
    tail_us: float
    mma_us: float
    waves: float
    dram_bytes: float
    host_us: float
    warm_mean_us: float  # the 15-call loop, warm
    first_round_us: float  # the same loop on inputs met for the first time
    ranked_mean_us: float  # over RANKED_ROUNDS rounds, the first included
    binds: str  # what sets gpu_us or the loop: "bytes", "mma", "in-flight", "fixed", "host"
    extras: dict = field(default_factory=dict)


def loop_mean_us(gpu_us: float, host_us: float, head_us: float, calls: int = CALLS_PER_ROUND) -> float:
    """Mean time per call of `calls` calls between one event pair: the host issues call j at
    j x host_us after it starts, head_us before the GPU reaches the start event (the L2
    flush's fill is still running); the GPU runs a call when it is issued and the previous
    one is done."""
    end = 0.0
    for j in range(1, calls + 1):
        issued = j * host_us - head_us
        end = max(end, issued) + gpu_us
    return end / calls


def predict(plan: CallPlan, machine: Machine, groups: int) -> Prediction:
    flow = simulate(plan, machine)
    fixed = plan.costs.fixed_us
    gpu = fixed + flow.makespan_us
    bytes_us = flow.dram_bytes / machine.dram_bytes_per_us
    tail = flow.makespan_us - bytes_us
    host = machine.host_call_us
    warm = loop_mean_us(gpu, host, machine.flush_us)
    first_gpu = gpu + FIRST_CALL_GPU_US[0] + FIRST_CALL_GPU_US[1] * groups
    first = loop_mean_us(first_gpu, machine.first_call_us(groups), machine.flush_us)
    ranked = ((RANKED_ROUNDS - 1) * warm + first) / RANKED_ROUNDS
    bounds = {"bytes": bytes_us, "mma": flow.mma_us, "in-flight": flow.inflight_us}
    binds = max(bounds, key=bounds.get)
    if fixed > flow.makespan_us:
        binds = "fixed"
    if warm > gpu * (1 + 1e-9):
        binds = "host"
    return Prediction(plan.label, gpu, fixed, bytes_us, tail, flow.mma_us, plan.waves, flow.dram_bytes,
                      host, warm, first, ranked, binds,
                      {"l2_bytes": flow.l2_bytes, "first_call_host_us": machine.first_call_us(groups)})


def predict_sm100(sizes: Sequence[Sequence[int]], cfg, machine: Machine = B200, **kw) -> Prediction:
    return predict(sm100_plan(sizes, cfg, machine, **kw), machine, len(sizes))


def predict_sm90(sizes: Sequence[Sequence[int]], cfg=None, machine: Machine = H200) -> Prediction:
    return predict(sm90_plan(sizes, cfg, machine), machine, len(sizes))


def geomean(values: Sequence[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


# Problems
def spec_sizes(spec: dict) -> list[tuple[int, int, int, int]]:
    """(M, N, K, 1) per group of an eval.py spec (a task.yml case)."""
    return [(m, n, k, 1) for m, n, k in zip(spec["m"], spec["n"], spec["k"])]


def call_bytes(sizes: Sequence[Sequence[int]]) -> int:
    """eval.py bytes_of: FP4 A and B, both scale tensors with their padding, fp16 C."""
    total = 0
    for m, n, k, *_ in sizes:
        atoms = (-(-m // 128) + -(-n // 128)) * -(-(k // SF_VEC) // 4)
        total += (m + n) * k // 2 + atoms * 512 + 2 * m * n
    return total


def sol_us(sizes: Sequence[Sequence[int]], machine: Machine = B200) -> float:
    """task.yml's speed of light: the larger of a call's bytes at the DRAM rate and its
    FLOPs at the FP4 rate (the bytes on every benchmark shape)."""
    flops = sum(2 * m * n * k for m, n, k, *_ in sizes)
    return max(call_bytes(sizes) / machine.dram_bytes_per_us,
               flops / (machine.num_sms * machine.fp4_flops_per_sm_us))


def task_specs(kind: str) -> list[dict]:
    import yaml

    return yaml.safe_load((ROOT / "task.yml").read_text())[kind]


def regime_specs() -> list[dict]:
    """tools/regime_specs.txt's cases, parsed as eval.py parses them."""
    import re

    specs = []
    for line in (ROOT / "tools" / "regime_specs.txt").read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        spec = {}
        for key, value in re.findall(r"(\w+)\s*:\s*(\[[^\]]*\]|\d+)", line):
            spec[key] = [int(v) for v in value.strip("[]").split(",")] if value.startswith("[") else int(value)
        specs.append(spec)
    return specs


# The Hopper kernel's measured times (docs/performance.md, "Today's figures", c7c3551): the
# regime cases in tools/regime_specs.txt's order, means over the rounds
H200_MEASURED_US = (108.96, 68.88, 28.97, 14.63, 379.92, 209.82, 42.31, 80.00, 67.19, 244.15, 397.88)
# The worst relative error of the model on them (h200_validation), held by a test
MAX_H200_ERROR = 0.20


def h200_validation() -> list[tuple[dict, float, Prediction]]:
    """(spec, measured us, prediction) of each measured case: the H200 machine, the Hopper
    kernel's chosen config. The measured means are eval.py benchmark's, over 100 rounds
    whose first meets its inputs for the first time: the prediction to hold them to is
    ranked_mean_us."""
    return [(spec, measured, predict_sm90(spec_sizes(spec)))
            for spec, measured in zip(regime_specs(), H200_MEASURED_US)]


# The chooser's candidates on a B200
def sm100_candidates(sizes: Sequence[Sequence[int]], can_implement=None) -> dict:
    """The named Blackwell configs (SM100_NAMED_CONFIGS, the set the chooser picks from) that
    take the problem, by name."""
    if can_implement is None:
        from nvfp4_gemm.sm100 import sm100_can_implement as can_implement
    return {name: cfg for name, cfg in SM100_NAMED_CONFIGS.items() if can_implement(cfg, sizes)[0]}


def b200_table() -> list[tuple[int, str, Prediction, bool]]:
    """(shape, config name, prediction, chosen today) for each benchmark shape and each
    config that takes it."""
    rows = []
    for i, spec in enumerate(task_specs("benchmarks")):
        sizes = spec_sizes(spec)
        chosen = sm100_config_name(choose_sm100_config(sizes))
        for name, cfg in sm100_candidates(sizes).items():
            rows.append((i, name, predict_sm100(sizes, cfg), name == chosen))
    return rows


def _ms(x: float) -> str:
    return f"{x:.2f}"


def format_b200_table() -> str:
    rows = b200_table()
    out = ["| shape | config | waves | predicted us | x speed of light | public entry us | "
           "fixed / bytes / tail us | MMA us | host us, warm / first call | binds | ranked mean us |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    best = {}
    for shape, name, p, chosen in rows:
        sol = TASK_SOL_US[shape]
        mark = " (today's)" if chosen else " (trial)" if name in SM100_TRIAL_CONFIGS else ""
        out.append(f"| {shape} | `{name}`{mark} | {p.waves:.2f} | {_ms(p.warm_mean_us)} | "
                   f"{p.warm_mean_us / sol:.2f} | {PUBLIC_ENTRY_US[shape]} | "
                   f"{_ms(p.fixed_us)} / {_ms(p.bytes_us)} / {_ms(p.tail_us)} | {_ms(p.mma_us)} | "
                   f"{p.host_us:.1f} / {p.extras['first_call_host_us']:.0f} | {p.binds} | {_ms(p.ranked_mean_us)} |")
        if shape not in best or p.warm_mean_us < best[shape][1].warm_mean_us:
            best[shape] = (name, p)
    today = [p.warm_mean_us for _, _, p, chosen in rows if chosen]
    ranked = [p.ranked_mean_us for _, _, p, chosen in rows if chosen]
    top = [best[s][1].warm_mean_us for s in sorted(best)]
    out.append("")
    out.append(f"Geomean, today's configs: {geomean(today):.2f} us warm, {geomean(ranked):.2f} us ranked "
               f"(first round included); the best config per shape, trials included: {geomean(top):.2f} us "
               f"({', '.join(best[s][0] for s in sorted(best))}); speed of light "
               f"{geomean(TASK_SOL_US):.2f} us; public entry {geomean(PUBLIC_ENTRY_US):.2f} us.")
    return "\n".join(out)


# The wrapper alone: a first call on new pointers with the launches stubbed on a 2-core
# CPU, small problems so that no cloned input evicts the CPU's caches: 94.3 / 92.4 us at
# G = 2, 132.1 / 129.0 at G = 8, a line through the means (python
# tools/probes/host_overhead.py --calls 200, run twice, cbf897b)
STUB_FIRST_CALL = (81.0, 6.2)  # (fixed us, us a group)
FIRST_CALL_COSTS = (
    ("H100's host, real launch, DSL 4.5.2 (the model's)", B200.first_call_fixed_us, B200.first_call_us_per_group),
    ("2-core CPU, launch stubbed: the wrapper alone", *STUB_FIRST_CALL),
)


def _first_call_row(fixed: float, per_group: float) -> list[Prediction]:
    """Today's configs on the benchmark shapes with a first call of fixed + per_group x G us."""
    machine = replace(B200, first_call_fixed_us=fixed, first_call_us_per_group=per_group)
    row = []
    for spec in task_specs("benchmarks"):
        sizes = spec_sizes(spec)
        row.append(predict(sm100_plan(sizes, choose_sm100_config(sizes), machine), machine, len(sizes)))
    return row


def first_call_table() -> list[tuple[str, list[Prediction]]]:
    """Today's configs on the benchmark shapes under each first-call host cost of
    FIRST_CALL_COSTS (the warm loop is the same in all)."""
    return [(label, _first_call_row(fixed, per_group)) for label, fixed, per_group in FIRST_CALL_COSTS]


def first_call_budget_us(target_us: float) -> float:
    """The first-call host cost, the same at every G, at which today's ranked geomean on
    the benchmark shapes is target_us (the ranked mean does not fall as it rises: flat
    while the round's host time hides under the flush, then rising)."""
    lo, hi = 0.0, 10_000.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if geomean([p.ranked_mean_us for p in _first_call_row(mid, 0.0)]) < target_us:
            lo = mid
        else:
            hi = mid
    return lo


def format_first_call() -> str:
    out = ["| first call on new inputs | G = 2 / 8 us | first round, shapes 0-3 us a call | "
           "ranked mean, shapes 0-3 us | ranked geomean us |", "|---|---|---|---|---|"]
    for (label, fixed, per_group), (_, row) in zip(FIRST_CALL_COSTS, first_call_table()):
        out.append(f"| {label} | {fixed + 2 * per_group:.0f} / {fixed + 8 * per_group:.0f} | "
                   f"{' / '.join(f'{p.first_round_us:.1f}' for p in row)} | "
                   f"{' / '.join(_ms(p.ranked_mean_us) for p in row)} | "
                   f"{geomean([p.ranked_mean_us for p in row]):.2f} |")
    public = geomean(PUBLIC_ENTRY_US)
    out.append("")
    out.append(f"The flush gives the host a head start of {B200.flush_us / 1000:.1f} ms on a B200 "
               f"({FLUSH_BYTES / 1e9:.1f} GB at {B200.dram_bytes_per_us / 1e6:.2f} TB/s), so a round's "
               f"15 calls hide their host time up to about {B200.flush_us / CALLS_PER_ROUND:.0f} us a call; "
               f"the ranked geomean would reach the public entry's {public:.2f} us at a first call of "
               f"{first_call_budget_us(public):.0f} us at every G.")
    return "\n".join(out)


# Changes to the Blackwell kernel, each alone and all together, as the model prices them
def _sm100_variant(sizes, cfg, change: str, machine: Machine = B200) -> Prediction:
    kw = {}
    everything = change == "all of them"
    if change == "direct stores on the last tile" or everything:
        # built as a trial config (SM100_TRIAL_CONFIGS): today's with direct_last_store
        cfg = replace(cfg, direct_last_store=True)
    costs = sm100_costs(cfg)
    unsplit = predict(sm100_plan(sizes, cfg, machine, costs=costs, **kw), machine, len(sizes))
    if change == "split tiles into K pieces" or everything:
        one_wave = sm100_plan(sizes, cfg, machine).waves <= 1
        kw["split"] = "balanced" if one_wave else "k-range"
        split = predict(sm100_plan(sizes, cfg, machine, costs=costs, **kw), machine, len(sizes))
        # all of them: the split only where it still gains (it undoes the column order)
        return split if not everything or split.warm_mean_us < unsplit.warm_mean_us else unsplit
    return unsplit


SM100_CHANGES = ("today", "direct stores on the last tile", "split tiles into K pieces", "all of them")
# the changes built as trial configs (SM100_TRIAL_CONFIGS), not chosen until a B200 runs them
SM100_CHANGES_BUILT = {"direct stores on the last tile": "swap_2cta_m128n256_direct"}


def changes_table() -> dict[str, list[Prediction]]:
    """Per change (SM100_CHANGES), the prediction on each benchmark shape with the
    config the chooser takes today."""
    table = {}
    for change in SM100_CHANGES:
        row = []
        for spec in task_specs("benchmarks"):
            sizes = spec_sizes(spec)
            row.append(_sm100_variant(sizes, choose_sm100_config(sizes), change))
        table[change] = row
    return table


def format_changes() -> str:
    out = ["| change | shape 0 | 1 | 2 | 3 | geomean us | ranked geomean us |", "|---|---|---|---|---|---|---|"]
    for change, row in changes_table().items():
        cells = " | ".join(_ms(p.warm_mean_us) for p in row)
        built = SM100_CHANGES_BUILT.get(change)
        label = f"{change} (built: `{built}`, a trial)" if built else change
        out.append(f"| {label} | {cells} | {geomean([p.warm_mean_us for p in row]):.2f} | "
                   f"{geomean([p.ranked_mean_us for p in row]):.2f} |")
    return "\n".join(out)


def format_h200_validation() -> str:
    out = ["| case | measured us | predicted us (100 rounds, the first on new inputs) | error | fixed / bytes / tail us | compute us | binds |",
           "|---|---|---|---|---|---|---|"]
    errors = []
    for i, (spec, measured, p) in enumerate(h200_validation()):
        err = p.ranked_mean_us / measured - 1
        errors.append(err)
        out.append(f"| {i} (G = {len(spec['m'])}, N {spec['n'][0]}, K {spec['k'][0]}) | {measured} | "
                   f"{_ms(p.ranked_mean_us)} | {err:+.1%} | {_ms(p.fixed_us)} / {_ms(p.bytes_us)} / "
                   f"{_ms(p.tail_us)} | {_ms(p.mma_us)} | {p.binds} |")
    out.append("")
    out.append(f"Worst error {max(map(abs, errors)):.1%}, mean absolute {sum(map(abs, errors)) / len(errors):.1%}.")
    return "\n".join(out)


def _parse_case(text: str) -> dict:
    import re

    spec = {}
    for key, value in re.findall(r"(\w+)\s*:\s*(\[[^\]]*\]|\d+)", text):
        spec[key] = [int(v) for v in value.strip("[]").split(",")] if value.startswith("[") else int(value)
    return spec


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not (args.table or args.h200 or args.case or args.changes or args.first_call):
        args.table = args.h200 = args.changes = args.first_call = True
    if args.table:
        print("B200, predicted (tools/call_model.py --table)\n")
        print(format_b200_table())
    if args.changes:
        print("\nB200, predicted, today's configs with each change (tools/call_model.py --changes)\n")
        print(format_changes())
    if args.first_call:
        print("\nB200, predicted, today's configs under each first-call host cost (tools/call_model.py --first-call)\n")
        print(format_first_call())
    if args.h200:
        print("\nH200: the Hopper kernel, measured against predicted (tools/call_model.py --h200)\n")
        print(format_h200_validation())
    if args.case:
        sizes = spec_sizes(_parse_case(args.case))
        print(f"speed of light {sol_us(sizes):.2f} us")
        for name, cfg in sm100_candidates(sizes).items():
            p = predict_sm100(sizes, cfg)
            print(f"  {name}: {p.warm_mean_us:.2f} us (fixed {p.fixed_us:.2f}, bytes {p.bytes_us:.2f}, "
                  f"tail {p.tail_us:.2f}; {p.waves:.2f} waves; {p.binds}); ranked {p.ranked_mean_us:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
