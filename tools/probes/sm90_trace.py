"""A per-K-tile timeline of the Hopper kernel's consumer warps, from %clock stamps.

`run` (H200) builds an instrumented copy of submission.py in a temporary directory: lane 0
of every consumer warp of the first TRACE_CTAS CTAs stores the SM's cycle counter at fixed
points of every K-tile (k_tile) and of every tile (consume_tile) into a global buffer (the
kernel's split-K flags pointer, unused without K-range). It runs a few cases through that
copy, then prints, per case, the median cycles between consecutive points of a steady
K-tile, in time order. `show` prints the same from a saved file (no GPU needed).

    python tools/probes/sm90_trace.py run [--out traces.pt]     # on the H200
    python tools/probes/sm90_trace.py show traces.pt
    python tools/probes/sm90_trace.py timeline [--out timeline.pt]  # on the H200
    python tools/probes/sm90_trace.py show timeline.pt
    python tools/probes/sm90_trace.py timeline --module build/old/submission.py --only "tile_n 256"

--module instruments another submission.py (an A/B of two kernels' timelines), --only runs
the cases whose name contains the text.

`timeline` stamps %globaltimer (ns, one clock for all SMs) instead, in every CTA, and adds
the per-CTA points of CTA_EVENTS (kernel entry .. CTA end) and a tile's first-stage landing
(TILE_DATA_EVENT). Its
table places a CTA's points on one axis from the grid's first entry: where a kernel's
fixed cost (pipeline fill, first-tile prologue, epilogue, tail) goes. Traced kernels use the
split-K flags pointer for the buffer, so the cases are whole-tile configs only.

Points of a K-tile (E = trace_names(groups)): start; waitG after group G's wait_group;
issG after its commit; tokwait after the token ring's wait (group 0); chunks after the
next K-tile's packed tokens are loaded; publish after their arrive; loadw after the next
K-tile's weights are loaded and the stage released; `next` is the next K-tile's start.
A gap is all the warp did between two stamps: wait1 comes after decoding and storing token
words 0, 1 as well as after group 1's wait_group.
The stamps cost about 2 % at tile_n 128 and up to 9 % at 256 (traced against untraced
kernel time, docs/performance.md), so compare traced runs with traced runs.
"""

import argparse
import re
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

TRACE_MAXK = 64  # K-tiles recorded per warp (by the consumer's token-ring count)
TRACE_EV = 30  # slots per K-tile: 2 x groups + 5 K-tile points, 21-24 tile points, 25-29 epilogue points
TRACE_CTAS = 8
TIMELINE_CTAS = 132
TILE_EVENTS = {21: "wait_group(0)", 22: "epilogue done", 23: "tile start"}
# per-CTA points of a timeline, in the last K-tile slot of the CTA's warp 0
CTA_EVENTS = {0: "kernel entry", 3: "barriers ready", 4: "schedule read", 5: "producer unit read",
              1: "first TMA issue", 6: "first stage issued", 2: "CTA end"}
TILE_DATA_EVENT = 24  # a tile's first stage has landed (consumer, after its wait)
# store_tile's points (timeline only), in the tile's last K-tile slot: after its first
# wait for earlier stores' reads, after the barrier, after each block's epilogue, after its
# final wait for block 0's read (ring staging)
EPILOGUE_EVENTS = {25: "boxes free", 26: "barrier", 27: "block 0 staged+stored", 28: "block 1 staged+stored",
                   29: "block 0 read"}


def _helpers(ctas: int, clock: str) -> str:
    return f'''
TRACE_MAXK = {TRACE_MAXK}
TRACE_EV = {TRACE_EV}
TRACE_CTAS = {ctas}
TRACE_BUF = None


@dsl_user_op
def clock32(*, loc=None, ip=None) -> Int32:
    return _asm_value(Int32, [], "mov.u32 $0, {clock};", "=r", loc, ip)


@cute.jit
def trace_ev(tr, kt, e: int):
    mT, base, on = tr
    if on and kt < TRACE_MAXK - 1:
        mT[base + kt * TRACE_EV + e] = clock32()


@cute.jit
def trace_cta(flags_ptr, warps: int, e: int):
    bidx_, _, _ = cute.arch.block_idx()
    if bidx_ < TRACE_CTAS:
        mT = cute.make_tensor(flags_ptr, cute.make_layout(1 << 26))
        mT[(bidx_ * warps * TRACE_MAXK + TRACE_MAXK - 1) * TRACE_EV + e] = clock32()

'''


