"""Hopper (sm_90a) host side: Sm90Config and its legality, the lane and fragment arithmetic the
kernel shares with the CPU tests, the cost model and the config and schedule choice."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from .common import ceil_div, cutlass
from .formats import SF_ATOM_BYTES
from .kernel_runner import HostSchedule
from .schedule import (
    MAX_PHASES,
    WorkSchedule,
    balanced_units,
    k_range_fits,
    k_range_units,
    modeled_cta_us,
    persistent_grid,
    phased_tile_runs,
    phased_tile_schedule,
    round_robin_units,
    size_class,
    tiles_per_group,
    width_phase,
)

SM90_SMEM_CAPACITY = 227 * 1024  # bytes of dynamic smem one CTA may use on sm_90
SM90_DESC_BYTES = 128
SM90_NUM_DESC = 3  # per group: A (tokens), B (weights), C (TMA store); scales use bulk copies
SM90_PACKED_K_TILE = 128  # K elements per packed pipeline stage (64 bytes per row)
SM90_DECODE_K = 64  # K elements per K-half of a decoded token buffer (one SW128 fp16 row)
SM90_WEIGHT_ROWS_PER_BLOCK = 64  # one wgmma M atom
# Epilogue staging: per consumer WG one (tile_m tokens x 64 weight rows) fp16 box of C
# under the 128-byte swizzle, the TMA store's box (C row-major: tokens are C's rows):
# 128 bytes per token row (Sm90Config.c_stage_bytes)
SM90_C_ROW_BYTES = SM90_WEIGHT_ROWS_PER_BLOCK * 2
# A FIXUP's epilogue loads this many token pairs' partial sums (16 floats each) before it
# adds the first (all 8 pairs of a 128-token block: 64 registers, free once the K-loop ends)
SM90_FIXUP_BATCH = 8
# The token decode is spread over the first two consumer warpgroups (sm90_token_split),
# where a third one could not take whole words (tile_n 192 at 128 tokens: 512 words of a
# K-tile's chunks over 384 threads); Sm90Config.decoder_threads
SM90_DECODER_THREADS = 256
# Registers the producer warpgroup keeps after setmaxnreg.dec (TMA issue only), by the
# number of consumer warpgroups; the consumers get the rest of the pool (sm90_register_split)
SM90_PRODUCER_REGISTERS = {2: 40, 3: 32}
# Named barrier of all consumer threads (1 .. 3 are the consumer WGs' own: 1 + WG)
SM90_CONSUMERS_BARRIER = 4


# Host-side configuration and pure functions
@dataclass(frozen=True)
class Sm90Config:
    tile_m: int = 128  # token rows per tile (wgmma N): 128, 96 at tile_n 192, 32 at 256 (decode)
    tile_n: int = 128  # weight rows per tile (wgmma M): consumer WGs x blocks x 64
    stages: int = 4  # packed pipeline stages
    token_buffers: int = 3  # decoded token K-tiles (3: the ring needs no empty barrier)
    # token widths of the later phases: a tile whose used token rows fit one runs, after
    # the full tiles, at wgmma N = that width (split_tiles_by_width); () runs all at tile_m
    narrow: tuple[int, ...] = (96, 64)
    swap_ab: bool = True  # only the swap-AB mapping is implemented
    pdl: bool = True  # programmatic dependent launch (overlaps the previous call's tail)
    split_k: bool = False  # split tiles along K to balance the CTAs (k_range_units)
    # wgmma groups a consumer warp leaves in flight when it decodes the next group's
    # weights (wait_group(mma_depth)): 1 on 2 A fragments, or 2 or 3 on 4 (a_fragments)
    mma_depth: int = 1
    # a consumer loads the next K-tile's weights from its packed stage right after the
    # stage's wait (group 0) and releases the stage there, instead of after the last group:
    # the loads' latency hides behind a whole K-tile, the stage is free a K-tile earlier,
    # and both K-tiles' weights are live at once (sm90_consumer_registers)
    weights_early: bool = False

    @property
    def name(self) -> str:
        """A short name for warnings: 'n256_m32_s3_narrow16_depth3_we' and the like."""
        parts = [f"n{self.tile_n}", f"m{self.tile_m}", f"s{self.stages}"]
        if self.narrow:
            parts.append("narrow" + "-".join(map(str, self.narrow)))
        parts += [f"depth{self.mma_depth}"] + ["splitk"] * self.split_k + ["we"] * self.weights_early
        return "_".join(parts)

    @property
    def consumer_wgs(self) -> int:
        """Consumer warpgroups: 2 (one or two m64 blocks each), or 3 at tile_n 192 (one
        each), which puts a third warp on every SM sub-partition to hide the decode's
        latency."""
        return 3 if self.tile_n == 192 else 2

    @property
    def a_fragments(self) -> int:
        """Weight A fragments (8 registers each) a consumer thread cycles through, one per
        wgmma group: more than mma_depth, and dividing a K-tile's 4 x blocks groups so that
        group g of every K-tile writes fragment g % a_fragments (the cycle carries across
        K-tiles without unrolling them)."""
        return 2 if self.mma_depth == 1 else 4

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
        """Consumer threads that share the full-width phase's token decode
        (sm90_token_decoders at tile_m rows)."""
        return sm90_token_decoders(self, self.tile_m)

    @property
    def sf_blocks(self) -> int:
        """128-row scale atoms a weight tile spans: a 192-row tile starts at an atom or in
        the middle of one and always ends within the next."""
        return ceil_div(self.tile_n, 128)

    @property
    def sfa_blocks(self) -> int:
        """128-row scale atoms a token tile spans: one at 128, 64 or 32 tokens (which divide
        an atom); a 96-row tile starts 0, 32, 64 or 96 rows into an atom, so it may end in
        the next."""
        return 1 if 128 % self.tile_m == 0 else 2

    @property
    def c_stage_bytes(self) -> int:
        """One consumer WG's C staging box: tile_m token rows of 128 bytes."""
        return self.tile_m * SM90_C_ROW_BYTES

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
    return sm90_decoded_bytes(cfg) + cfg.consumer_wgs * cfg.c_stage_bytes + 3072


