"""Does a TMA tile load whose box lies wholly outside the tensor still zero-fill the box
and complete its full byte count on the mbarrier? (H200.)

The Blackwell kernel's swap-AB 2-CTA configs load, for a token tile of at most 64 or 128
rows, a peer box that lies wholly past the group's M (README, "items to watch"): if such a
load credited fewer bytes than the box, the stage's barrier would never complete and the
kernel would hang. This probe asks the same of the TMA unit through the Hopper kernel's
own descriptors (token tensor of 128 rows x 768 bytes, box 128 rows x 64 bytes): one warp
fills an 8 KB buffer with 0xAB, expects the full box on an mbarrier, issues the load at
each coordinate below, polls the barrier for at most about 1 ms (so a short-crediting
load shows as "not complete" instead of a hang), then copies the buffer out.

    python tools/tma_oob_probe.py        # on an sm_90 GPU

Per case it prints whether the barrier completed and, per 64-byte box row, whether the row
holds the tensor's bytes (compared as a multiset: the 64-byte swizzle permutes 16-byte
chunks within a row), zeros, or the fill pattern (the load never wrote it).
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ROWS, ROW_BYTES, K = 128, 64, 1536
BOX_BYTES = ROWS * ROW_BYTES
# (name, K byte coordinate, row coordinate)
CASES = (
    ("in bounds (control)", 0, 0),
    ("half past M (rows 64-191)", 0, 64),
    ("wholly past M (rows 128-255)", 0, 128),
    ("far past M (rows 4096-)", 0, 4096),
    ("wholly past K (bytes 768-831)", K // 2, 0),
    ("wholly before row 0 (rows -128..-1)", 0, -128),
)
POLLS = 20000
FILL = 0xAB


def build_probe(S):
    import cutlass
    import cutlass.cute as cute
    import cutlass.utils as utils
    from cutlass import Int32

    class OobProbe:
        @cute.jit
        def __call__(self, tmaps: cute.Pointer, out: cute.Pointer, flags: cute.Pointer, stream):
            @cute.struct
            class Smem:
                mbar: cute.struct.MemRange[cutlass.Int64, 2]
                buf: cute.struct.Align[cute.struct.MemRange[cutlass.Uint32, BOX_BYTES // 4], 1024]

            self.smem = Smem
            self.kernel(tmaps, out, flags).launch(grid=[1, 1, 1], block=[32, 1, 1], stream=stream)

        @cute.kernel
        def kernel(self, tmaps: cute.Pointer, out: cute.Pointer, flags: cute.Pointer):
            lane = cute.arch.lane_idx()
            storage = utils.SmemAllocator().allocate(self.smem)
            mbar = storage.mbar.data_ptr()
            sBuf = cute.make_tensor(storage.buf.data_ptr(), cute.make_layout(BOX_BYTES // 4))
            mOut = cute.make_tensor(out, cute.make_layout(len(CASES) * BOX_BYTES // 4))
            mFlags = cute.make_tensor(flags, cute.make_layout(len(CASES)))
            if lane == 0:
                cute.arch.mbarrier_init(mbar, 1)
            cute.arch.mbarrier_init_fence()
            cute.arch.sync_warp()
            for c in cutlass.range_constexpr(len(CASES)):
                _, kb, row = CASES[c]
                for i in cutlass.range_constexpr(BOX_BYTES // 4 // 32):
                    sBuf[i * 32 + lane] = cutlass.Uint32(FILL * 0x01010101)
                cute.arch.fence_proxy("async.shared", space="cta")  # the fill before the TMA's writes
                cute.arch.sync_warp()
                if lane == 0:
                    cute.arch.mbarrier_arrive_and_expect_tx(mbar, BOX_BYTES)
                    S.tma_load_2d(storage.buf.data_ptr().toint(), tmaps.toint(), Int32(kb), Int32(row),
                                  mbar.toint(), Int32(1))
                done = cutlass.Int32(0)
                for _ in cutlass.range(POLLS):
                    if done == 0:
                        if cute.arch.mbarrier_test_wait(mbar, c % 2):
                            done = cutlass.Int32(1)
                if lane == 0:
                    mFlags[c] = done
                cute.arch.sync_warp()
                for i in cutlass.range_constexpr(BOX_BYTES // 4 // 32):
                    mOut[c * (BOX_BYTES // 4) + i * 32 + lane] = sBuf[i * 32 + lane]
                cute.arch.sync_warp()

    return OobProbe()


def compile_probe(S):
    import cutlass.cute as cute

    return cute.compile(build_probe(S), S.fake_ptr(S.cutlass.Int64, 128), S.fake_ptr(S.cutlass.Uint32),
                        S.fake_ptr(S.cutlass.Int32), S.make_fake_stream())


def main() -> int:
    import torch

    import reference
    import submission as S

    cfg = S.make_sm90_config(128, narrow=(64,), pdl=False)
    sizes = [(ROWS, 128, K, 1)]
    data = reference.generate_input(m=(ROWS,), n=(128,), k=(K,), g=1, seed=5)
    compiled = S.compile_sm90(cfg)
    probe = compile_probe(S)
    ptrs = torch.tensor(S.group_pointers(data, sizes), dtype=torch.int64, device="cuda")
    sizes_dev = torch.tensor(sizes, dtype=torch.int32, device="cuda")
    tmaps = torch.empty((1, S.SM90_NUM_DESC, 16), dtype=torch.int64, device="cuda")
    out = torch.zeros(len(CASES) * BOX_BYTES // 4, dtype=torch.int32, device="cuda")
    flags = torch.full((len(CASES),), -1, dtype=torch.int32, device="cuda")
    compiled.init(ptrs, sizes_dev, tmaps)
    probe(S.device_ptr(tmaps, S.cutlass.Int64, 128), S.device_ptr(out, S.cutlass.Uint32),
          S.device_ptr(flags, S.cutlass.Int32), S.current_stream(0))
    torch.cuda.synchronize()
    got = out.cpu().view(torch.uint8).view(len(CASES), ROWS, ROW_BYTES)
    src = data[0][0][0][:, :, 0].view(torch.uint8).cpu()  # (128, 768) packed tokens
    for c, (name, kb, row) in enumerate(CASES):
        kinds = []
        for r in range(ROWS):
            line = got[c, r]
            if bool((line == FILL).all()):
                kinds.append("F")
            elif bool((line == 0).all()):
                kinds.append("0")
            elif 0 <= row + r < ROWS and kb + ROW_BYTES <= K // 2 and torch.equal(
                    line.sort().values, src[row + r, kb:kb + ROW_BYTES].sort().values):
                kinds.append("d")
            else:
                kinds.append("?")
        runs, prev = [], None
        for i, k in enumerate(kinds):
            if k != prev:
                runs.append([k, i, i])
                prev = k
            runs[-1][2] = i
        desc = ", ".join(f"rows {a}-{b} {dict(d='data', F='fill (not written)', **{'0': 'zero'}).get(k, 'other')}"
                         for k, a, b in runs)
        print(f"{name:38s} barrier {'complete' if int(flags[c]) == 1 else 'NOT complete'}: {desc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