def trace_names(groups: int) -> dict[int, str]:
    names = {0: "start"}
    for g in range(groups):
        names[1 + 2 * g] = f"wait{g}"
        names[2 + 2 * g] = f"iss{g}"
    names.update({2 * groups + 1: "tokwait", 2 * groups + 2: "chunks", 2 * groups + 3: "publish",
                  2 * groups + 4: "loadw"})
    return names


def _insert_after(text: str, pattern: str, stamp: str, count: int = 1, before: bool = False,
                  continued: bool = False) -> str:
    """`stamp` on a new line after (or `before`) each of the first `count` lines matching
    `pattern`, at that line's indentation (continued: the matching line ends a statement
    begun on the line above, whose indentation it takes)."""
    lines = text.split("\n")
    hits = [i for i, line in enumerate(lines) if re.search(pattern, line)]
    if len(hits) < count:
        raise ValueError(f"instrumenting submission.py: no line matches {pattern!r}; update tools/probes/sm90_trace.py")
    for i in reversed(hits[:count]):
        indent = re.match(r"\s*", lines[i - 1 if continued else i]).group(0)
        lines.insert(i if before else i + 1, indent + stamp)
    return "\n".join(lines)


def _replace(text: str, old: str, new: str) -> str:
    if old not in text:
        raise ValueError(f"instrumenting submission.py: {old!r} not found; update tools/probes/sm90_trace.py")
    return text.replace(old, new, 1)