def sm90_smem_bytes(cfg: Sm90Config) -> int:
    return cfg.stages * sm90_packed_stage_bytes(cfg) + sm90_fixed_smem_bytes(cfg)


def sm90_max_stages(cfg: Sm90Config) -> int:
    return (SM90_SMEM_CAPACITY - sm90_fixed_smem_bytes(cfg)) // sm90_packed_stage_bytes(cfg)


def make_sm90_config(tile_n: int = 128, **kw) -> Sm90Config:
    """A config of width tile_n with as many packed stages as fit, at most 4 (4 at tile_n
    128, 3 at 256: more measured no faster), and two wgmma groups in flight (mma_depth)
    on whole tiles where the registers allow it: tile_n 128 and the decode tile, not 128
    tokens at tile_n 256 or 192. On the H200, alternating in one call: whole 128-row
    tiles 30.19 / 14.60 against 30.64 / 14.80 us on benchmark shapes 2 / 3, the decode
    tile 46.4 / 88.4 / 55.4 against 47.2 / 89.0 / 55.5 on the decode cases (python
    tools/probes/sm90_sweep.py "" "mma_depth=2"); but the K-range split tiles of shape 2 ran
    29.23 against 29.12 us (python eval.py benchmark, new, old, old, new), so split
    configs keep one. The decode tile asks for three (SM90_DECODE_TILE).
    weights_early is on where the registers allow it after mma_depth (tile_n 128, whole
    or split, and the decode tile; unless given): alternating in one call it ran 14.5 /
    29.7 against 14.6 / 30.1 us on benchmark shapes 3 / 2 at tile_n 128, 28.8-28.9
    against 29.0 us on shape 2's balanced split tiles, 43.9-44.1 / 83.3-83.4 / 52.6
    against 44.0-44.1 / 83.5-83.6 / 53.2-53.3 on the decode cases (python
    tools/probes/sm90_sweep.py CFG "CFG,weights_early=1" CFG "CFG,weights_early=1"), every result
    checked against the reference."""
    if "mma_depth" not in kw:
        deep = Sm90Config(tile_n=tile_n, mma_depth=2, **kw)
        kw["mma_depth"] = 2 if sm90_is_valid_registers(deep) and not deep.split_k else 1
    if "weights_early" not in kw:
        kw["weights_early"] = sm90_is_valid_registers(Sm90Config(tile_n=tile_n, weights_early=True, **kw))
    stages = min(4, sm90_max_stages(Sm90Config(tile_n=tile_n, stages=2, **kw)))
    return Sm90Config(tile_n=tile_n, stages=stages, **kw)


