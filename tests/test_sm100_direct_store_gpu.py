"""The Blackwell epilogue's direct stores (store_epi_subtile_vectors) on a GPU we have: the
same function the sm_100a GEMM calls on a CTA's last tile, on the epilogue's own smem
layouts (sm100_epi_layouts), run on any sm_90+ GPU (it is plain ld.shared / st.global).

A probe kernel fills one smem buffer of the subtile through the CuTe tensor of that layout
(the swizzled view the GEMM's register -> smem copy and its TMA store use), then stores it
with store_epi_subtile_vectors; C must hold each element at its coordinate, and nothing
outside the clipped subtile may change."""

import functools

import pytest
import torch
from conftest import requires_cuda

pytestmark = [pytest.mark.gpu, requires_cuda]

EPI_THREADS = 128


def _require_sm90_or_later():
    major, _ = torch.cuda.get_device_capability()
    if major < 9:
        pytest.skip(f"the probe kernel needs sm_90 or later; this GPU is sm_{major}x")


@functools.cache
def _probe(swap_ab: bool):
    """Compiled probe for one C layout: (src, c, buffer, origin0, origin1, ext0, ext1, stride0, stride1)."""
    from cutlass.cute.runtime import from_dlpack

    from nvfp4_gemm import sm100
    from nvfp4_gemm.common import Int32, Int64, LayoutEnum, SmemAllocator, cute, cutlass

    c_layout = LayoutEnum.COL_MAJOR if swap_ab else LayoutEnum.ROW_MAJOR
    contiguous = 0 if swap_ab else 1

    @cute.kernel
    def kernel(src: cute.Tensor, c_addr: Int64, c_smem: cute.ComposedLayout, buffer: Int32,
               origin0: Int32, origin1: Int32, ext0: Int32, ext1: Int32, stride0: Int32, stride1: Int32):
        tidx, _, _ = cute.arch.thread_idx()

        @cute.struct
        class Storage:
            sC: cute.struct.Align[cute.struct.MemRange[cutlass.Float16, cute.cosize(c_smem.outer)], 1024]

        storage = SmemAllocator().allocate(Storage)
        # (EPI_TILE_M, EPI_TILE_N, C_STAGE), as the GEMM's epilogue views it
        sC = storage.sC.get_tensor(c_smem.outer, swizzle=c_smem.inner)
        rows = cute.size(c_smem.outer, mode=[0])
        cols = cute.size(c_smem.outer, mode=[1])
        for e in cutlass.range(tidx, rows * cols, EPI_THREADS):
            sC[(e // cols, e % cols, buffer)] = src[(e // cols, e % cols)]
        cute.arch.barrier(barrier_id=1, number_of_threads=EPI_THREADS)
        sm100.store_epi_subtile_vectors(
            tidx, storage.sC.data_ptr().toint(), c_smem, buffer, contiguous, c_addr,
            (origin0, origin1), (ext0, ext1), (stride0, stride1),
        )

    @cute.jit
    def launch(src: cute.Tensor, c_addr: Int64, buffer: Int32, origin0: Int32, origin1: Int32,
               ext0: Int32, ext1: Int32, stride0: Int32, stride1: Int32):
        # the swap-AB 2-CTA config's CTA tile (128 x 128) and the plain 1-CTA one's
        _, c_smem = sm100.sm100_epi_layouts((128, 128, 256), swap_ab, c_layout, sm100.SM100_C_STAGES)
        kernel(src, c_addr, c_smem, buffer, origin0, origin1, ext0, ext1, stride0, stride1).launch(
            grid=(1, 1, 1), block=[EPI_THREADS, 1, 1])

    src0 = torch.zeros(128, 32, dtype=torch.float16, device="cuda")
    return cute.compile(launch, from_dlpack(src0), Int64(0), *[Int32(0)] * 7)


# (swap_ab, C's m, n, gC's origin (mode 0, mode 1), buffer): whole subtiles and every clip
CASES = [
    (True, 96, 384, (128, 32), 0),     # inside C
    (True, 96, 384, (256, 64), 1),     # inside, the second buffer
    (True, 40, 136, (128, 32), 0),     # 8 columns of N, 8 token rows left
    (True, 33, 200, (128, 0), 1),      # 72 columns of N, 32 of the 33 token rows
    (False, 300, 96, (128, 32), 0),    # inside C
    (False, 200, 96, (128, 64), 1),    # 72 rows of M left, all 32 columns
    (False, 129, 40, (128, 32), 0),    # one row, 8 columns
]


@pytest.mark.parametrize("swap_ab,m,n,origin,buffer", CASES)
def test_direct_stores_put_each_element_at_its_coordinate(swap_ab, m, n, origin, buffer):
    _require_sm90_or_later()
    from cutlass.cute.runtime import from_dlpack

    from nvfp4_gemm.common import Int32, Int64

    fn = _probe(swap_ab)
    g = torch.Generator(device="cpu").manual_seed(m * 1000 + n)
    src = torch.randn(128, 32, generator=g).half().cuda()  # (EPI_TILE_M, EPI_TILE_N)
    sentinel = -7.0
    c = torch.full((m, n), sentinel, dtype=torch.float16, device="cuda")
    # gC's modes: (N, M) with N contiguous under swap-AB, else (M, N)
    ext, stride = ((n, m), (1, n)) if swap_ab else ((m, n), (n, 1))
    fn(from_dlpack(src), Int64(c.data_ptr()), Int32(buffer), Int32(origin[0]), Int32(origin[1]),
       Int32(ext[0]), Int32(ext[1]), Int32(stride[0]), Int32(stride[1]))
    torch.cuda.synchronize()

    want = torch.full_like(c, sentinel)
    rows0 = min(128, ext[0] - origin[0])
    rows1 = min(32, ext[1] - origin[1])
    block = src[:rows0, :rows1]
    if swap_ab:  # gC (n, m): C[m, n] = sub[n - o0, m - o1]
        want[origin[1]:origin[1] + rows1, origin[0]:origin[0] + rows0] = block.T
    else:
        want[origin[0]:origin[0] + rows0, origin[1]:origin[1] + rows1] = block
    wrong = (c != want).nonzero()
    assert wrong.numel() == 0, f"{len(wrong)} elements differ, first at (m, n) = {wrong[0].tolist()}"