def traced_source(src: str, timeline: bool = False) -> str:
    """submission.py's text -> the instrumented copy's: %clock in the first TRACE_CTAS
    CTAs, or with `timeline` %globaltimer in all, plus the per-CTA points."""
    helpers = _helpers(TIMELINE_CTAS, "%globaltimer_lo") if timeline else _helpers(TRACE_CTAS, "%clock")
    src = _replace(src, "\n@dsl_user_op\ndef ld_shared_v4(", helpers + "\n@dsl_user_op\ndef ld_shared_v4(")
    if timeline:
        pre, sep, sm90 = src.partition("class Sm90Fp4GroupedGemm:")
        if not sep:
            raise ValueError("instrumenting submission.py: no Sm90Fp4GroupedGemm; update tools/probes/sm90_trace.py")
        sm90 = _insert_after(sm90, r"^\s+warp_idx = cute\.arch\.make_warp_uniform\(cute\.arch\.warp_idx\(\)\)$",
                             "if tidx == 0:\n            trace_cta(flags_ptr, self.wgs * 4, 0)")
        sm90 = _replace(sm90, "self.producer(guard, storage, ab_pipeline, mSizes, mPtrs, mUnits, tmaps_ptr, span)",
                        "self.producer(guard, storage, ab_pipeline, mSizes, mPtrs, mUnits, tmaps_ptr, span, flags_ptr)")
        sm90 = _replace(sm90, "def producer(self, guard, storage, ab_pipeline, mSizes, mPtrs, mUnits, tmaps_ptr, span):",
                        "def producer(self, guard, storage, ab_pipeline, mSizes, mPtrs, mUnits, tmaps_ptr, span, flags_ptr):")
        # points that wait for what they time: a load's value in the condition
        sm90 = _insert_after(sm90, r"^        if cutlass\.const_expr\(self\.cfg\.pdl\):$",
                             "if tidx == 0:\n            trace_cta(flags_ptr, self.wgs * 4, 3)", before=True)
        sm90 = _insert_after(sm90, r"^        span = tuple\(mRanges\[i, bidx\]",
                             "if tidx == 0 and span[0] >= 0:\n            trace_cta(flags_ptr, self.wgs * 4, 4)")
        sm90 = _insert_after(sm90, r"^            tensormap_acquire\(desc_a\)$",
                             "if lane == 0 and u == span[0] and n + rest_k >= 0:\n"
                             "                trace_cta(flags_ptr, self.wgs * 4, 5)", before=True)
        sm90 = _insert_after(sm90, r"^                if cutlass\.const_expr\(not guard\.enabled\):$",
                             "if state.count == 0 and lane == 0:\n                    trace_cta(flags_ptr, self.wgs * 4, 1)",
                             before=True)
        sm90 = _insert_after(sm90, r"^                ab_pipeline\.producer_commit\(state\)$",
                             "if state.count == 0 and lane == 0:\n                    trace_cta(flags_ptr, self.wgs * 4, 6)")
        sm90 = _insert_after(sm90, r"^\s+bulk_wait_read\(Int32\(tidx % 128 == 0\)\)$",
                             "if tidx == 0:\n            trace_cta(split[1], self.wgs * 4, 2)")
        src = pre + sep + sm90
    head, sep, rest = src.partition("    def k_tile(")
    if not sep:
        raise ValueError("instrumenting submission.py: no k_tile; update tools/probes/sm90_trace.py")
    body, sep2, tail = rest.partition("    @cute.jit\n    def epilogue(")
    body = _replace(body, "wgt, wm, sc, where, kt):", "wgt, wm, sc, where, kt, tr):")
    body = _insert_after(body, r"^\s+groups = 4 \* self\.blocks$", "kt_ = tok_r.count; trace_ev(tr, kt_, 0)")
    body = _insert_after(body, r"warpgroup\.wait_group\(depth\)$", "trace_ev(tr, kt_, 1 + 2 * g)")
    body = _insert_after(body, r'"sm90\.consumer\.tokens", u, kt\)$', "trace_ev(tr, kt_, 2 * groups + 1)",
                         continued=True)
    body = _insert_after(body, r"warpgroup\.commit_group\(\)$", "trace_ev(tr, kt_, 2 + 2 * g)")
    body = _insert_after(body, r"= self\.token_chunks\(", "trace_ev(tr, kt_, 2 * groups + 2)")
    body = _insert_after(body, r"self\.publish_tokens\(tok_pipeline, tok_w\)$", "trace_ev(tr, kt_, 2 * groups + 3)")
    body = _insert_after(body, r"self\.release_fault\(guard, u, kt \+ 1, k_tiles, ends\)\)$",
                         "trace_ev(tr, kt_, 2 * groups + 4)", continued=True)
    # consume_tile (in head): the trace handle, tile points, and tr passed to k_tile
    head = _insert_after(head, r"^        packed, scales = self\.token_chunks\(storage, ab_pipeline, ahead, tok, where, Int32\(-1\)\)$",
                         f"trace_ev(tr, tok_r.count, {TILE_DATA_EVENT})")
    head = _insert_after(
        head, r"^\s+ahead, tok_w, tok_r = states$",
        "bidx_, _, _ = cute.arch.block_idx(); "
        "tr = (cute.make_tensor(split[1], cute.make_layout(1 << 26)), "
        "(bidx_ * (self.wgs * 4) + tidx // 32) * (TRACE_MAXK * TRACE_EV), "
        "tidx % 32 == 0 and bidx_ < TRACE_CTAS); trace_ev(tr, tok_r.count, 23)")
    head = _insert_after(head, r"ahead, tok_w, tok_r, tok, wgt, wm, sc, where, [^,]+,$", "tr,", count=2)
    head = _insert_after(head, r"^\s+cute\.nvgpu\.warpgroup\.wait_group\(0\)$", "trace_ev(tr, tok_r.count - 1, 21)")
    head = _replace(head, "        return ahead, tok_w, tok_r\n",
                    "        trace_ev(tr, tok_r.count - 1, 22)\n        return ahead, tok_w, tok_r\n")
    if timeline:
        head = _replace(head, "                   tok_w, last, guard, fixup=None):\n",
                        "                   tok_w, last, guard, fixup=None, tr=None):\n")
        head = _replace(head, "tok_w, last, guard, (split, mUnits[7, u], u))", "tok_w, last, guard, (split, mUnits[7, u], u), tr)")
        # the whole-tile calls with and without K-range
        head = _replace(head, "rows, tok_w, last,\n                                guard)\n",
                        "rows, tok_w, last,\n                                guard, None, tr)\n")
        head = _replace(head, "mPtrs, g, m, row_a, tn, rows, tok_w, last, guard)\n",
                        "mPtrs, g, m, row_a, tn, rows, tok_w, last, guard, None, tr)\n")
        head = _insert_after(head, r"^        bulk_wait_read\(lead\)$", "trace_ev(tr, tok_w.count - 1, 25)")
        # past the barrier that frees the boxes (the watchdog's build votes in it)
        head = _insert_after(head, r"^        self\.store_blocks\(acc, boxes, ", "trace_ev(tr, tok_w.count - 1, 26)", before=True)
        head = _replace(head, "rows, last, base, live)\n", "rows, last, base, live, tr, tok_w)\n")
        head = _replace(head, "rows: int, last, base, live):\n", "rows: int, last, base, live, tr=None, tok_w=None):\n")
        head = _replace(head, "None if base is None else base + b * self.partial_block_bytes, live)\n",
                        "None if base is None else base + b * self.partial_block_bytes, live)\n"
                        "            trace_ev(tr, tok_w.count - 1, 27 + b)\n")
        head = _insert_after(head, r"^            bulk_wait_read\(lead, pending=1\)$", "trace_ev(tr, tok_w.count - 1, 29)")
    tail = _replace(tail, "flags = KernelArg(cutlass.Int32, 0, True) if scratch is None else gmem_arg(scratch.flags, cutlass.Int32)",
                    "flags = gmem_arg(TRACE_BUF, cutlass.Int32)")
    return head + sep + body + sep2 + tail


