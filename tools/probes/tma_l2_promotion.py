"""The L2 promotion of the Hopper kernel's TMA descriptors: which one the CuTe DSL gives
them, and a variant submission with another, for timing. Needs a GPU (the CUDA driver's
cuTensorMapEncodeTiled) and the CuTe DSL.

    python tools/probes/tma_l2_promotion.py
    python tools/probes/tma_l2_promotion.py --variant build/l2_256 --promotion 256 --descs b
    python tools/probes/sm90_sweep.py --module build/l2_256/submission.py \\
        --spec-file tools/regime_specs.txt --shapes 6,7,8 auto

A CUtensorMap is 128 opaque bytes, and the DSL's TMA atoms take no promotion argument.
The first form encodes one descriptor through the driver at each promotion (none, 64, 128,
256 B), finds the bits that change, and reads them back from the descriptors the kernel's
init kernel wrote for one decode-shaped group (A tokens, B weights, C).

--variant writes DIR/submission.py: this checkout's submission.py whose init kernel, after
copying each group's descriptor templates, rewrites those bits in the A and/or B
(`--descs`) descriptors before its tensormap.replace updates and release fence. The bits'
place is found on this GPU's driver first and written into the file as constants.
"""

import argparse
import ctypes
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

PROMOTIONS = {"none": 0, "64": 1, "128": 2, "256": 3}  # CUtensorMapL2promotion


def encode(driver, ptr: int, promotion: int, rows: int = 256, row_bytes: int = 3584) -> list[int]:
    """The 32 words of a rank-2 uint8 descriptor (row_bytes x rows, a 64-byte x rows box,
    64-byte swizzle, as the kernel's weights use) at `promotion`."""
    out = (ctypes.c_uint32 * 32)()
    err = driver.cuTensorMapEncodeTiled(
        ctypes.byref(out), ctypes.c_int(0), ctypes.c_uint32(2), ctypes.c_void_p(ptr),
        (ctypes.c_uint64 * 2)(row_bytes, rows), (ctypes.c_uint64 * 1)(row_bytes),
        (ctypes.c_uint32 * 2)(64, rows), (ctypes.c_uint32 * 2)(1, 1),
        ctypes.c_int(0), ctypes.c_int(2), ctypes.c_int(promotion), ctypes.c_int(0))
    if err:
        raise RuntimeError(f"cuTensorMapEncodeTiled returned {err}")
    return list(out)


def promotion_field(driver, ptr: int) -> tuple[int, int, list[int]]:
    """(word, bit mask, the masked word at each promotion 0..3)."""
    descs = [encode(driver, ptr, p) for p in range(4)]
    words = [w for w in range(32) if len({d[w] for d in descs}) > 1]
    if len(words) != 1:
        raise RuntimeError(f"the promotion changed words {words}, expected one")
    word = words[0]
    bits = 0
    for d in descs:
        bits |= d[word] ^ descs[0][word]
    return word, bits, [d[word] & bits for d in descs]


def kernel_descriptors(S, m: int = 8, n: int = 2048, k: int = 7168) -> list[list[int]]:
    """The words of the A, B and C descriptors that the decode tile's init kernel writes for
    one group of m x n x k."""
    import torch

    a = torch.zeros(m * k // 2, dtype=torch.uint8, device="cuda")
    b = torch.zeros(n * k // 2, dtype=torch.uint8, device="cuda")
    c = torch.zeros(m * n, dtype=torch.float16, device="cuda")
    compiled = S.compile_sm90(S.make_sm90_config(256, **S.SM90_DECODE_TILE))
    ptrs = torch.tensor([[a.data_ptr(), b.data_ptr(), 0, 0, c.data_ptr()]], dtype=torch.int64, device="cuda")
    sizes = torch.tensor([[m, n, k, 1]], dtype=torch.int32, device="cuda")
    tensormaps = torch.zeros((1, S.SM90_NUM_DESC, 16), dtype=torch.int64, device="cuda")
    compiled.init(ptrs, sizes, tensormaps)()
    torch.cuda.synchronize()
    return [[w & 0xFFFFFFFF for w in tensormaps[0, i].cpu().view(torch.int32).tolist()]
            for i in range(S.SM90_NUM_DESC)]


INIT_ANCHOR = "            cute.nvgpu.cpasync.copy_tensormap(atom_c, desc_c)\n"
HELPER_ANCHOR = "\ndef sm90_can_implement("


def write_variant(directory: Path, word: int, bits: int, value: int, descs: str) -> Path:
    """DIR/submission.py with the promotion bits of the `descs` descriptors set to value."""
    src = (ROOT / "submission.py").read_text()
    if src.count(INIT_ANCHOR) != 1 or src.count(HELPER_ANCHOR) != 1:
        raise RuntimeError("submission.py's init kernel no longer has the lines this patch anchors on")
    signed = lambda x: x - (1 << 32) if x >= 1 << 31 else x  # noqa: E731
    lines = ["\n\ndef _set_l2_promotion(desc_a, desc_b):  # written by tools/probes/tma_l2_promotion.py"]
    for name in sorted(set(descs)):
        lines += [f"    words = cute.make_tensor(cute.recast_ptr(desc_{name}, dtype=cutlass.Int32), cute.make_layout(32))",
                  f"    words[{word}] = (words[{word}] & Int32({signed(~bits & 0xFFFFFFFF)})) | Int32({signed(value)})"]
    src = src.replace(INIT_ANCHOR, INIT_ANCHOR + "            _set_l2_promotion(desc_a, desc_b)\n")
    src = src.replace(HELPER_ANCHOR, "\n".join(lines) + "\n\n" + HELPER_ANCHOR)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "submission.py"
    path.write_text(src)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="Needs a CUDA GPU and the CuTe DSL.")
    ap.add_argument("--variant", type=Path, help="write a variant submission.py into this folder")
    ap.add_argument("--promotion", choices=PROMOTIONS, default="256")
    ap.add_argument("--descs", default="b", help="a (tokens), b (weights) or ab")
    args = ap.parse_args()
    if not set(args.descs) <= {"a", "b"} or not args.descs:
        ap.error("--descs takes a, b or ab")

    import torch

    import submission as S

    driver = ctypes.CDLL("libcuda.so.1")
    probe = torch.zeros(256 * 3584, dtype=torch.uint8, device="cuda")
    word, bits, values = promotion_field(driver, probe.data_ptr())
    names = {v: name for name, v in zip(PROMOTIONS, values)}
    print(f"promotion field: word {word}, bits {bits:#x}; values {[hex(v) for v in values]} = none / 64 / 128 / 256 B")
    for label, words in zip("ABC", kernel_descriptors(S)):
        print(f"kernel descriptor {label}: L2 promotion {names.get(words[word] & bits, '?')} B")
    if args.variant:
        path = write_variant(args.variant, word, bits, values[PROMOTIONS[args.promotion]], args.descs)
        print(f"wrote {path}: promotion {args.promotion} on descriptor(s) {args.descs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
