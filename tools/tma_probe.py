"""How long one TMA load takes on this GPU, first use against later ones (H200).

The Hopper kernel's timeline (tools/sm90_trace.py timeline) shows 1.6-2.0 us between a
CTA's first TMA issue and its first stage landing, with L2 warm or flushed alike, while
the steady K-loop hides every later load. This probe separates the candidates: one warp
per SM issues, one at a time, 8 KB TMA loads (the kernel's 128-row x 64-byte box, through
the same descriptors the kernel's init kernel writes) and times each to its mbarrier's
completion with %globaltimer:

    0  A box (0, 0)        the first TMA of the CTA: first use of the descriptor and pages
    1  A box (64, 0)       next K-tile of the same rows: same descriptor, same pages
    2  B box (0, 128 b)    the other tensor's first use
    3  B box (64, 128 b)   its second
    4  A box (0, 0)        the first box again (in L2 now)
    5  acquire + A (128, 0) after fence.proxy.tensormap::generic.acquire on A's descriptor

Run three times: right after the descriptors are built (nothing touched yet), again (all
warm), and after writing 256 MB (L2 flushed).

    python tools/tma_probe.py        # on the H200
"""

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

STEPS = ("first A box", "second A box", "first B box", "second B box", "first A box again",
         "acquire + third A box")
BOX_BYTES = 128 * 64


def build_probe(S):
    import cutlass
    import cutlass.cute as cute
    import cutlass.utils as utils
    from cutlass import Int32

    @S.dsl_user_op
    def gtimer(*, loc=None, ip=None) -> Int32:
        return S._asm_value(Int32, [], "mov.u32 $0, %globaltimer_lo;", "=r", loc, ip)

    class TmaProbe:
        @cute.jit
        def __call__(self, tmaps: cute.Pointer, out: cute.Pointer, stream):
            @cute.struct
            class Smem:
                mbar: cute.struct.MemRange[cutlass.Int64, 2]
                buf: cute.struct.Align[cute.struct.MemRange[cutlass.Uint8, len(STEPS) * BOX_BYTES], 1024]

            self.smem = Smem
            self.kernel(tmaps, out).launch(grid=[132, 1, 1], block=[32, 1, 1], stream=stream)

        @cute.kernel
        def kernel(self, tmaps: cute.Pointer, out: cute.Pointer):
            lane = cute.arch.lane_idx()
            bidx, _, _ = cute.arch.block_idx()
            storage = utils.SmemAllocator().allocate(self.smem)
            mbar = storage.mbar.data_ptr()
            if lane == 0:
                cute.arch.mbarrier_init(mbar, 1)
            cute.arch.mbarrier_init_fence()
            cute.arch.sync_warp()
            mOut = cute.make_tensor(out, cute.make_layout(1 << 20))
            if lane == 0:
                desc_a = tmaps.toint()
                desc_b = desc_a + S.SM90_DESC_BYTES
                buf = storage.buf.data_ptr().toint()
                bar = mbar.toint()
                # (descriptor, K byte, row) of each step
                loads = ((desc_a, 0, 0), (desc_a, 64, 0), (desc_b, 0, 128), (desc_b, 64, 128),
                         (desc_a, 0, 0), (desc_a, 128, 0))
                for i in cutlass.range_constexpr(len(loads)):
                    desc, kb, rows = loads[i]
                    if cutlass.const_expr(i == len(loads) - 1):
                        S.tensormap_acquire(desc)
                    t0 = gtimer()
                    cute.arch.mbarrier_arrive_and_expect_tx(mbar, BOX_BYTES)
                    S.tma_load_2d(buf + i * BOX_BYTES, desc, Int32(kb), Int32(rows) * bidx, bar, Int32(1))
                    cute.arch.mbarrier_wait(mbar, i % 2)
                    mOut[bidx * 8 + i] = gtimer() - t0

    return TmaProbe()


def main() -> int:
    import cutlass.cute as cute
    import torch

    import reference
    import submission as S

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    cfg = S.make_sm90_config(128, narrow=(64,), pdl=False)
    sizes = [(128, sms * 128, 1536, 1)]
    data = reference.generate_input(m=(128,), n=(sms * 128,), k=(1536,), g=1, seed=5)
    compiled = S.compile_sm90(cfg)
    probe = cute.compile(build_probe(S), S.fake_ptr(S.cutlass.Int64, 128), S.fake_ptr(S.cutlass.Int32),
                         S.make_fake_stream())
    ptrs = torch.tensor(S.group_pointers(data, sizes), dtype=torch.int64, device="cuda")
    sizes_dev = torch.tensor(sizes, dtype=torch.int32, device="cuda")
    tmaps = torch.empty((1, S.SM90_NUM_DESC, 16), dtype=torch.int64, device="cuda")
    out = torch.zeros(sms * 8, dtype=torch.int32, device="cuda")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    compiled.init(ptrs, sizes_dev, tmaps)
    torch.cuda.synchronize()
    for name in ("descriptors just built, nothing touched", "again (warm)", "after a 256 MB write (L2 flushed)"):
        if "flushed" in name:
            flush.zero_()
        out.zero_()
        torch.cuda.synchronize()
        probe(S.device_ptr(tmaps, S.cutlass.Int64, 128), S.device_ptr(out, S.cutlass.Int32),
              S.current_stream(0))
        torch.cuda.synchronize()
        t = out.view(sms, 8).cpu()
        print(f"{name}:")
        for i, step in enumerate(STEPS):
            v = t[:, i].tolist()
            print(f"  {step:22s} median {statistics.median(v):6.0f}  min {min(v):6d}  max {max(v):6d} ns")
    return 0


if __name__ == "__main__":
    sys.exit(main())