def load_traced(tmp: Path, timeline: bool = False, module: Path = ROOT / "submission.py"):
    from tools.probes.sm90_sweep import load_submission

    (tmp / "submission.py").write_text(traced_source(module.read_text(), timeline))
    return load_submission(str(tmp / "submission.py"))


def gap_table(rec: dict) -> str:
    """Median cycles between consecutive points of the steady K-tiles (all but each CTA's
    first two and last two recorded, and those followed by a new tile), over the recorded
    warps, in time order; then the epilogue's median."""
    import torch

    groups, warps = 4 * rec["blocks"], 4 * rec["wgs"]
    # the kernel's layout: (CTA, its consumer warp, K-tile, point), warps = 4 x consumer WGs
    ev = rec.get("ev", 24)  # files saved before the tile-data point have 24 slots
    t = rec["trace"][: TRACE_CTAS * warps * TRACE_MAXK * ev]
    t = t.view(TRACE_CTAS, warps, TRACE_MAXK, ev).to(torch.int64)
    names = trace_names(groups)
    rows, tiles = [], []
    for cta in range(TRACE_CTAS):
        kts = [k for k in range(TRACE_MAXK) if t[cta, 0, k, 0] != 0]
        for w in range(warps):
            for k in kts[2:-2]:
                if k + 1 not in kts or t[cta, w, k, 21] != 0:
                    continue  # the next stamp is another tile's
                start = t[cta, w, k, 0]
                rel = {e: int((t[cta, w, k, e] - start) & 0xFFFFFFFF) for e in names if t[cta, w, k, e] != 0}
                rel["next"] = int((t[cta, w, k + 1, 0] - start) & 0xFFFFFFFF)
                rows.append(rel)
            for k in kts:
                if t[cta, w, k, 21] != 0 and t[cta, w, k, 22] != 0:
                    tiles.append(int((t[cta, w, k, 22] - t[cta, w, k, 21]) & 0xFFFFFFFF))
    if not rows:
        return "  (no steady K-tiles recorded)"
    # a tile's last K-tile has no next-K-tile points: medians over the K-tiles that have each
    keys = [e for e in names if sum(e in r for r in rows) * 2 > len(rows)] + ["next"]
    med = {e: statistics.median(r[e] for r in rows if e in r) for e in keys}
    parts, prev = [], 0
    for e in sorted(keys, key=lambda e: med[e]):
        parts.append(f"{names.get(e, e)} +{med[e] - prev:.0f}")
        prev = med[e]
    epi = f"; epilogue median {statistics.median(tiles):.0f} cycles over {len(tiles)} tiles" if tiles else ""
    return f"  K-tile {med['next']:.0f} cycles: " + ", ".join(parts) + epi