def sm90_token_decoders(cfg: Sm90Config, rows: int) -> int:
    """Consumer threads that share the decode of a phase's `rows` token rows (per K-tile
    rows x 4 packed chunks x 4 words). Every consumer thread where the words split into
    whole words of whole chunks each: one or two words of all 4 chunks (2 WGs at 128
    tokens, 3 WGs at 96), or, where the rows are fewer than a quarter of the threads
    (32 or 16 rows over 2 WGs), one word of 2 or 1 chunks (sm90_token_chunks). Else the
    first two WGs (3 WGs at 128 tokens, one or two words each) or, where even those are
    too many, 4 x tile_m threads (one word of 4 chunks each)."""
    threads = cfg.consumer_threads
    if sm90_token_chunks(rows, threads) < 4 or (4 * cfg.tile_m) % threads == 0:
        return threads
    return min(SM90_DECODER_THREADS, 4 * cfg.tile_m)


def sm90_token_split(rows: int, decoders: int = SM90_DECODER_THREADS) -> tuple[int, int]:
    """(threads per token row by words, words of each of its packed 16-byte chunks that
    each decodes) when `decoders` consumer threads decode a tile's `rows` token rows: every
    thread takes the same words of all its chunks (sm90_token_chunks: all 4 but where the
    rows are few), so that those chunks' P[i] make one store (sm90_token_slot). With 256:
    2 x 2 words at 128 rows (all 256 threads) and at 96 (192), 4 x 1 at 64 (256), at 32
    and at 16 (there with 2 or 4 threads per row by chunks); with 384 (three WGs at 96
    tokens), 4 x 1 at every width."""
    split = min(4, decoders // rows)
    return split, 4 // split


def sm90_token_chunks(rows: int, decoders: int) -> int:
    """Packed 16-byte chunks of its token row that each decoder thread decodes (one word of
    each where fewer than 4): 4, or 2 and 1 where 2 or 4 threads per row by chunks are
    needed for every thread to take a whole word (sm90_token_decoders: 32 and 16 rows over
    256 threads). A thread then stores 8 or 4 bytes per P index instead of 16."""
    groups = decoders // (4 * rows)
    return 4 // groups if groups in (2, 4) and decoders % (4 * rows) == 0 else 4


def sm90_publish_group(cfg: Sm90Config, wpt: int) -> int:
    """The wgmma group of a K-tile after which a consumer thread publishes the next K-tile's
    tokens (fence and arrive on the ring's full barrier), where it stores wpt words per
    chunk, one after each of groups 0, blocks, ..: one group after its last store (whose
    latency the group hides), and no earlier than group mma_depth, whose wait_group is the
    first to retire every wgmma of the K-tile before (the ring's order argument,
    Sm90Fp4GroupedGemm)."""
    return max(cfg.blocks * (wpt - 1) + 1, cfg.mma_depth)


def sm90_token_lane(tidx: int, rows: int, decoders: int = SM90_DECODER_THREADS) -> tuple[int, int, int]:
    """(token row, word group, chunk group) that consumer thread tidx decodes; the group's
    words are wpt * group .. wpt * group + wpt - 1 of chunks chunks * cgroup .. + chunks - 1
    (sm90_token_split, sm90_token_chunks).
    With all 4 chunks, a warp covers 32 / split rows. Every 8-lane phase of its 16-byte
    stores is one group of 8 consecutive rows (8 distinct 16-byte bank groups under SW128);
    every half-warp of its 8-byte loads (the whole warp for the 4-byte ones at 64 rows) is
    8 consecutive rows x all the groups (32 distinct banks under SW64).
    With fewer chunks, lane = (row, word, chunk group) in that order (chunk group fastest):
    a warp's 4-byte loads hit 32 distinct banks, and its stores of one P index two
    addresses per bank at most (words w and w + 2 lie in different K-halves, 4 KB apart,
    in the same bank)."""
    split, _ = sm90_token_split(rows, decoders)
    chunks = sm90_token_chunks(rows, decoders)
    warp, lane = tidx // 32, tidx % 32
    if chunks < 4:
        groups = 4 // chunks
        per_row = split * groups
        return (warp * (32 // per_row) + lane // per_row, (lane // groups) % split, lane % groups)
    per_warp = 32 // split
    group = (lane // 8) % split
    row = warp * per_warp + (lane // (8 * split)) * 8 + lane % 8
    return row, group, 0


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
    addressing; 8 more per A fragment beyond two, and with weights_early 12 per m64 block
    for the next K-tile's weight chunks and scales."""
    early = 12 * cfg.blocks if cfg.weights_early else 0  # 4 words and 2 f16x2 scales per row
    return cfg.blocks * 64 * cfg.tile_m // 128 + 96 + 8 * (cfg.a_fragments - 2) + early


SM90_TILE_NS = (128, 192, 256)  # 2 WGs x 1 block, 3 WGs x 1, 2 WGs x 2 (Sm90Config.consumer_wgs)
# token tile heights: 128, or 96 at tile_n 192, where all three WGs then decode tokens
# (one word per chunk each: Sm90Config.decoder_threads)
# 32-token tiles at tile_n 256: the decode regime (sm90_cost_model's SM90_KTILE_US_32_TOKENS)
SM90_TILE_MS = {128: (128,), 192: (128, 96), 256: (128, 32)}
# whole 16-byte chunks per decoding thread (sm90_token_split); 16: the epilogue's
# stmatrix.x4 takes 16 token columns at a time
SM90_NARROW_WIDTHS = (96, 64, 32, 16)


def sm90_is_valid_tile(cfg: Sm90Config) -> bool:
    # SM90_TILE_MS: every decoder thread decodes part of a token row (sm90_token_split);
    # narrow phases: descending widths below the tile's, at most MAX_PHASES in all, each
    # with a measured cost (the schedule is built from the cost model)
    return (
        cfg.tile_n in SM90_TILE_NS and cfg.tile_m in SM90_TILE_MS[cfg.tile_n]
        and len(cfg.widths) <= MAX_PHASES
        and all((cfg.tile_n, w) in sm90_ktile_table(cfg) for w in cfg.widths)
        and all(w in SM90_NARROW_WIDTHS and w < cfg.tile_m for w in cfg.narrow)
        and list(cfg.narrow) == sorted(set(cfg.narrow), reverse=True)
        and 1 <= cfg.mma_depth < cfg.a_fragments
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


# FP4 decode: the K order inside a packed 16-byte chunk
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


def sm90_token_scale_selector(group, wpt: int, chunk=None):
    """prmt selector, for a token thread of word group `group` (sm90_token_lane), that turns
    K-atom a's scale word into the scales of chunks 2a and 2a + 1 (sm90_scale_selector's
    two halves), or, given the thread's one `chunk` (sm90_token_chunks 1), into that
    chunk's scale in both halves. The thread's words lie in K-block 2q + h of chunk q
    (h = first word // 2): byte 2 (q % 2) + h of the atom's word, so one selector serves
    both atoms. Works on host ints and on kernel Int32s alike."""
    h = (wpt * group) // 2
    if chunk is None:
        return sm90_scale_selector(0, 2) + 0x1111 * h
    return 0x1111 * (2 * (chunk % 2) + h)


# Cost of a tile on the H200, measured (python tools/probes/sm90_ktile_cost.py):
# microseconds per 128-K K-tile by (tile_n, token rows), and a fixed cost per tile that takes
# in its prologue, epilogue and pipeline fill. Only ratios matter: they pick the tile_n.
# The narrower widths scale the full tile's figure by what one tile per CTA measured
# (python tools/probes/sm90_ktile_cost.py: 1.572 / 1.396 / 1.111 / 0.928 us at
# tile_n 256 and 1.028 / 0.861 / 0.763 / 0.539 at 128 for 128 / 96 / 64 / 32 tokens): the
# weight decode, the same at every width, keeps narrow tiles dear.
# (256, 96) is fit, not scaled: at the measured ratio (1.53) the model gives shape 1 the
# (96, 64) phases, which ran it 2 us slower than (64,) in an alternating A/B (kernel 77.2 /
# 76.7 against 74.7 / 75.5 us) while they ran shape 0 3 us faster; 1.66 picks both right.
SM90_KTILE_US = {
    (256, 128): 1.72, (256, 96): 1.66, (256, 64): 1.22, (256, 32): 1.02, (256, 16): 0.95,
    (128, 128): 1.01, (128, 96): 0.85, (128, 64): 0.75, (128, 32): 0.53,
    (192, 128): 1.34, (192, 96): 1.23, (192, 64): 0.95, (192, 32): 0.79,
}
# 96-row token tiles at tile_n 192 (all three WGs decode), measured one tile per CTA
# (python tools/probes/sm90_ktile_cost.py): 0.967 / 0.840 / 0.752 us per K-tile at
# 96 / 64 / 32 tokens, in this table's units x 1.058 (its (192, 128) entry against the same
# run's one-tile 1.267 us). Per MAC that is tile_n 128's rate (0.837 us per 128 x 128
# K-tile then): it decodes as many values per MAC, 1/96 + 1/192 = 2/128, though its K-loop
# has 277 SASS instructions per warp against 338.
SM90_KTILE_US_96_TOKENS = {(192, 96): 1.02, (192, 64): 0.89, (192, 32): 0.80}
# Decode: 32-token tiles at tile_n 256 (4 packed stages; 7 or 9 measured no faster), fit
# to one wave of 128 tiles of 56 K-tiles (G = 8, N = 4096, K = 7168; python
# tools/probes/sm90_sweep.py --spec-file tools/regime_specs.txt): 1-8 tokens a group ran 47.1 us
# at width 16 and 17-32 tokens 52.4 us at width 32, where the 128-token config's width-64
# phase (1.22 above) ran 61.1 and 61.0. The (256, 16) entry above is the 128-token config's
# width-16 phase (48.7 us on the same case). G = 32 x (N = 2048, K = 7168) and
# G = 64 x (2048, 2048) at 1-8 tokens: 88.8 / 55.4 us against 117.5 / 73.1.
SM90_KTILE_US_32_TOKENS = {(256, 32): 1.04, (256, 16): 0.92}
SM90_TILE_US = {256: 5.0, 192: 3.0, 128: 1.8}
# Widths the chooser offers. tile_n 192 (three consumer WGs) measured slower on all four
# shapes (kernel 145.3 / 82.2 / 44.9 / 21.0 us whole, 128.9 / 79.0 / 35.7 / 21.7 K-range,
# against the chosen 111.5 / 74.0 / 33.5 / 16.9): its K-tile costs 0.86 us per 128 weight
# rows, between 128's 1.03 and 256's 0.78, and the model cannot tell it apart reliably.
# tile_n 192 at 96 tokens (all three WGs decode tokens) measured slower on all four
# shapes too: whole 150.7 / 77.7 / 34.8 / 17.4 us, K-range 131.6 / 69.9 / 32.8 / 17.9,
# against the chosen 109.1 / 69.3 / 29.4 / 15.3 (python eval.py benchmark, two rounds alike).
SM90_TILE_N_CHOICES = (128, 256)
# Narrow phases the chooser offers, the preferred first (it wins a model tie). (96, 64)
# ran shape 0 at 116.9 against 124.9 us kernel with (64,) (tile_n 256 K-range), and it is
# faster even where no tile uses its 96 phase: shapes 2 / 3 at tile_n 128 ran 30.6 / 15.3,
# 30.6 / 15.2, 30.5 / 15.3 us against 31.2 / 15.6, 31.2 / 15.6, 31.3 / 15.5 with (64,)
# (three alternating rounds of python eval.py benchmark), with the
# same K-loop (338 against 339 SASS instructions): not explained.
SM90_NARROW_CHOICES = ((96, 64), (64,))
# The decode regime's tile (32 tokens, a width-16 phase), offered whole after the 128-token
# ones: tiles of 1-32 tokens decode and multiply 32 token columns instead of 64, and the
# small ring leaves room for 4 packed stages. Split into K ranges it ran no faster
# (47.6 / 89.8 against 47.1 / 88.8 us on the first two cases of SM90_KTILE_US_32_TOKENS).
# Three wgmma groups in flight (all that its 4 A fragments allow): a width-16 or -32 wgmma
# is short beside its latency, so one more in flight hides more of it. 42.1 / 79.7 / 50.8
# and 42.1 / 79.8 / 50.7 us on the decode cases against 43.5 / 83.2 / 52.3 and 44.5 /
# 84.1 / 53.0 with two, alternating in one process (python tools/probes/sm90_sweep.py
# --spec-file tools/regime_specs.txt --shapes 6,7,8 auto "tile_n=256,tile_m=32,narrow=16,mma_depth=3"
# twice, on b3f6497).
SM90_DECODE_TILE = {"tile_m": 32, "narrow": (16,), "mma_depth": 3}


# A split piece's extra cost: storing or adding tile_n x 128 fp32 partial sums, and the
# FIXUP's wait where both pieces run at once. Fit to the H200 (python tools/probes/sm90_sweep.py):
# with 2.5 the model picks the measured-best config on all
# four benchmark shapes.
SM90_FIXUP_US = {256: 2.5, 192: 1.8, 128: 1.2}
# Widths the chooser offers K-range (k_range_units) at. At tile_n 128 it measured slower
# on all four shapes (kernel 161.5 / 92.6 / 35.8 / 17.4 against 144.8 / 86.2 / 33.3 / 16.9
# us whole): its 2x more pieces each pay a pipeline fill and a partial.
SM90_K_RANGE_TILE_N = (256,)
# At tile_n 128 a problem of one wave (no more tiles than SMs) is offered split pieces cut
# by balanced_units instead: the long tiles' heads go to the idle and short CTAs, one split
# per long tile, every tile running at once (so the split keeps L2 sharing). Against whole
# tiles (python eval.py benchmark, two rounds each):
# shape 2 29.6 / 29.6 against 30.5 / 30.5 us; G = 2 M = (64, 128) N = 2048 K = 4096
# 20.3 / 20.3 against 29.9 / 29.7; G = 1 M = 300 N = 4096 K = 4096 26.3 / 26.2 against
# 30.5 / 30.4; G = 2 M = (64, 200) N = 4096 K = 2048 17.3 / 17.3 against 18.0 / 17.9.
# On a problem of many waves its LPT order lost the L2 sharing (shape 0 at tile_n 256:
# 160.5 us against 109.1 with k_range_units), so it is not used there.
SM90_BALANCED_TILE_N = (128,)
# balanced_units sets its split points from these: the K-tile costs tools/probes/sm90_ktile_cost.py
# measured at tile_n 128 by token width, and a unit / split cost. Shape 2
# ran the same within 0.2 us with (unit, split) = (1.0, 0.8), (0.5, 0.5), (1.5, 1.0) and
# (0.7, 1.4); the chooser's fitted table above (which ranks configs) cut its heads too
# short: 30.4-30.5 us.
SM90_BALANCE_KTILE_US = {128: 0.847, 96: 0.765, 64: 0.587, 32: 0.513}
SM90_BALANCE_UNIT_US, SM90_BALANCE_FIXUP_US = 1.0, 0.8


def sm90_ktile_table(cfg: Sm90Config) -> dict:
    """The measured K-tile costs of cfg's token tile height, by (tile_n, width)."""
    return {96: SM90_KTILE_US_96_TOKENS, 32: SM90_KTILE_US_32_TOKENS}.get(cfg.tile_m, SM90_KTILE_US)


def sm90_cost_model(cfg: Sm90Config) -> tuple[tuple[float, ...], float, float]:
    """(us per K-tile in each phase, us per unit, us per split piece)."""
    table = sm90_ktile_table(cfg)
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
    modeling all (tools/probes/schedule_equivalence.py). This is the host's cost for problem
    sizes not seen before, where a split schedule takes about a millisecond of Python
    (tools/probes/chooser_cost.py)."""
    configs = sm90_candidate_configs(sizes, num_sms)
    bounds = [sm90_makespan_lower_bound(sizes, cfg, num_sms) for cfg in configs]
    best = (math.inf, -1)  # (makespan, index): the first in list order wins a tie
    for i in sorted(range(len(configs)), key=bounds.__getitem__):
        if bounds[i] > best[0] * (1 + SM90_BOUND_MARGIN):
            break  # this bound and every later one: worse than the best
        if sm90_may_beat(sizes, configs[i], num_sms, best[0]):
            best = min(best, (sm90_makespan_us(sizes, configs[i], num_sms), i))
    return configs[best[1]]


@functools.cache
def sm90_m_quantum() -> int:
    """The gcd of every tile height and phase width the chooser offers (16): M rounded up
    to a multiple of it keeps each group's tile count and last tile's phase under every
    offered config (size_class)."""
    probe = ((1, 128, 256, 1),)  # any problem: the split configs repeat the whole ones' widths
    return math.gcd(*(w for cfg in sm90_offered_configs(probe, 1) for w in cfg.widths))


def sm90_size_class(sizes: Sequence[Sequence[int]]) -> tuple:
    """The class of a Hopper problem's sizes (size_class at sm90_m_quantum): choose_sm90_config
    and sm90_schedule give every member the config and schedule they give the class, so a
    mixture-of-experts step whose token counts change within their multiples of 16 reuses
    the last step's (GroupedGemmRunner.plan)."""
    return size_class(sizes, sm90_m_quantum())


def sm90_offered_configs(sizes: Sequence[Sequence[int]], num_sms: int) -> list[Sm90Config]:
    """Every config the chooser offers a problem, in its tie-break order: whole tiles at each
    width and narrow choice, the decode tile (SM90_DECODE_TILE), then the split ones
    (sm90_offers_split)."""
    configs = [make_sm90_config(n, narrow=w) for n in SM90_TILE_N_CHOICES for w in SM90_NARROW_CHOICES]
    configs.append(make_sm90_config(256, **SM90_DECODE_TILE))
    configs += [cfg for n in SM90_TILE_N_CHOICES for w in SM90_NARROW_CHOICES
                if sm90_offers_split(sizes, cfg := make_sm90_config(n, narrow=w, split_k=True), num_sms)]
    return configs


def sm90_candidate_configs(sizes: Sequence[Sequence[int]], num_sms: int) -> list[Sm90Config]:
    """The configs choose_sm90_config picks from: sm90_offered_configs, less any that would
    model the same as an earlier one (sm90_phase_signature: when no tile falls in the phase
    where two narrow choices differ). It could only tie, and a tie goes to the earlier one."""
    seen, distinct = set(), []
    for cfg in sm90_offered_configs(sizes, num_sms):
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
