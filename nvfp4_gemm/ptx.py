"""Inline-PTX helpers the kernels share: shared and global loads and stores of given widths,
TMA and bulk copies, the E2M1 word decode, f16x2 packing and multiply, fences, and the
release / acquire flags of split-K partial sums. Each is a DSL user op wrapping one or a few
instructions the CuTe DSL does not expose."""

from __future__ import annotations

import struct

from .common import Float32, Int32, Int64, Uint32, cute, cutlass, dsl_user_op, llvm

# The decode leaves both operands 2^-6 below their value (decode_e2m1_word), so the fp32
# accumulators hold 2^-12 of the products: exactly, since every product is at least 2^-32.
# The epilogue multiplies by this before the fp16 conversion, so C is bit for bit the same.
SM90_ACC_SCALE = 4096.0
SM90_ACC_SCALE_PTX = f"0f{struct.unpack('<I', struct.pack('<f', SM90_ACC_SCALE))[0]:08X}"  # PTX f32 literal


# Inline PTX helpers (side-effecting where they touch smem, so LLVM keeps them ordered)
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
def st_shared_words(addr: Int32, *values, loc=None, ip=None) -> None:
    """One shared-memory store of 1, 2 or 4 32-bit values (4, 8 or 16 bytes, aligned)."""
    operands = ", ".join(f"${i + 1}" for i in range(len(values)))
    vector = {1: f"b32 [$0], {operands}", 2: f"v2.b32 [$0], {{{operands}}}", 4: f"v4.b32 [$0], {{{operands}}}"}
    _asm_effect(
        [_v(Int32(addr), loc, ip)] + [_v(Uint32(x), loc, ip) for x in values],
        f"st.shared.{vector[len(values)]};", ",".join(["r"] * (len(values) + 1)) + ",~{memory}", loc, ip,
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
def scale_single(word: Uint32, selector, *, loc=None, ip=None) -> Uint32:
    """The E4M3 scale s that prmt `selector` (both bytes of its low half alike) picks from
    `word` -> the f16x2 value (s, s): one prmt and one cvt."""
    return _asm_value(
        Uint32, [_v(Uint32(word), loc, ip), _v(Uint32(selector), loc, ip)],
        "{\n.reg .b32 w;\n.reg .b16 lo, hi;\n"
        "prmt.b32 w, $1, 0, $2;\n"
        "mov.b32 {lo, hi}, w;\n"
        "cvt.rn.f16x2.e4m3x2 $0, lo;\n}",
        "=r,r,r", loc, ip, side_effects=False,
    )


# decode_e2m1_word's instructions ($4 the word, $5 the scale pair, $0-$3 the outputs); the
# CPU test runs this very text through a model of each instruction (test_sm90_host.py)
DECODE_E2M1_ASM = (
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
    "mul.rn.f16x2 $3, $3, $5;\n}"
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
        DECODE_E2M1_ASM,
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
def prefetch_l2(addr: Int64, *, loc=None, ip=None) -> None:
    """Brings a global line into L2 and no nearer. L2 is where every SM's global writes
    land, so the line can never be stale: a line that another kernel is still writing
    (a descriptor the init kernel writes) is safe to prefetch before the grid dependency
    wait, where a load or an L1 prefetch could keep the old bytes in this SM's L1."""
    _asm_effect([_v(Int64(addr), loc, ip)], "prefetch.global.L2 [$0];", "l", loc, ip)


@cute.jit
def prefetch_lines(base: Int64, nbytes: Int32, lane: Int32, l2_only: cutlass.Constexpr[bool]) -> None:
    """Every 128-byte line of [base, base + nbytes) (nbytes > 0), a warp's lanes taking
    every 32nd: into L1 (and L2), or with l2_only into L2 alone (prefetch_l2)."""
    first = base >> 7
    lines = Int32(((base + Int64(nbytes) - 1) >> 7) - first + 1)
    for i in cutlass.range(lane, lines, 32, unroll=1):
        addr = (first + Int64(i)) << 7
        if cutlass.const_expr(l2_only):
            prefetch_l2(addr)
        else:
            prefetch_l1(addr)


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