def timeline_table(rec: dict) -> str:
    """Per point, min / median / max over the CTAs of its time (us) after the grid's first
    kernel entry; a CTA's first tile's points, its last tile's epilogue, and the steady
    K-tile (median ns between consecutive K-tile starts of one tile)."""
    import torch

    groups, warps = 4 * rec["blocks"], 4 * rec["wgs"]
    t = rec["trace"][: TIMELINE_CTAS * warps * TRACE_MAXK * TRACE_EV]
    t = t.view(TIMELINE_CTAS, warps, TRACE_MAXK, TRACE_EV).to(torch.int64)  # saved with ev = TRACE_EV
    hdr = t[:, 0, TRACE_MAXK - 1]
    ctas = [c for c in range(TIMELINE_CTAS) if hdr[c, 0] != 0]
    if not ctas:
        return "  (no CTAs recorded)"
    t0 = min(int(hdr[c, 0]) for c in ctas)

    def rel(x) -> float:  # us after the first entry (the low 32 bits of the ns clock)
        return ((int(x) - t0) & 0xFFFFFFFF) / 1000.0

    points = {name: [] for name in ("kernel entry", "barriers ready", "schedule read", "first tile start",
                                    "producer unit read", "first TMA issue", "first stage issued", "first stage landed",
                                    "K-tile 0 tokens ready", "first wgmma issued",
                                    "last wait_group(0)", "last epilogue done", "CTA end")}
    steady = []
    for c in ctas:
        kts = [k for k in range(TRACE_MAXK - 1) if t[c, 0, k, 0] != 0]
        for e, name in CTA_EVENTS.items():
            if hdr[c, e] != 0:
                points[name].append(rel(hdr[c, e]))
        if not kts:
            continue
        k0 = kts[0]
        points["first tile start"].append(rel(t[c, 0, k0, 23]))
        if t[c, 0, k0, TILE_DATA_EVENT] != 0:
            points["first stage landed"].append(rel(t[c, 0, k0, TILE_DATA_EVENT]))
        points["K-tile 0 tokens ready"].append(rel(t[c, 0, k0, 2 * groups + 1]))
        points["first wgmma issued"].append(rel(t[c, 0, k0, 2]))
        last = [k for k in kts if t[c, 0, k, 22] != 0]
        if last:
            points["last wait_group(0)"].append(rel(t[c, 0, last[-1], 21]))
            points["last epilogue done"].append(rel(t[c, 0, last[-1], 22]))
        steady += [int((t[c, 0, k + 1, 0] - t[c, 0, k, 0]) & 0xFFFFFFFF) for k in kts
                   if k + 1 in kts and t[c, 0, k, 21] == 0]
    lines = [f"  {len(ctas)} CTAs; steady K-tile {statistics.median(steady):.0f} ns" if steady else f"  {len(ctas)} CTAs"]
    for name, v in points.items():
        if v:
            lines.append(f"  {name:22s} min {min(v):7.2f}  median {statistics.median(v):7.2f}  max {max(v):7.2f} us")
    lines += transition_lines(t, ctas, groups)
    return "\n".join(lines)


# A tile after a CTA's first: from the previous tile's last K-tile start to this tile's first
# wgmma, as (slot of the previous tile's last K-tile or of this tile's first, event) pairs
TRANSITION = (("prev last K-tile start", -1, 0), ("prev wait_group(0)", -1, 21), ("prev epilogue done", -1, 22),
              ("tile start", 0, 23), ("first stage landed", 0, TILE_DATA_EVENT), ("K-tile 0 tokens ready", 0, None),
              ("first wgmma issued", 0, 2))


