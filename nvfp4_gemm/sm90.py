"""Hopper (sm_90a): Sm90Fp4GroupedGemm, wgmma with the FP4 decode fused into the main loop,
and its compilation."""

from __future__ import annotations

from typing import Any, NamedTuple

from .binding import KernelArg, bind_launch, fake_ptr, gmem_arg, int_arg
from .common import (
    Int32,
    Int64,
    LayoutEnum,
    SmemAllocator,
    cute,
    cutlass,
    pipeline,
    sm90_utils,
)
from .formats import SF_ATOM_BYTES
from .kernel_runner import CompiledKernels, KernelBackend
from .ptx import (
    bulk_load,
    bulk_wait_read,
    decode_e2m1_word,
    flag_release,
    ld_acquire_u32,
    ld_global_relaxed_v4_f32,
    ld_shared_u32,
    ld_shared_v2,
    ld_shared_v4,
    pack_acc_f16x2,
    prefetch_l1,
    prefetch_lines,
    scale_pair,
    scale_single,
    st_global_b16,
    st_global_v4_b32,
    st_global_v4_f32,
    st_relaxed_zero,
    st_shared_words,
    stmatrix_x4_trans,
    tensormap_acquire,
    tma_load_2d,
    tma_store_2d,
)
from .schedule import RANGE_FIELDS, UNIT_FIELDS, UNIT_FIXUP, UNIT_PARTIAL
from .sm90_config import (
    SM90_CONSUMERS_BARRIER,
    SM90_DECODE_K,
    SM90_DESC_BYTES,
    SM90_FIXUP_BATCH,
    SM90_NUM_DESC,
    SM90_PACKED_K_TILE,
    SM90_WEIGHT_ROWS_PER_BLOCK,
    Sm90Config,
    choose_sm90_config,
    sm90_c_box_offset,
    sm90_c_stage_offset,
    sm90_config_is_legal,
    sm90_fragment_index,
    sm90_is_valid_problem,
    sm90_publish_group,
    sm90_register_split,
    sm90_scale_selector,
    sm90_scale_word_offset,
    sm90_schedule,
    sm90_size_class,
    sm90_token_chunks,
    sm90_token_decoders,
    sm90_token_lane,
    sm90_token_scale_atom,
    sm90_token_scale_row,
    sm90_token_scale_selector,
    sm90_token_split,
    sm90_weight_lane,
)
from .watchdog import (
    BLOCK_BYTES,
    LaunchWatch,
    WaitGuard,
    WatchSettings,
    barrier_any,
    fake_watch_args,
    injected_fault,
)


