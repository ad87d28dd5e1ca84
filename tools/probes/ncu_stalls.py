"""Summarizes an Nsight Compute source-level export: warp-stall reasons overall, per
address range and per instruction. Make the export on the GPU machine with

    ncu --clock-control none --kernel-name regex:Sm90Fp4GroupedGemm_object_at__TiledMMA \\
        --launch-skip 1 --launch-count 1 --section WarpStateStats --section SourceCounters \\
        --page source --print-source sass --csv python3 tools/probes/ncu_case.py 0 > src.csv

then, anywhere:

    python tools/probes/ncu_stalls.py src.csv [name:lo:hi ...]   # lo, hi: hex offsets in the kernel
"""

import argparse
import collections
import csv
import sys


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="tools/probes/ncu_stalls.py",
        description="Warp-stall reasons of an Nsight Compute source-level CSV export: overall, "
                    "per address range and per instruction (the export is made on a GPU "
                    "machine, see the docstring; this runs anywhere).")
    parser.add_argument("csv", help="the export (ncu ... --page source --print-source sass --csv)")
    parser.add_argument("ranges", nargs="*", metavar="NAME:LO:HI",
                        help="address ranges to summarize, LO and HI hex offsets in the kernel")
    args = parser.parse_args()
    with open(args.csv) as f:
        rows = list(csv.reader(line for line in f if line.startswith('"')))
    hdr, data = rows[1], rows[2:]
    ix = {h: i for i, h in enumerate(hdr)}
    stall_cols = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    base = int(data[0][0], 16)
    recs, total = [], collections.Counter()
    for r in data:
        st = {h: int(r[ix[h]] or 0) for h in stall_cols}
        recs.append((int(r[0], 16) - base, r[1].strip(), int(r[ix["Warp Stall Sampling (All Samples)"]] or 0), st))
        total.update(st)
    n = sum(s for _, _, s, _ in recs)
    print("total samples", n)
    for h, v in total.most_common(10):
        print(f"  {h[6:]:22s} {v:7d} {100 * v / n:5.1f}%")
    for spec in args.ranges:
        name, lo, hi = spec.split(":")
        lo, hi = int(lo, 16), int(hi, 16)
        c, m = collections.Counter(), 0
        for a, _, s, st in recs:
            if lo <= a <= hi:
                m += s
                c.update(st)
        reasons = ", ".join(f"{h[6:]} {100 * v / max(m, 1):.0f}%" for h, v in c.most_common(7))
        print(f"{name}: {m} samples ({100 * m / n:.1f}%): {reasons}")
    print("top instructions:")
    for a, t, s, st in sorted(recs, key=lambda x: -x[2])[:25]:
        top = [(k[6:], v) for k, v in sorted(st.items(), key=lambda kv: -kv[1])[:3]]
        print(f"  {a:#07x} {100 * s / n:5.1f}%  {t[:60]:60s} {top}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