def transition_lines(t, ctas, groups: int) -> list[str]:
    """Median ns between the consecutive points of TRANSITION over every tile that is not
    its CTA's first (where the K-loop stops for an epilogue and a new tile's first tokens):
    the per-unit cost that the cost model's SM90_TILE_US stands for."""
    steps = [[] for _ in TRANSITION[1:]]
    whole = []
    for c in ctas:
        kts = [k for k in range(TRACE_MAXK - 1) if t[c, 0, k, 0] != 0]
        for k0 in kts[1:]:
            if t[c, 0, k0, 23] == 0 or k0 - 1 not in kts or t[c, 0, k0 - 1, 22] == 0:
                continue
            stamps = [int(t[c, 0, k0 + d, 2 * groups + 1 if e is None else e]) for _, d, e in TRANSITION]
            if 0 in stamps:
                continue
            for i in range(1, len(stamps)):
                steps[i - 1].append((stamps[i] - stamps[i - 1]) & 0xFFFFFFFF)
            whole.append((stamps[-1] - stamps[0]) & 0xFFFFFFFF)
    if not whole:
        return []
    epi = {e: [] for e in EPILOGUE_EVENTS}
    for c in ctas:
        for k in range(TRACE_MAXK - 1):
            if t[c, 0, k, 21] != 0 and t[c, 0, k, 22] != 0:
                prev = int(t[c, 0, k, 21])
                for e in EPILOGUE_EVENTS:
                    if t[c, 0, k, e] != 0:
                        epi[e].append((int(t[c, 0, k, e]) - prev) & 0xFFFFFFFF)
                        prev = int(t[c, 0, k, e])
    out = [f"  tile transitions ({len(whole)} tiles after a CTA's first), median ns:"]
    if any(epi.values()):
        out.append("    epilogue, each point after the one before (from wait_group(0)), all tiles:")
        out += [f"      -> {EPILOGUE_EVENTS[e]:24s} {statistics.median(v):7.0f}" for e, v in epi.items() if v]
    for (name, _, _), v in zip(TRANSITION[1:], steps):
        out.append(f"    -> {name:24s} {statistics.median(v):7.0f}")
    out.append(f"    last K-tile start -> first wgmma {statistics.median(whole):7.0f} (min {min(whole)}, max {max(whole)})")
    return out


CASES = {
    # one tile per CTA of 132, 16 K-tiles each
    "one tile, tile_n 128, 128 tokens": (dict(m=(128,), n=(132 * 128,), k=(2048,), g=1, seed=3), dict(tile_n=128, narrow=(64,))),
    "one tile, tile_n 256, 128 tokens": (dict(m=(128,), n=(132 * 256,), k=(2048,), g=1, seed=3), dict(tile_n=256, narrow=(64,))),
    "one tile, tile_n 128, 64 tokens": (dict(m=(64,), n=(132 * 128,), k=(2048,), g=1, seed=3), dict(tile_n=128, narrow=(64,))),
    "benchmark 2, tile_n 128": (dict(m=(192, 320), n=(3072, 3072), k=(4096, 4096), g=2, seed=1), dict(tile_n=128, narrow=(64,))),
    "benchmark 1, tile_n 256": (dict(m=(40, 76, 168, 72, 164, 148, 196, 160), n=(7168,) * 8, k=(2048,) * 8, g=8, seed=1),
                                dict(tile_n=256, narrow=(64,))),
}