def sw64(row, chunk):
    """Byte offset of 16-byte chunk `chunk` of packed row `row` under TMA's 64-byte swizzle
    (Swizzle<2,4,3>: chunk ^= (row / 2) % 4). With it, 8 lanes reading one chunk column of 8
    consecutive rows, or 2 rows x 4 chunks, touch 8 distinct 16-byte bank groups."""
    return row * 64 + ((chunk ^ ((row // 2) % 4)) * 16)


class TokenShare(NamedTuple):
    """A consumer thread's share of a phase's token decode (Sm90Fp4GroupedGemm.token_share):
    words wpt * group .. + wpt - 1 of chunks q0 .. q0 + chunks - 1 of token row `row`, the
    row's place `srow` in the stage's scale slab, and `live` (None: every thread stores;
    else whether this one does). wpt and chunks are static; q0 is static 0 where chunks
    is 4."""

    row: Any
    group: Any
    wpt: int
    live: Any
    srow: Any
    q0: Any
    chunks: int


class Sm90Fp4GroupedGemm:
    """Swap-AB NVFP4 grouped GEMM, persistent over the host's static schedule.

    Hopper has no FP4 tensor-core format, so the kernel decodes: E2M1 x E4M3 values are
    exact in fp16, and an fp16 wgmma with fp32 accumulation gives the reference's sums.

    How it works:
      1. init_tensormaps (one CTA per group) writes each group's TMA descriptors (tokens,
         weights, C), once per set of pointers.
      2. Each CTA of the persistent grid reads its list of work units (whole tiles, or
         split-K pieces) from the host's schedule, phase by phase of token width.
      3. The producer warp TMA-loads packed tokens and weights and bulk-copies their scale
         slabs into a stage ring.
      4. The consumer warpgroups decode the weights straight into wgmma's A registers and
         the tokens into an fp16 smem ring (wgmma's B), one K-tile ahead, and issue the
         wgmmas (fp32 accumulators).
      5. The epilogue scales the accumulators back (SM90_ACC_SCALE), converts to fp16 and
         stores C by TMA from a staging box (the CTA's last tile with 16-byte stores); a
         split tile's PARTIAL stores fp32 sums that its FIXUP adds.

    Constraints: K a multiple of 256, L == 1, M and N >= 1 per group (sm90_is_valid_problem);
    A / B / scales in the dense layout, 16-byte aligned (a C that is not is stored element
    by element); the config must pass sm90_config_is_legal (tile shape, shared memory,
    registers).

    Follows CUTLASS's CuTe DSL example hopper/dense_gemm_persistent.py
    (https://github.com/NVIDIA/cutlass/blob/main/examples/python/CuTeDSL/hopper/dense_gemm_persistent.py)
    for the warp-specialized TMA / wgmma pipeline, with the operands decoded in the main
    loop (the register-sourced wgmma form) instead of read from smem as they are.

    Weights (the large operand) are wgmma's A, decoded straight into its registers (the
    RS form), never to smem. Tokens are wgmma's B: the same consumer threads decode each
    packed K-tile of them into an fp16 smem buffer of a 3-deep ring, one K-tile ahead of
    the wgmmas that read it. A tile is tile_n weight rows (consumer WGs x blocks m64
    blocks: 2 x 1, 2 x 2, or 3 x 1 at tile_n 192) by tile_m tokens (128, 96 at tile_n
    192, or 32 at tile_n 256: the decode tile, whose 32 or 16 rows both WGs decode one
    word of 2 or 1 chunks per thread); at tile_n 256 every decoded token feeds 256 weight
    rows, half the token decode per MAC of a 128-row tile.

    consumer warps (0..7, or 0..11 with 3 WGs), per K-tile kt (its weights in registers):
        4 x blocks wgmma groups (block g % blocks, k16-steps 2j, 2j + 1 of word j = g //
        blocks): wait_group(mma_depth) -> decode the weights into the free 8-register A
        fragment (g % a_fragments)
        -> (first group: wait for every WG's arrival on kt's tokens) -> 2 wgmmas
        after the first group: wait stage kt+1, LDS own words of its token row's 4
        chunks (2 or 1 at 32 and 16 rows), decode and store the first word into the ring,
        16 bytes per P index (8 or 4; at 128 tokens the first two WGs only: a third stores
        no tokens; at 96 tokens all three, one word each: sm90_token_decoders); after word
        1's first group the second word (2 per thread at 96 and 128 rows, 1 at 64 and
        fewer); one group after the
        last store fence.proxy.async and arrive on the ring's full barrier of kt+1 (every
        consumer thread)
        after the last group (with weights_early after the first group's wait for stage
        kt+1, into registers of their own): LDS own weight rows of stage kt+1, release
        that stage
      per tile, after its last K-tile: each WG stmatrix-stores its fp16 outputs into its
        own staging box and one thread TMA-stores the box (epilogue), which drains while
        the next tile starts; at two blocks per WG, block 0 goes to a free token-ring
        buffer instead (ring_staging). The CTA's last tile has no next one to overlap: its
        WGs copy their boxes to C with 16-byte stores (store_box_vectors), so that the
        CTA leaves its SM without waiting for a TMA unit's read of shared memory
    the producer warpgroup's first warp (the others only give back registers): TMA token
    and weight bytes, bulk-copy scale slabs, into the stage ring.

    No empty barrier guards the token ring: buffer (kt+1) % 3 was last read by the wgmmas
    of kt-2. A WG arrives on kt's full barrier only after the wait_group of a group
    g >= mma_depth of kt-1 (which retires every group before group g - mma_depth of kt-1),
    when all its wgmmas of kt-2 are done; every thread waits on kt's full barrier before it
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

    # every tile's C by 16-byte stores predicated on its group's M, never by the TMA: the
    # masked op's subclass (sm90_masked.py), whose C descriptors hold max_m rows
    DIRECT_STORES = False

    def __init__(self, config: Sm90Config, watch: WatchSettings = WatchSettings()):
        assert sm90_config_is_legal(config), config
        self.cfg = config
        self.watch = watch
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

    @property
    def waiting_warps(self) -> int:
        """The warps that wait on barriers (WaitGuard): the consumers and the TMA warp (the
        producer warpgroup's other warps leave at once)."""
        return self.cfg.consumer_threads // 32 + 1

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
            sm90_utils.get_smem_layout_atom(LayoutEnum.ROW_MAJOR, cutlass.Float16, 64),
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
            cute.nvgpu.OperandMajorMode.K,
            cute.nvgpu.OperandMajorMode.K,
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
        record_ptr: cute.Pointer,
        claim_ptr: cute.Pointer,
        launch_tag: Int32,
        timeout_ns: Int64,
    ):
        self.launch_gemm((sizes_ptr, ptrs_ptr, ranges_ptr, units_ptr, tmaps_ptr, partials_ptr,
                          flags_ptr, num_ctas, unit_stride, num_groups, record_ptr, claim_ptr,
                          launch_tag, timeout_ns), {})

    def launch_gemm(self, args: tuple, launch_options: dict):
        """The body of __call__ (traced inside a jit function): the shared storage and the
        kernel's launch with __call__'s arguments, plus launch_options for .launch (a
        subclass's own launch settings; none here)."""
        (sizes_ptr, ptrs_ptr, ranges_ptr, units_ptr, tmaps_ptr, partials_ptr, flags_ptr, num_ctas,
         unit_stride, num_groups, record_ptr, claim_ptr, launch_tag, timeout_ns) = args
        tiled_mma = self._tiled_mma(self.tile_m)
        sT_layout = self._token_layout()  # tokens: wgmma B

        # each pipeline's full and empty barriers, then the watchdog's stage numbers; the
        # fields as objects (this module's annotations are strings, which cute.struct
        # resolves only inside a jit function's own body)
        fields = {
            "mbar": cute.struct.MemRange[cutlass.Int64, self.stages * 4],
            "tbar": cute.struct.MemRange[cutlass.Int64, self.token_buffers * 4],
            "watch": cute.struct.MemRange[cutlass.Int64, BLOCK_BYTES // 8],  # WaitGuard's
            "sDecT": cute.struct.Align[cute.struct.MemRange[cutlass.Float16, cute.cosize(sT_layout)], 1024],
            "sC": cute.struct.Align[cute.struct.MemRange[cutlass.Uint8, self.wgs * self.cfg.c_stage_bytes], 1024],
            "sPkA": cute.struct.Align[cute.struct.MemRange[cutlass.Uint8, self.stages * self.a_stage_bytes], 1024],
            "sPkB": cute.struct.Align[cute.struct.MemRange[cutlass.Uint8, self.stages * self.b_stage_bytes], 1024],
            "sSFA": cute.struct.Align[cute.struct.MemRange[cutlass.Uint8, self.stages * self.sfa_stage_bytes], 128],
            "sSFB": cute.struct.Align[cute.struct.MemRange[cutlass.Uint8, self.stages * self.sfb_stage_bytes], 128],
        }
        SharedStorage = cute.struct(type("SharedStorage", (), {"__annotations__": fields}))
        self.shared_storage = SharedStorage
        self.kernel(
            tiled_mma, sT_layout, sizes_ptr, ptrs_ptr, ranges_ptr, units_ptr, tmaps_ptr,
            partials_ptr, flags_ptr, unit_stride, num_groups,
            (record_ptr, claim_ptr, launch_tag, timeout_ns),
        ).launch(
            grid=[num_ctas, 1, 1],
            block=[self.cfg.threads, 1, 1],
            min_blocks_per_mp=1,
            use_pdl=self.cfg.pdl,
            **launch_options,
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
        watch_args: tuple,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp_idx == 0:
            self.prefetch_schedule(sizes_ptr, ptrs_ptr, ranges_ptr, units_ptr, tmaps_ptr, unit_stride, num_groups)

        smem = SmemAllocator()
        storage = smem.allocate(self.shared_storage)
        # the watchdog's block, before the barrier that the pipelines' creation ends with
        guard = WaitGuard(self.watch, storage.watch.data_ptr().toint(), self.waiting_warps, (
            (("sm90.producer.empty", "sm90.producer.tail", "sm90.consumer.full", "sm90.producer.drain"),
             storage.mbar.data_ptr(),
             self.stages),
            (("sm90.consumer.tokens",), storage.tbar.data_ptr(), self.token_buffers),
        ))
        guard.start(tidx == 0, watch_args)
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
            cute.arch.setmaxregister_decrease(producer_regs)
            if warp_idx == self.producer_warp:
                self.producer(guard, storage, ab_pipeline, mSizes, mPtrs, mUnits, tmaps_ptr, span)
        else:
            cute.arch.setmaxregister_increase(consumer_regs)
            self.consumer(guard, tidx, tiled_mma, sT_layout, storage, ab_pipeline,
                          tok_pipeline, mSizes, mPtrs, mUnits, tmaps_ptr, span, split)

    @cute.jit
    def prefetch_schedule(self, sizes_ptr, ptrs_ptr, ranges_ptr, units_ptr, tmaps_ptr, unit_stride, num_groups):
        """Warp 0 pulls in what the start of a CTA reads, before the grid dependency wait.

        Into L1, the host-written tables: this CTA's ranges row, its first unit (at row
        bidx * unit_stride) and every group's sizes and pointers. Without it they are three
        dependent global loads (ranges -> unit -> sizes and pointers) before the first TMA
        issue, about 0.4 us each on the H200 (tools/probes/sm90_trace.py timeline). Prefetched
        at entry, while the barriers are initialized, they moved the first TMA issue from
        1.97 to 1.50-1.60 us (the unit's read still trails the ranges row by ~0.5 us). The
        tables are written only by host copies ordered before the launch, never by a kernel,
        so an L1 copy cannot be stale.

        Into L2 only, every group's descriptors: after the harness's L2 flush a TMA's first
        descriptor fetch is a DRAM round trip. The init kernel writes them, and it may be
        the kernel this grid overlaps, but an L2 prefetch cannot be stale (ptx.prefetch_l2);
        the TMA reads them after the wait and the proxy acquire. Lanes share the lines, so
        64 groups cost each lane 6 prefetches."""
        bidx, _, _ = cute.arch.block_idx()
        lane = cute.arch.lane_idx()
        if lane == 0:
            prefetch_l1(ranges_ptr.toint() + Int64(bidx) * (RANGE_FIELDS * 4))
            prefetch_l1(units_ptr.toint() + Int64(bidx * unit_stride) * (UNIT_FIELDS * 4))
        prefetch_lines(sizes_ptr.toint(), num_groups * (4 * 4), lane, False)
        prefetch_lines(ptrs_ptr.toint(), num_groups * (5 * 8), lane, False)
        prefetch_lines(tmaps_ptr.toint(), num_groups * (SM90_NUM_DESC * SM90_DESC_BYTES), lane, True)

    @cute.jit
    def release_stage(self, ab_pipeline, state, fault=None):
        """This thread's reads of the packed stage are done (their values are in registers):
        arrive on the stage's empty barrier. Every thread arrives, not one lane per warp
        after a warp sync, so each read is ordered before the producer's refill by the
        thread's own arrive (compute-sanitizer's racecheck does not credit bar.warp.sync
        and reported the lane-0 form as WAR hazards). fault (injected builds only): nonzero
        leaves the arrive out."""
        if cutlass.const_expr(fault is None):
            cute.arch.mbarrier_arrive(ab_pipeline.sync_object_empty.get_barrier(state.index))
        elif fault == 0:
            cute.arch.mbarrier_arrive(ab_pipeline.sync_object_empty.get_barrier(state.index))

    @cute.jit
    def release_fault(self, guard, u, kb, k_tiles, ends):
        """The injected fault of a consumer's release of K-tile kb of unit u (ends: the CTA's
        first and last unit): the consumers leave out their releases of the first one
        (sm90.producer.empty) or of the last one (sm90.producer.tail); None in other builds.
        Every consumer thread alike: a fault in one thread only would also make its warp's
        control flow diverge, which is not what a hang is."""
        fault = None
        if cutlass.const_expr(guard.injects("sm90.producer.empty")):
            fault = injected_fault(guard, "sm90.producer.empty", (u == ends[0]) & (kb == 0))
        if cutlass.const_expr(guard.injects("sm90.producer.tail")):
            fault = injected_fault(guard, "sm90.producer.tail", (u == ends[1]) & (kb == k_tiles - 1))
        return fault

    @cute.jit
    def acquire_stage(self, guard, ab_pipeline, state, u, kb, first):
        """Waits until stage `state` is empty, then arms its full barrier with the stage's
        byte count. Returns whether to issue the stage's loads: always without the watchdog;
        with it, only while the wait completed and the CTA has not given up (after that no
        load is issued). first (injected sm90.consumer.full builds): the CTA's first stage,
        which then expects 16 bytes more than its loads bring."""
        ok = Int32(1)
        if cutlass.const_expr(not guard.enabled):
            ab_pipeline.producer_acquire(state)
        else:
            ok = guard.wait(ab_pipeline.sync_object_empty.get_barrier(state.index), state.phase,
                            "sm90.producer.empty", u, kb, check_abort=True)
            tx = Int32(self.tx_bytes)
            extra = injected_fault(guard, "sm90.consumer.full", first)
            if cutlass.const_expr(extra is not None):
                tx = tx + 16 * extra
            if ok != 0:
                with cute.arch.elect_one():
                    cute.arch.mbarrier_arrive_and_expect_tx(ab_pipeline.producer_get_barrier(state), tx)
        return ok

    @cute.jit
    def producer_tail(self, guard, ab_pipeline, state, last_u, ok, issued):
        """Keeps the CTA until the consumers released every stage the producer filled (their
        arrives must not land on a barrier of a CTA that left): with the watchdog only while
        no wait of the producer gave up (ok), since the consumers of a CTA that gave up
        release what they release on their way out of their loops. Then, with the watchdog
        on every path, the drain: the loads of the last stages issued have landed (a CTA
        must not leave its SM with a TMA write into its shared memory in flight, and with
        programmatic dependent launch the next grid's CTA may own that memory next). Issue n
        of the CTA's (0-based) went to stage n % stages, the (n // stages)-th fill of it, so
        its full barrier's phase of parity (n // stages) % 2 completes when its loads land.
        A drain is not cut short by the abort flag; where it expires too, the barrier is
        short of bytes that no load brings (sm90.consumer.full's fault)."""
        if cutlass.const_expr(not guard.enabled):
            ab_pipeline.producer_tail(state)
        else:
            for i in cutlass.range_constexpr(self.stages):
                if ok != 0:
                    ok = self.wait(guard, ab_pipeline.sync_object_empty.get_barrier(state.index), state.phase,
                                   "sm90.producer.tail", last_u, Int32(i))
                state.advance()
            for i in cutlass.range_constexpr(self.stages):
                n = issued - 1 - i
                if n >= 0:
                    self.drain(guard, ab_pipeline.sync_object_full.get_barrier(n % self.stages),
                               (n // self.stages) % 2, "sm90.producer.drain", last_u, n)

    def wait(self, guard, *args, **kwargs):
        """guard.wait (WaitGuard), called through the kernel: the DSL carries through a
        dynamic loop or branch every object whose method its body calls."""
        return guard.wait(*args, **kwargs)

    def drain(self, guard, *args, **kwargs):
        """guard.drain, called through the kernel as wait is."""
        guard.drain(*args, **kwargs)

    def wait_run_out(self, guard, *args, **kwargs):
        """guard.wait_run_out, called through the kernel as wait is."""
        guard.wait_run_out(*args, **kwargs)

    def aborted(self, guard):
        """guard.aborted, called through the kernel as wait is."""
        return guard.aborted()

    @cute.jit
    def producer(self, guard, storage, ab_pipeline, mSizes, mPtrs, mUnits, tmaps_ptr, span):
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
        # abort protocol: ok turns 0 at the first wait that gives up, and no load issues
        # after it; issued counts the stages whose loads went out (the drain's)
        ok = Int32(1)
        issued = Int32(0)
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
                if cutlass.const_expr(not guard.enabled):
                    self.acquire_stage(guard, ab_pipeline, state, u, kt - mUnits[3, u], False)
                elif ok != 0:
                    ok = self.acquire_stage(guard, ab_pipeline, state, u, kt - mUnits[3, u],
                                            (u == span[0]) & (kt == mUnits[3, u]))
                issue = is_leader
                if cutlass.const_expr(guard.enabled):
                    issue = is_leader & ok
                mbar = ab_pipeline.producer_get_barrier(state).toint()
                s = state.index
                kb = kt * self.row_bytes
                tma_load_2d(sA0 + s * self.a_stage_bytes, desc_a, kb, row_a, mbar, issue)
                tma_load_2d(sB0 + s * self.b_stage_bytes, desc_b, kb, row_b, mbar, issue)
                koff = Int64(kt) * (2 * SF_ATOM_BYTES)
                if cutlass.const_expr(self.cfg.sfa_blocks > 1):
                    for b in cutlass.range_constexpr(self.cfg.sfa_blocks):
                        bulk_load(sSFA0 + s * self.sfa_stage_bytes + b * 2 * SF_ATOM_BYTES,
                                  sfa_src[b] + koff, 2 * SF_ATOM_BYTES, mbar, issue)
                else:
                    bulk_load(sSFA0 + s * self.sfa_stage_bytes, sfa_src + koff, self.sfa_stage_bytes,
                              mbar, issue)
                for b in cutlass.range_constexpr(self.cfg.sf_blocks):
                    bulk_load(sSFB0 + s * self.sfb_stage_bytes + b * 2 * SF_ATOM_BYTES,
                              sfb_src[b] + koff, 2 * SF_ATOM_BYTES, mbar, issue)
                ab_pipeline.producer_commit(state)
                issued = issued + ok
                state.advance()
        self.producer_tail(guard, ab_pipeline, state, span[-1] - 1, ok, issued)
        guard.leave(lane == 0)

    # ---------------- consumers ----------------
    @cute.jit
    def consumer(self, guard, tidx, tiled_mma, sT_layout, storage, ab_pipeline,
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
                states = self.consume_tile(guard, u, rows, tidx, mma, *operands, storage,
                                           ab_pipeline, tok_pipeline, states, mSizes, mPtrs,
                                           mUnits, tmaps_ptr, split, (span[0], span[-1] - 1))
        # the staging boxes stay allocated until their last TMA stores have read them
        bulk_wait_read(Int32(tidx % 128 == 0))
        guard.leave(tidx % 32 == 0)

    @cute.jit
    def mma_operands(self, tiled_mma, sT, tidx, tokens: int):
        """This thread's wgmma operands for tiles of `tokens` (static) token columns."""
        thr_mma = tiled_mma.get_slice(tidx)
        # (MMA, MMA_N, MMA_K, halves x buffers): tokens from smem
        tCrT = tiled_mma.make_fragment_B(thr_mma.partition_B(sT))
        # (MMA, MMA_M = 1, MMA_K = 2) fp16 weight fragments of one wgmma group (one m64
        # block, 2 k16-steps), a_fragments of them in turn, written as u32 pairs
        # (sm90_fragment_index)
        a_shape = thr_mma.partition_shape_A((self.wgs * SM90_WEIGHT_ROWS_PER_BLOCK, SM90_PACKED_K_TILE // 4))
        tCrW = [tiled_mma.make_fragment_A(a_shape) for _ in range(self.cfg.a_fragments)]
        tCrW32 = [cute.recast_tensor(f, cutlass.Uint32) for f in tCrW]
        # one accumulator per m64 block: block b covers tile rows 64 wgs b .. 64 wgs (b + 1) - 1
        cC = cute.make_identity_tensor((self.wgs * SM90_WEIGHT_ROWS_PER_BLOCK, tokens))
        tCcC = thr_mma.partition_C(cC)  # (MMA, 1, 1) -> (weight row in the block, token)
        acc = [cute.make_rmem_tensor(tCcC.shape, cutlass.Float32) for _ in range(self.blocks)]
        return tCrT, tCrW, tCrW32, tCcC, acc

    @cute.jit
    def consume_tile(self, guard, u, rows: int, tidx, tiled_mma, tCrT, tCrW, tCrW32, tCcC, acc,
                     storage, ab_pipeline, tok_pipeline, states, mSizes, mPtrs, mUnits, tmaps_ptr,
                     split, ends):
        """The K-tiles of work unit u with `rows` (static) decoded token rows, then its
        epilogue (or, split-K, its partial sums); ends: the CTA's first and last unit, whose C
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
        where = (guard, u, k_tiles, ends)  # for the watchdog's waits and injected faults
        # abort protocol: the consumers' waits run their loops out (WaitGuard.wait_run_out:
        # named barriers, warpgroup-wide wgmmas); a give-up leaves the CTA's abort flag set,
        # on which the tile's stores are decided per barrier group (store_tile, store_partial)
        packed, scales = self.token_chunks(storage, ab_pipeline, ahead, tok, where, Int32(-1))
        self.store_token_words(storage, tok_w, tok, packed, scales, (0, 1))
        self.publish_tokens(tok_pipeline, tok_w,
                            injected_fault(guard, "sm90.consumer.tokens", u == ends[0]))
        tok_w.advance()
        wm, sc = self.load_weights(storage, ahead, wgt)
        self.release_stage(ab_pipeline, ahead, self.release_fault(guard, u, Int32(0), k_tiles, ends))
        ahead.advance()
        for _kt in cutlass.range(k_tiles - 1, unroll=1):
            ahead, tok_w, tok_r, wm, sc = self.k_tile(
                True, tiled_mma, tCrT, tCrW, tCrW32, acc, storage, ab_pipeline, tok_pipeline,
                ahead, tok_w, tok_r, tok, wgt, wm, sc, where, _kt,
            )
        ahead, tok_w, tok_r, wm, sc = self.k_tile(
            False, tiled_mma, tCrT, tCrW, tCrW32, acc, storage, ab_pipeline, tok_pipeline,
            ahead, tok_w, tok_r, tok, wgt, wm, sc, where, k_tiles - 1,
        )
        cute.nvgpu.warpgroup.wait_group(0)
        last = u == ends[1]
        if cutlass.const_expr(self.cfg.split_k):
            # split-K: both sides of a slot use the same thread -> accumulator map
            role = mUnits[5, u]
            if role == UNIT_PARTIAL:
                self.store_partial(acc, split, mUnits[6, u], tidx, rows, injected_fault(guard, "sm90.fixup.flag", True),
                                   guard)
            elif role == UNIT_FIXUP:
                self.store_tile(acc, storage, tidx, tmaps_ptr, mSizes, mPtrs, g, m, row_a, tn, rows,
                                tok_w, last, guard, (split, mUnits[7, u], u))
            else:
                self.store_tile(acc, storage, tidx, tmaps_ptr, mSizes, mPtrs, g, m, row_a, tn, rows, tok_w, last,
                                guard)
        else:
            self.store_tile(acc, storage, tidx, tmaps_ptr, mSizes, mPtrs, g, m, row_a, tn, rows, tok_w, last, guard)
        return ahead, tok_w, tok_r

    @cute.jit
    def store_tile(self, acc, storage, tidx, tmaps_ptr, mSizes, mPtrs, g, m, row_a, tn, rows: int,
                   tok_w, last, guard, fixup=None):
        """The tile's C through the epilogue; a FIXUP (fixup = (split, slot, unit)) first
        waits for the previous piece's slot and adds it on the way. With ring_staging,
        block 0 of each WG is staged in ring buffer tok_w + 2 (free once every consumer
        thread is past its wait_group(0): the barrier) and block 1 in the WG's own box, so
        that block 1 never waits for block 0's store to read the box. With the watchdog the
        barrier also decides, for all the threads it holds alike, whether anything is
        stored: not where the CTA gave up (any wait of theirs that gave up left its abort
        flag set) or the FIXUP's flag wait gave up."""
        desc_c = tmaps_ptr.toint() + Int64(g) * (SM90_NUM_DESC * SM90_DESC_BYTES) + 2 * SM90_DESC_BYTES
        col = tn * self.tile_n + SM90_WEIGHT_ROWS_PER_BLOCK * (tidx // 128)
        base, seen = None, Int32(1)
        if cutlass.const_expr(fixup is not None):
            split, slot, u = fixup
            base, seen = self.wait_partial(split, slot, tidx, guard, u)
        # the boxes are free: every earlier store of this WG has read its box (the wait,
        # which also orders the element path's reads), and with ring_staging every
        # consumer thread is past its wait_group(0) (the barrier over all of them)
        c_addr, n = mPtrs[4, g], mSizes[1, g]
        lead = Int32(tidx % 128 == 0)
        bulk_wait_read(lead)
        own_box = storage.sC.data_ptr().toint() + (tidx // 128) * self.cfg.c_stage_bytes
        boxes = [own_box]
        bar_id, bar_threads = 1 + tidx // 128, 128
        if cutlass.const_expr(self.ring_staging):
            bar_id, bar_threads = SM90_CONSUMERS_BARRIER, self.cfg.consumer_threads
            ring = storage.sDecT.data_ptr().toint() + ((tok_w.index + 2) % self.token_buffers) * self.tbuf_bytes
            boxes = [ring + (tidx // 128) * self.cfg.c_stage_bytes, own_box]
        live = None
        if cutlass.const_expr(not guard.enabled):
            cute.arch.barrier(barrier_id=bar_id, number_of_threads=bar_threads)
        else:
            # stores nothing where it stops: every store of the epilogue is predicated on
            # `live` too (a branch around the epilogue instead cost the tile_n 256 split-K
            # K-loop its uniform registers: 573 SASS instructions a K-tile against 504,
            # tests/test_sm90_compile.py)
            live = Int32(barrier_any(bar_id, bar_threads, (seen == 0) | (self.aborted(guard) != 0)) == 0)
        self.store_blocks(acc, boxes, tidx, desc_c, c_addr, m, n, row_a, col, rows, last, base, live)
        if cutlass.const_expr(self.ring_staging):
            # block 0's store has read the ring box (it did so while block 1 was staged)
            bulk_wait_read(lead, pending=1)

    @cute.jit
    def store_blocks(self, acc, boxes, tidx, desc_c, c_addr, m, n, row_a, col, rows: int, last, base, live):
        """Each m64 block's accumulators through the epilogue (base: a FIXUP's slot; live:
        the watchdog's decision to store, None without it)."""
        for b in cutlass.range_constexpr(self.blocks):
            self.epilogue(acc[b], boxes[b], tidx, desc_c, c_addr, m, n, row_a,
                          col + self.block_rows * b, rows, last,
                          None if base is None else base + b * self.partial_block_bytes, live)

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
    def wait_partial(self, split, slot, tidx, guard, u):
        """Wait for slot `slot`'s flag (this WG's half), reset it for the next call (nothing
        else reads it in this grid; the next grid does only after griddepcontrol.wait), and
        return this thread's address in the slot and whether the flag was seen (1 but in
        the WG's first thread where its wait gave up: then the flag is left alone, the
        slot is not read, and store_tile's barrier tells the WG). With the watchdog, a
        thread whose CTA gave up neither waits for nor resets the flag."""
        seen = Int32(1)
        if tidx % 128 == 0:
            flag = self.flag_addr(split, slot, tidx)
            if cutlass.const_expr(not guard.enabled):
                self.wait_flag(guard, flag, slot, u)
                st_relaxed_zero(flag)
            else:
                if self.aborted(guard) == 0:
                    seen = self.wait_flag(guard, flag, slot, u)
                    if seen != 0:
                        st_relaxed_zero(flag)
        cute.arch.barrier(barrier_id=1 + tidx // 128, number_of_threads=128)
        return self.partial_addr(split, slot, tidx), seen

    @cute.jit
    def wait_flag(self, guard, flag, slot, u):
        """Until the PARTIAL's flag is set (acquire); with the watchdog a bounded wait, which
        returns 0 where it gave up (else 1)."""
        seen = Int32(1)
        if cutlass.const_expr(guard.enabled):
            seen = guard.wait_flag(flag, "sm90.fixup.flag", slot, u, Int32(0))
        else:
            value = ld_acquire_u32(flag)
            while value == 0:
                value = ld_acquire_u32(flag)
        return seen

    @cute.jit
    def store_partial(self, acc, split, slot, tidx, rows: int, fault, guard):
        """PARTIAL: this WG's fp32 accumulators -> slot `slot`, then its flag, once all 128
        threads' stores are issued (the barrier, then the release in flag_release).
        (A tile has one PARTIAL: a middle piece that waits, adds and stores, compiled into
        this branch, cost the tile_n 256 K-loop its uniform descriptor registers, 567 ->
        635 SASS instructions.) With the watchdog the WG first decides together (a barrier
        over its threads) to store nothing and leave the flag unset where the CTA gave up;
        its FIXUP then gives up too."""
        if cutlass.const_expr(not guard.enabled):
            self.store_partial_slot(acc, split, slot, tidx, rows, fault)
        elif barrier_any(1 + tidx // 128, 128, self.aborted(guard) != 0) == 0:
            self.store_partial_slot(acc, split, slot, tidx, rows, fault)

    @cute.jit
    def store_partial_slot(self, acc, split, slot, tidx, rows: int, fault):
        dst = self.partial_addr(split, slot, tidx)
        for b in cutlass.range_constexpr(self.blocks):
            for i in cutlass.range_constexpr(rows // 8):
                v = [acc[b][4 * i + e] for e in range(4)]
                st_global_v4_f32(dst + b * self.partial_block_bytes + i * 2048, *v)
        cute.arch.barrier(barrier_id=1 + tidx // 128, number_of_threads=128)
        if cutlass.const_expr(fault is None):
            if tidx % 128 == 0:
                flag_release(self.flag_addr(split, slot, tidx))
        elif (tidx % 128 == 0) & (fault == 0):
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
        """This thread's share of tile tm's token decode (the first sm90_token_decoders
        consumer threads at `rows`, static): words wpt * group .. + wpt - 1 of chunks q0 ..
        q0 + chunks - 1 of token row trow (sm90_token_lane; all 4 chunks but at 32 and 16
        rows over 256 threads). Word w of a chunk q gives P[4w .. 4w + 3]; P[4w + tt] goes to
        K-half w // 2 of the ring buffer, 16-byte chunk (trow % 8) ^ (4 (w % 2) + tt) under
        the SW128 XOR (sm90_token_slot), 4 bytes at 4q: the thread's chunks make one store
        of 16 (8, 4) bytes. Every thread decodes and stores, also rows past the group's M
        (TMA zero-filled) or past a narrow phase's width at 128 / 96 / 64 rows (never read
        at its wgmma N): a warp-uniform skip of those cost ptxas a branch around the stores
        that it paid for on every K-tile (K-loop 534 -> 504 SASS instructions at tile_n 256
        K-range without it, 353 -> 348 at 128). `live` is None (static: store) where every
        consumer WG decodes; a third of three at 128 tokens reads the chunks of the first
        one and never stores. srow is the row's place in the stage's scale slab: a 96-row
        tile tm starts (96 tm) % 128 rows into its first atom."""
        decoders = sm90_token_decoders(self.cfg, rows)
        _, wpt = sm90_token_split(rows, decoders)
        chunks = sm90_token_chunks(rows, decoders)
        dtid = tidx % decoders
        trow, group, cgroup = sm90_token_lane(dtid, rows, decoders)
        live = None
        if cutlass.const_expr(self.cfg.consumer_threads > decoders):
            live = tidx < decoders
        return TokenShare(trow, group, wpt, live, sm90_token_scale_row(trow, tm, self.tile_m), cgroup * chunks, chunks)

    @cute.jit
    def token_chunks(self, storage, ab_pipeline, ahead, tok, where, kb):
        """Waits for stage `ahead` (K-tile kb + 1 of the unit: kb is the K-loop's counter, which
        the watchdog's note takes as it is; where: the watchdog's WaitGuard, the unit, its
        K-tiles and the CTA's first and last unit); loads this thread's words of its row's packed chunks
        (8-byte loads, 4-byte at wpt = 1) and the scale words of the chunks' K-atoms (both,
        or the one of chunks q0 .. q0 + chunks - 1 where fewer than 4), then turns those into
        the f16x2 scale of each chunk's K-block that the words lie in. All loads issue
        before the first conversion, so their latencies overlap."""
        trow, group, wpt, _, srow, q0, chunks = tok
        guard, u = where[0], where[1]
        self.wait_run_out(guard, ab_pipeline.sync_object_full.get_barrier(ahead.index), ahead.phase,
                          "sm90.consumer.full", u, kb)
        pk = storage.sPkA.data_ptr().toint() + ahead.index * self.a_stage_bytes
        sf = storage.sSFA.data_ptr().toint() + ahead.index * self.sfa_stage_bytes
        packed = []
        for c in cutlass.range_constexpr(chunks):
            addr = pk + sw64(trow, q0 + c) + 4 * wpt * group
            packed.append(ld_shared_v2(addr) if wpt == 2 else [ld_shared_u32(addr)])
        if cutlass.const_expr(chunks == 4):
            sel = sm90_token_scale_selector(group, wpt)
            words = [ld_shared_u32(sf + sm90_scale_word_offset(srow, 2 * a)) for a in range(2)]
            pairs = [scale_pair(words[a], sel) for a in range(2)]
            scales = [pairs[q // 2][q % 2] for q in range(4)]
        else:
            word = ld_shared_u32(sf + sm90_scale_word_offset(srow, q0))
            if cutlass.const_expr(chunks == 2):  # q0 even: chunks q0, q0 + 1 of one K-atom
                scales = scale_pair(word, sm90_token_scale_selector(group, wpt))
            else:
                scales = [scale_single(word, sm90_token_scale_selector(group, wpt, q0))]
        return packed, scales

    @cute.jit
    def store_token_words(self, storage, tok_w, tok, packed, scales, words):
        """This thread's words number `words` (static, 0 .. wpt - 1; others are skipped) of
        its chunks -> the ring buffer tok_w: per word and P index one store of the chunks'
        P values (16 bytes of 4 chunks: half the stores of 2 chunks x 4 words, a quarter of
        1 x 4)."""
        if cutlass.const_expr(tok.live is None):
            self._store_token_words(storage, tok_w, tok, packed, scales, words)
        elif tok.live:
            self._store_token_words(storage, tok_w, tok, packed, scales, words)

    @cute.jit
    def _store_token_words(self, storage, tok_w, tok, packed, scales, words):
        trow, group, wpt, _, _, q0, chunks = tok
        base = storage.sDecT.data_ptr().toint() + tok_w.index * self.tbuf_bytes
        if cutlass.const_expr(chunks < 4):
            base = base + 4 * q0  # the chunks' place in each 16-byte slot
        if cutlass.const_expr(self.uniform_addressing):
            offs = self.token_store_offsets(trow, group, wpt)
        else:
            base = base + trow * 128
        for i in words:
            if cutlass.const_expr(i < wpt):
                pq = [decode_e2m1_word(packed[c][i], scales[c]) for c in range(chunks)]
                w = wpt * group + i
                for tt in cutlass.range_constexpr(4):
                    if cutlass.const_expr(self.uniform_addressing):
                        addr = base + offs[i][tt]
                    else:
                        addr = base + (w // 2) * (self.tile_m * 128) + ((trow % 8) ^ (4 * (w % 2) + tt)) * 16
                    st_shared_words(addr, *[pq[c][tt] for c in range(chunks)])

    @property
    def uniform_addressing(self) -> bool:
        """Whether the token stores and weight loads keep the buffer's uniform base apart
        from a loop-invariant thread offset, so that ptxas addresses them as [R + UR]: at
        one m64 block per WG (tile_n 128, 192). There it took 9 SASS instructions off the
        K-loop (348 -> 339) and measured 31.3 / 15.7 against 32.7 / 16.3 us on shapes 2 / 3;
        at tile_n 256 it took 12 off (504 -> 492) but ran shapes 0 / 1 at 110.7 / 70.3
        against 109.8 / 69.7 us (two alternating rounds each of python eval.py
        benchmark), so 256 adds the offsets per access."""
        return self.blocks == 1

    @cute.jit
    def token_store_offsets(self, trow, group, wpt: int):
        """Byte offsets in a ring buffer of this thread's token stores, by local word i and
        P index tt: word w = wpt group + i goes to K-half w // 2, row trow, chunk
        (trow % 8) ^ (4 (w % 2) + tt) (token_share)."""
        key = trow % 8
        return [[trow * 128 + ((wpt * group + i) // 2) * (self.tile_m * 128)
                 + (key ^ (4 * ((wpt * group + i) % 2) + tt)) * 16 for tt in range(4)] for i in range(wpt)]

    @cute.jit
    def publish_tokens(self, tok_pipeline, tok_w, fault=None):
        # the proxy fence orders this thread's generic-proxy token stores before the async
        # proxy's wgmma reads that the full barrier hands them to
        cute.arch.fence_proxy("async.shared", space="cta")
        if cutlass.const_expr(fault is None):
            tok_pipeline.producer_commit(tok_w)
        elif fault == 0:  # an injected sm90.consumer.tokens fault leaves the arrive out
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
               ab_pipeline, tok_pipeline, ahead, tok_w, tok_r, tok, wgt, wm, sc, where, kt):
        """One K-tile: wgmmas on the weights `wm`, `sc` (loaded a K-tile earlier) and ring
        buffer tok_r's tokens. With `with_next` (static: all but a tile's last K-tile) it
        also decodes stage ahead's tokens into ring buffer tok_w (after the groups of
        words 0 and 1), loads stage ahead's weights for the next K-tile (after the last
        group, when this K-tile's are dead; with weights_early right after the stage's wait
        in group 0, into registers of their own) and releases that stage: the loads' latency
        then hides behind the wgmmas in flight. The arrive on tok_w's full barrier comes
        one group after the thread's last token store (group blocks + 1 with 2 words per
        chunk, group 1 with 1: 64 rows and fewer), and no earlier than group mma_depth,
        after a wait_group that left every wgmma of the previous K-tile done (the ring's
        order argument, class docstring). where, kt: the watchdog's (consume_tile) and this
        K-tile's index in the unit."""
        guard, u, k_tiles, ends = where
        packed, scales = None, None
        wm_next, sc_next = wm, sc
        # 4 x blocks wgmma groups per K-tile: group g multiplies block g % blocks at k16-steps
        # 2j, 2j + 1 (word j = g // blocks of the rows' chunks), so a group's A fragment
        # is 8 registers and mma_depth + 1 of them are in use
        groups = 4 * self.blocks
        depth = self.cfg.mma_depth
        for g in cutlass.range_constexpr(groups):
            j, b = divmod(g, self.blocks)
            f = g % self.cfg.a_fragments
            # the group that read fragment f (a_fragments groups ago) is done, and every
            # group before the latest mma_depth ones
            cute.nvgpu.warpgroup.wait_group(depth)
            for h in cutlass.range_constexpr(2):
                p = decode_e2m1_word(wm[b][h][j], sc[b][h][j // 2])
                for tt in cutlass.range_constexpr(4):  # P[4j + tt]: step tt // 2, slot tt % 2
                    tCrW32[f][sm90_fragment_index(h, tt % 2, 0, tt // 2, 1)] = p[tt]
            if cutlass.const_expr(g == 0):
                self.wait_run_out(guard, tok_pipeline.sync_object_full.get_barrier(tok_r.index), tok_r.phase,
                                  "sm90.consumer.tokens", u, kt)
            cute.nvgpu.warpgroup.fence()
            buf = tok_r.index
            for st in cutlass.range_constexpr(2):
                cute.gemm(tiled_mma, acc[b], tCrW[f][(None, None, st)],
                          tCrT[(None, None, 2 * (j % 2) + st, j // 2 + 2 * buf)], acc[b])
            cute.nvgpu.warpgroup.commit_group()
            if cutlass.const_expr(with_next):
                if cutlass.const_expr(g == 0):
                    packed, scales = self.token_chunks(storage, ab_pipeline, ahead, tok, where, kt)
                    if cutlass.const_expr(self.cfg.weights_early):
                        wm_next, sc_next = self.load_weights(storage, ahead, wgt)
                        self.release_stage(ab_pipeline, ahead,
                                           self.release_fault(guard, u, kt + 1, k_tiles, ends))
                # this thread's first word after the first group, its second (wpt 2) after
                # the next word's first group;
                # the fence and arrive one group after the last store (the stores have
                # completed by then, so the proxy fence does not wait for them), after a
                # wait_group that retired all of kt - 1 (that of any group g >= mma_depth)
                wpt = tok.wpt
                if cutlass.const_expr(g % self.blocks == 0 and j < wpt):
                    self.store_token_words(storage, tok_w, tok, packed, scales, (j,))
                if cutlass.const_expr(g == sm90_publish_group(self.cfg, wpt)):
                    self.publish_tokens(tok_pipeline, tok_w)
                if cutlass.const_expr(g == groups - 1 and not self.cfg.weights_early):
                    wm_next, sc_next = self.load_weights(storage, ahead, wgt)
                    self.release_stage(ab_pipeline, ahead,
                                       self.release_fault(guard, u, kt + 1, k_tiles, ends))
        if cutlass.const_expr(with_next):
            tok_w.advance()
            ahead.advance()
        tok_r.advance()
        return ahead, tok_w, tok_r, wm_next, sc_next

    @cute.jit
    def epilogue(self, acc, box, tidx, desc_c, c_addr, m, n, row_a, col, tokens: int, last,
                 partial=None, live=None):
        """One m64 block's accumulators (64 weight rows x `tokens` static) -> C rows row_a ..,
        columns col .. col + 63, through this WG's staging box. stmatrix.trans turns wgmma's
        fragments (a thread holds token pairs) into C's rows (8 weight rows = 16 bytes).
        Then one TMA store, which clips the rows past the group's M and the columns past its
        N: full and partial tiles take the same path, without predicates. Where C's rows
        have no 16-byte pitch or start (N % 8, an offset view) the TMA cannot address them
        and the WG stores the box element by element instead (consecutive lanes,
        consecutive columns).
        The caller (store_tile) made the box free; the proxy fence before the barrier makes
        the stmatrix writes visible to the TMA. live (watchdog builds): 0 where the tile is
        not to be stored (store_tile): every store of it is predicated on it."""
        wtid = tidx % 128
        lead = Int32(wtid == 0)
        if cutlass.const_expr(live is not None):
            lead = lead & live
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
            if cutlass.const_expr(self.DIRECT_STORES):
                self.store_box_vectors(box, wtid, c_addr, m, n, row_a, col, tokens, live)
            else:
                if last:
                    self.store_box_vectors(box, wtid, c_addr, m, n, row_a, col, tokens, live)
                else:
                    tma_store_2d(desc_c, col, row_a, box, lead)
        else:
            self.store_box_elements(box, wtid, c_addr, m, n, row_a, col, tokens, live)

    @cute.jit
    def store_box_vectors(self, box, wtid, c_addr, m, n, row_a, col, tokens: int, live=None):
        """The staged box -> C with 16-byte stores by the WG's 128 threads, for the CTA's
        last tile: a TMA store would hold the CTA (and its SM, which the next call's CTA
        waits for) until the TMA unit has read the box, about 1 us after the store is
        issued on the H200 (tools/probes/sm90_trace.py timeline); plain stores leave nothing
        reading shared memory once issued. Per pass 16 token rows x 8 chunks of 8 columns,
        8 consecutive lanes one row's 128 bytes; a chunk is wholly in C or wholly past N
        (n % 8 == 0, the TMA path's condition), rows past M are skipped."""
        j = wtid % 8
        gn = col + 8 * j
        for i in cutlass.range_constexpr(tokens // 16):
            tok = 16 * i + wtid // 8
            v = ld_shared_v4(box + sm90_c_box_offset(tok, 8 * j))
            gm = row_a + tok
            inside = Int32(gm < m and gn < n)
            if cutlass.const_expr(live is not None):
                inside = inside & live
            st_global_v4_b32(c_addr + (Int64(gm) * n + gn) * 2, *v, inside)

    @cute.jit
    def store_box_elements(self, box, wtid, c_addr, m, n, row_a, col, tokens: int, live=None):
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
            inside = Int32(gm < m and gn < n)
            if cutlass.const_expr(live is not None):
                inside = inside & live
            inside_hi = Int32(gm < m and gn + 1 < n)
            if cutlass.const_expr(live is not None):
                inside_hi = inside_hi & live
            st_global_b16(addr, word, inside)
            st_global_b16(addr + 2, word >> 16, inside_hi)


def sm90_can_implement(config: Sm90Config, sizes) -> tuple[bool, str]:
    if not sm90_config_is_legal(config):
        return False, f"illegal config {config}"
    if not sm90_is_valid_problem(sizes):
        return False, "the Hopper kernel needs K a multiple of 256 and L == 1"
    return True, ""


def compile_sm90(config: Sm90Config, watch: WatchSettings = WatchSettings()) -> CompiledKernels:
    """Compiles the descriptor-init and GEMM kernels of a config for sm_90a, with the watchdog
    as `watch` says; one build serves every group count (the count is a launch argument of
    both)."""
    op = Sm90Fp4GroupedGemm(config, watch)
    init_fn = cute.compile(
        op.init_tensormaps,
        fake_ptr(cutlass.Int32), fake_ptr(cutlass.Int64), fake_ptr(cutlass.Int64, 128), Int32(1),
    )
    gemm_fn = cute.compile(
        op,
        fake_ptr(cutlass.Int32), fake_ptr(cutlass.Int64), fake_ptr(cutlass.Int32),
        fake_ptr(cutlass.Int32), fake_ptr(cutlass.Int64, 128), fake_ptr(cutlass.Float32),
        fake_ptr(cutlass.Int32), Int32(1), Int32(1), Int32(1), *fake_watch_args(),
    )

    def init(ptrs, sizes, tensormaps):
        return bind_launch(init_fn, (
            gmem_arg(sizes, cutlass.Int32), gmem_arg(ptrs, cutlass.Int64),
            gmem_arg(tensormaps, cutlass.Int64, 128), int_arg(Int32, sizes.shape[0]),
        ))

    def prepare(sizes, ptrs, tensormaps, sched, scratch, watch: LaunchWatch):
        # without split-K the kernel is compiled without any access to the scratch: null
        partials = KernelArg(cutlass.Float32, 0, True) if scratch is None else gmem_arg(scratch.partials, cutlass.Float32)
        flags = KernelArg(cutlass.Int32, 0, True) if scratch is None else gmem_arg(scratch.flags, cutlass.Int32)
        args = (
            gmem_arg(sizes, cutlass.Int32), gmem_arg(ptrs, cutlass.Int64),
            gmem_arg(sched.tables["ranges"], cutlass.Int32),
            gmem_arg(sched.tables["units"], cutlass.Int32),
            gmem_arg(tensormaps, cutlass.Int64, 128), partials, flags, int_arg(Int32, sched.host.grid),
            int_arg(Int32, sched.host.unit_stride), int_arg(Int32, sizes.shape[0]), *watch.args(),
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
        size_class=sm90_size_class,
        config_name=lambda cfg: cfg.name,
    )
