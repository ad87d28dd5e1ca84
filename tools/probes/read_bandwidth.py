"""Whether a large copy is a fair bandwidth ceiling for a kernel that mostly reads: the
copy's rate (bytes read + written, as eval.py's roofline counts it) against the best
read-only rate found, in one process on the GPU.

    python tools/probes/read_bandwidth.py            # 1 GiB; needs a CUDA GPU and Triton

The reads are a Triton grid-stride kernel over a contiguous buffer, swept over block size,
programs per SM, warps and pipeline stages; torch's sum and a fill are printed beside them.
Each is timed one call per CUDA-event pair. Then the copy and the sum of eval.py's
roofline (measure_bandwidth: 2 GiB, GPU_CEILING_BATCH calls per event pair) on random bytes
and on eval.py's all-ones buffer: whether the timing or the data moves the ceiling.
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> int:
    argparse.ArgumentParser(
        prog="tools/probes/read_bandwidth.py",
        description="A 1 GiB copy's rate against the best read-only Triton kernel's, and "
                    "eval.py's bandwidth ceiling on random and all-ones bytes.",
        epilog="Needs a CUDA GPU and Triton.").parse_args()
    import torch

    if not torch.cuda.is_available():
        print("tools/probes/read_bandwidth.py: needs a CUDA GPU; torch sees none", file=sys.stderr)
        return 2
    import triton
    import triton.language as tl

    @triton.jit
    def read_kernel(x_ptr, out_ptr, n_blocks, BLOCK: tl.constexpr, NS: tl.constexpr):
        pid = tl.program_id(0)
        acc = tl.zeros([BLOCK], dtype=tl.int64)
        for b in tl.range(pid, n_blocks, tl.num_programs(0), num_stages=NS):
            acc ^= tl.load(x_ptr + b * BLOCK + tl.arange(0, BLOCK), cache_modifier=".cg",
                           eviction_policy="evict_first")
        tl.store(out_ptr + pid, tl.sum(acc))

    nbytes = 1 << 30  # far past L2: every pass comes from DRAM
    x = torch.randint(0, 1 << 30, (nbytes // 8,), dtype=torch.int64, device="cuda")
    y = torch.empty_like(x)
    out = torch.empty(1 << 16, dtype=torch.int64, device="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count

    def best_ms(fn, reps):
        fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        return min(times)

    print(torch.cuda.get_device_name(), f"{nbytes / 2**30:.0f} GiB")
    for _ in range(2):
        ms = best_ms(lambda: y.copy_(x), 9)
        print(f"copy:       {2 * nbytes / ms / 1e9:.2f} TB/s read + written")
        ms = best_ms(lambda: y.fill_(7), 9)
        print(f"fill:       {nbytes / ms / 1e9:.2f} TB/s written")
        ms = best_ms(lambda: x.sum(), 9)
        print(f"torch sum:  {nbytes / ms / 1e9:.2f} TB/s read")
        best = (0.0, None)
        for block in (1024, 2048, 4096):
            for per_sm in (1, 2, 4, 8, 16):
                for warps in (4, 8):
                    for stages in (2, 3, 4):
                        def run(grid=(sms * per_sm,), block=block, stages=stages, warps=warps):
                            read_kernel[grid](x, out, nbytes // 8 // block, BLOCK=block, NS=stages, num_warps=warps)

                        ms = best_ms(run, 5)
                        best = max(best, (nbytes / ms / 1e9, (block, per_sm, warps, stages)))
        print(f"best read:  {best[0]:.2f} TB/s read (block, programs per SM, warps, stages) = {best[1]}")
    eval_ceiling()
    return 0


def eval_ceiling() -> None:
    """eval.py's copy and sum, timed as measure_bandwidth times them, on 2 GiB of random
    bytes and of ones (the buffer it uses), twice."""
    import torch

    from harness import ceilings

    size = ceilings.GPU_COPY_BYTES
    buffers = {
        "random": torch.randint(0, 256, (size,), dtype=torch.uint8, device="cuda"),
        "ones": torch.ones(size, dtype=torch.uint8, device="cuda"),
    }
    for _ in range(2):
        for data, src in buffers.items():
            copy, read = ceilings.copy_and_sum_rates(src)
            print(f"eval.py's ceiling, {size / 2**30:.0f} GiB of {data}: copy {copy / 1e3:.2f} TB/s read + "
                  f"written, sum {read / 1e3:.2f} TB/s read ({ceilings.GPU_CEILING_BATCH} calls per timing)")


if __name__ == "__main__":
    sys.exit(main())