TIMELINE_CASES = {
    "benchmark 3, tile_n 128": (dict(m=(128, 384), n=(4096, 4096), k=(1536, 1536), g=2, seed=1), dict(tile_n=128, narrow=(64,))),
    "benchmark 3, tile_n 256 whole tiles": (dict(m=(128, 384), n=(4096, 4096), k=(1536, 1536), g=2, seed=1),
                                            dict(tile_n=256, narrow=(64,))),
    "benchmark 2, tile_n 128": (dict(m=(192, 320), n=(3072, 3072), k=(4096, 4096), g=2, seed=1), dict(tile_n=128, narrow=(64,))),
    "one tile, tile_n 128, K 512": (dict(m=(128,), n=(132 * 128,), k=(512,), g=1, seed=3), dict(tile_n=128, narrow=(64,))),
    "benchmark 1, tile_n 256 whole tiles": (dict(m=(40, 76, 168, 72, 164, 148, 196, 160), n=(7168,) * 8, k=(2048,) * 8,
                                                 g=8, seed=1), dict(tile_n=256, narrow=(96, 64))),
    "three tiles per CTA, tile_n 256": (dict(m=(128,), n=(3 * 132 * 256,), k=(2048,), g=1, seed=3),
                                        dict(tile_n=256, narrow=(64,))),
    "three tiles per CTA, tile_n 128": (dict(m=(128,), n=(3 * 132 * 128,), k=(2048,), g=1, seed=3),
                                        dict(tile_n=128, narrow=(64,))),
}


def run(out: Path, timeline: bool = False, module: Path = ROOT / "submission.py", only: str = "") -> None:
    """Each case once to compile and check, then traced: right after an identical run (L2
    warm: the check in between evicts it, so that run is repeated), and (timeline) again
    after flushing L2 the way eval.py's benchmark does before its calls. Timelines taken before
    that repeat existed (before 2444083) ran their "warm" rows after the check, with L2
    cold."""
    import torch

    import reference

    with tempfile.TemporaryDirectory() as tmp:
        S = load_traced(Path(tmp), timeline, module)
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        ctas = TIMELINE_CTAS if timeline else TRACE_CTAS
        S.TRACE_BUF = torch.zeros(ctas * 12 * TRACE_MAXK * TRACE_EV, dtype=torch.int32, device="cuda")
        flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
        results, runners = {}, {}
        for name, (case, kw) in (TIMELINE_CASES if timeline else CASES).items():
            if only and only not in name:
                continue
            cfg = S.make_sm90_config(kw["tile_n"], narrow=kw["narrow"], pdl=False)
            data = reference.generate_input(**case)
            problem = S.validate_inputs(data)
            runner = runners.setdefault(cfg, S.GroupedGemmRunner(S.sm90_backend(), num_sms=sms))
            runner.run(data, problem, cfg)  # compile, schedule, descriptors
            torch.cuda.synchronize()
            ok = all(torch.allclose(abc[2], r, rtol=1e-3, atol=1e-3)
                     for abc, r in zip(data[0], reference.ref_kernel(tuple(data))))
            for cold in (False, True) if timeline else (False,):
                if cold:
                    flush.zero_()
                else:
                    # the reference check above evicts L2: one more run makes it warm
                    runner.run(data, problem, cfg)
                torch.cuda.synchronize()
                S.TRACE_BUF.zero_()
                runner.run(data, problem, cfg)
                torch.cuda.synchronize()
                key = f"{name}, L2 flushed" if cold else name
                results[key] = dict(trace=S.TRACE_BUF.cpu().clone(), blocks=cfg.blocks, wgs=cfg.consumer_wgs, ok=ok,
                                    timeline=timeline, ev=TRACE_EV)
                table = timeline_table(results[key]) if timeline else gap_table(results[key])
                print(f"{key}: {'ok' if ok else 'MISMATCH'}\n{table}", flush=True)
        torch.save(results, out)
        print(f"saved {out}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="run and timeline need a Hopper (sm_90) GPU with the CuTe DSL; "
                                        "show runs anywhere.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", default="traces.pt")
    tl = sub.add_parser("timeline")
    tl.add_argument("--out", default="timeline.pt")
    for p in (r, tl):
        p.add_argument("--module", default=str(ROOT / "submission.py"), help="the submission.py to instrument")
        p.add_argument("--only", default="", help="only the cases whose name contains this")
    s = sub.add_parser("show")
    s.add_argument("path")
    args = ap.parse_args()
    if args.cmd in ("run", "timeline"):
        run(Path(args.out), timeline=args.cmd == "timeline", module=Path(args.module), only=args.only)
    else:
        import torch

        for name, rec in torch.load(args.path).items():
            print(f"{name}:\n{timeline_table(rec) if rec.get('timeline') else gap_table(rec)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
