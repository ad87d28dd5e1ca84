"""The kernels' watchdog: every wait on an mbarrier (or a split-K flag) gives up once it has
waited longer than a deadline, the CTA aborts, and the first wait of the launch that gave up
is written to an error record in host-mapped memory, which the host reads without
synchronizing.

Device side (WaitGuard): a per-CTA block in shared memory holds the abort flag and what a
timed-out wait needs (the timeout, the record's and the claim word's addresses, the launch's
tag); the waits are inline PTX whose fast path is one mbarrier.test_wait and a branch.

Host side: the wait sites (WaitSite, stable ids and the words the warning uses), the
NVFP4_GEMM_WATCHDOG_MS and NVFP4_GEMM_INJECT_HANG switches, the record (WatchdogRecord) and
its decoding (decode_record, WaitTimeout.message).
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
from collections.abc import Sequence

import torch

from .binding import fake_ptr, gmem_arg, int_arg
from .common import Int32, Int64, cute, cutlass, dsl_user_op
from .ptx import _asm_effect, _asm_value, _v

WATCHDOG_ENV = "NVFP4_GEMM_WATCHDOG_MS"
INJECT_ENV = "NVFP4_GEMM_INJECT_HANG"
DEFAULT_WATCHDOG_MS = 2000
# NVFP4_GEMM_WATCHDOG_MS=0: a timeout no launch reaches (146 years); the waits still poll
OFF_TIMEOUT_NS = 1 << 62


@dataclasses.dataclass(frozen=True)
class WaitSite:
    """One wait of a kernel: `id` is what the record holds (stable), `name` what
    NVFP4_GEMM_INJECT_HANG takes, `role` and `what` the warning's words ("{stage}" is the
    stage, buffer or slot the wait was for), `inject` how the fault-injection switch makes
    this wait hang."""

    id: int
    name: str
    kernel: str
    role: str
    what: str
    # how NVFP4_GEMM_INJECT_HANG makes this wait hang (None: it has no fault of its own; a
    # drain expires only where another site's fault kept what it waits for from completing)
    inject: str | None
    # the record holds the k-block before the awaited one (the K-loop's counter): add 1
    next_kblock: bool = False
    # which hung wait is the hang's cause (hang_cause): the warps that wait here (`party`),
    # the warps whose progress completes the wait (`waits_on`; None: another CTA's), whether
    # it waits for a buffer to be given back (`backpressure`: it waits on the warps behind
    # it) and whether it waits at the end of its tile (the whole tile's K-loop, or the tail)
    party: str = ""
    waits_on: str | None = None
    backpressure: bool = False
    at_end: bool = False
    # a drain (abort protocol, design.md section 9): a wait for work already issued, which
    # the abort flag does not cut short and whose bound is DRAIN_FACTOR x the deadline
    drain: bool = False

    @property
    def unit(self) -> str:
        """What the record's tile number counts: the Hopper kernel's work units (a tile or
        one K-range piece of it), the Blackwell kernel's schedule rows (tiles)."""
        return "work unit" if self.kernel == "sm90" else "tile"


WAIT_SITES = (
    WaitSite(1, "sm90.producer.empty", "sm90", "the TMA warp", "stage {stage} (empty)",
             "the consumers leave out their releases of the first stage",
             party="tma", waits_on="consumers", backpressure=True),
    WaitSite(2, "sm90.producer.tail", "sm90", "the TMA warp's tail", "stage {stage} (empty)",
             "the consumers leave out their releases of the last unit's last K-tile",
             party="tma", waits_on="consumers", backpressure=True, at_end=True),
    WaitSite(3, "sm90.consumer.full", "sm90", "the consumer warpgroups", "stage {stage} (full)",
             "the first stage expects 16 bytes more than its loads bring", next_kblock=True,
             party="consumers", waits_on="tma"),
    WaitSite(4, "sm90.consumer.tokens", "sm90", "the consumer warpgroups", "token buffer {stage} (full)",
             "the consumers leave out their arrives on the first token buffer",
             party="consumers", waits_on="consumers"),
    WaitSite(5, "sm90.fixup.flag", "sm90", "a FIXUP warpgroup", "split-K slot {stage} (flag)",
             "the PARTIAL pieces leave their flags unset", party="consumers"),
    WaitSite(6, "sm90.producer.drain", "sm90", "the TMA warp's drain", "the loads of stage {stage} (full)",
             None, party="tma", at_end=True, drain=True),
    WaitSite(11, "sm100.tma.empty", "sm100", "the TMA warp", "stage {stage} (empty)",
             "the MMA warp leaves out its release of the first stage",
             party="tma", waits_on="mma", backpressure=True),
    WaitSite(12, "sm100.tma.tail", "sm100", "the TMA warp's tail", "stage {stage} (empty)",
             "the MMA warp leaves out its release of its last k-block",
             party="tma", waits_on="mma", backpressure=True, at_end=True),
    WaitSite(13, "sm100.mma.full", "sm100", "the MMA warp", "stage {stage} (full)",
             "the first stage expects 16 bytes more than its loads bring", party="mma", waits_on="tma"),
    WaitSite(14, "sm100.mma.acc_empty", "sm100", "the MMA warp", "accumulator {stage} (empty)",
             "the epilogue leaves out its release of the first accumulator",
             party="mma", waits_on="epilogue", backpressure=True),
    WaitSite(15, "sm100.mma.tail", "sm100", "the MMA warp's tail", "accumulator {stage} (empty)",
             "the epilogue leaves out its release of its last accumulator",
             party="mma", waits_on="epilogue", backpressure=True, at_end=True),
    WaitSite(16, "sm100.epilogue.acc_full", "sm100", "the epilogue warps", "accumulator {stage} (full)",
             "the MMA warp leaves out its commit of the first accumulator",
             party="epilogue", waits_on="mma", at_end=True),
    WaitSite(17, "sm100.teardown.mma_done", "sm100", "the epilogue's TMEM release",
             "the MMA warp's last tcgen05 operations",
             "the MMA warp leaves out its commit of the teardown barrier",
             party="epilogue", waits_on="mma", at_end=True, drain=True),
    WaitSite(18, "sm100.teardown.peer", "sm100", "the CTA pair's exit", "every warp of both CTAs",
             "the CTA pair's second CTA leaves out its epilogue warp 0's arrives on the pair's exit barriers",
             party="epilogue", at_end=True, drain=True),
    WaitSite(19, "sm100.tma.drain", "sm100", "the TMA warp's drain", "the loads of stage {stage} (full)",
             None, party="tma", at_end=True, drain=True),
)
SITE_BY_ID = {s.id: s for s in WAIT_SITES}
SITE_BY_NAME = {s.name: s for s in WAIT_SITES}
# the sites NVFP4_GEMM_INJECT_HANG can make hang (a drain has no fault of its own)
INJECTABLE = tuple(s.name for s in WAIT_SITES if s.inject is not None)
# a drain's bound is this many deadlines (design.md section 9: what it waits for was issued
# before the CTA gave up and completes in microseconds; the factor only orders the bounds)
DRAIN_FACTOR = 2


def site_id(name: str) -> int:
    return SITE_BY_NAME[name].id


def watchdog_timeout_ms() -> int:
    """NVFP4_GEMM_WATCHDOG_MS: how long a wait may take before the kernel gives up (default
    2000); 0 turns the deadline off (for sanitizer runs and profiling)."""
    text = os.environ.get(WATCHDOG_ENV, "").strip()
    if not text:
        return DEFAULT_WATCHDOG_MS
    try:
        ms = int(text)
    except ValueError:
        ms = -1
    if ms < 0:
        raise ValueError(f"{WATCHDOG_ENV}={text!r}; expected milliseconds (an integer >= 0; 0: off)")
    return ms


def timeout_ns(ms: int) -> int:
    return OFF_TIMEOUT_NS if ms == 0 else ms * 1_000_000


def requested_injection() -> tuple[str, str | None] | None:
    """NVFP4_GEMM_INJECT_HANG=SITE[:CONFIG]: a wait site's name (WAIT_SITES) whose wait the
    kernels are built to hang, for tests of the watchdog, in every config or only in the one
    the warnings call CONFIG; unset or empty: none. Returns (site, config name or None)."""
    text = os.environ.get(INJECT_ENV, "").strip()
    if not text:
        return None
    name, _, config = text.partition(":")
    if name not in INJECTABLE:
        raise ValueError(f"{INJECT_ENV}={text!r}: no injectable wait site {name!r}; expected one of "
                         f"{', '.join(INJECTABLE)}")
    return name, config or None


@dataclasses.dataclass(frozen=True)
class WatchSettings:
    """What a kernel is compiled with: the watchdog (bounded waits) on or off, and the wait
    site whose fault is injected (None: none). Part of the compile key."""

    enabled: bool = True
    inject: str | None = None

    def __post_init__(self):
        if self.inject is not None and self.inject not in INJECTABLE:
            raise ValueError(f"no injectable wait site {self.inject!r}")
        if self.inject is not None and not self.enabled:
            raise ValueError("a fault is injected only into a build with the watchdog (it would hang)")

    def injects(self, name: str) -> bool:
        assert name in SITE_BY_NAME, name
        return self.inject == name


# A CTA's block in shared memory (WaitGuard): byte offsets. Then one note per wait site
# (slot site id % NOTE_SLOTS) of the first wait there that gave up while it was waiting:
# its start on the clock (0: none; the compare-and-swap that claims the note), how long it
# waited, the site with the phase at bit 8, the stage (the split-K slot of a flag wait),
# tile and k-block. The CTA's first hung wait is the noted one that started first; the
# hang's cause is chosen on the host from all of them (hang_cause). BLK_ABORT_NS: the clock
# when the CTA gave up; BLK_PEER: the CTA pair's other block as a shared::cluster address
# (0: no pair), whose abort flag a give-up sets too; BLK_OWNER: nonzero where this CTA's
# give-up claimed the launch's record (the first CTA of the launch to give up writes it).
BLK_ABORT, BLK_TAG, BLK_TIMEOUT, BLK_CLAIM, BLK_RECORD, BLK_EXITS, BLK_ABORT_NS = 0, 4, 8, 16, 24, 32, 40
BLK_PEER, BLK_OWNER = 48, 52
BLK_NOTES = 64
NOTE_BYTES = 32
NOTE_SLOTS = 10
NOTE_START, NOTE_WAITED, NOTE_WHAT = 0, 8, 16
BLOCK_BYTES = BLK_NOTES + NOTE_BYTES * NOTE_SLOTS


# The error record: int32 words in host-mapped memory (the claim word is in device memory).
# The head holds the CTA's first hung wait (the note that started first); then the clock
# when that CTA gave up, and a copy of all its notes (NOTE_BYTES each, as in the block)
REC_FLAG, REC_SITE, REC_CTA, REC_TILE, REC_KBLOCK, REC_STAGE, REC_PHASE, REC_TAG = range(8)
REC_WAITED_NS = 8  # words 8-9: the nanoseconds the wait lasted (u64)
REC_ABORT_NS = 10  # words 10-11: the clock when the CTA gave up (u64)
REC_NOTES = 16
NOTE_WORDS = NOTE_BYTES // 4
RECORD_WORDS = REC_NOTES + NOTE_WORDS * NOTE_SLOTS
# the claim words, in device memory: word 0 is the record's owner, claimed once for the
# life of the record by the first wait of any CTA to time out (a compare-and-swap 0 -> 1)
CLAIM_WORDS = 4


@dataclasses.dataclass(frozen=True)
class WaitTimeout:
    """A record's contents: which wait gave up, where, and after how long."""

    site: WaitSite | None
    site_id: int
    cta: int
    tile: int
    kblock: int
    stage: int
    phase: int
    tag: int
    waited_ms: int
    # the drains that expired too (HungWait notes of drain sites other than the cause)
    drains: tuple = ()

    def describe(self) -> str:
        """'gave up after 2000 ms in the MMA warp waiting for stage 3 (full), tile 0, k-block
        0, phase 1, CTA 0', then each drain that expired as well."""
        if self.site is None:
            where, unit = f"at an unknown wait (site {self.site_id})", "tile"
        else:
            where = f"in {self.site.role} waiting for {self.site.what.format(stage=self.stage)}"
            unit = self.site.unit
        text = (f"gave up after {self.waited_ms} ms {where}, {unit} {self.tile}, k-block {self.kblock}, "
                f"phase {self.phase}, CTA {self.cta}")
        for d in self.drains:
            text += (f"; then {d.site.role} waited {round(d.waited_ns / 1e6)} ms for "
                     f"{d.site.what.format(stage=d.stage)}, which did not complete either")
        return text

    def message(self, config_name: str, sizes, fallback: str) -> str:
        return f"{config_name}{sizes_text(sizes)} {self.describe()}; running {fallback}"


def sizes_text(sizes, shown: int = 4) -> str:
    """' on sizes [(M, N, K), ...]' (the first `shown` groups, then the count), or '' where
    the sizes are unknown."""
    if not sizes:
        return ""
    groups = [tuple(s[:3]) for s in sizes]
    text = ", ".join(str(g) for g in groups[:shown])
    if len(groups) > shown:
        text += f", ... ({len(groups)} groups)"
    return f" on sizes [{text}]"


@dataclasses.dataclass(frozen=True)
class HungWait:
    """One note of the record: a wait that gave up while it was waiting."""

    site: WaitSite | None
    site_id: int
    start_ns: int
    waited_ns: int
    stage: int
    tile: int
    kblock: int
    phase: int

    @property
    def position(self) -> tuple[int, int]:
        """Where in the CTA's schedule the waiting warps stand: (tile, k-block), the k-block
        past every real one where the wait is at the end of its tile."""
        return self.tile, (1 << 32) if self.site is not None and self.site.at_end else self.kblock


def _u64(u32: Sequence[int], word: int) -> int:
    return u32[word] | (u32[word + 1] << 32)


def _s32(word: int) -> int:
    return word - (1 << 32) if word & 0x80000000 else word


def _hung_wait(site_word: int, start: int, waited: int, stage: int, tile: int, kblock: int) -> HungWait:
    """A note's fields (unsigned words) as the wait's: the tile and k-block are signed (the
    Hopper consumers' K-loop counter starts at -1)."""
    site = SITE_BY_ID.get(site_word & 255)
    tile, kblock = _s32(tile), _s32(kblock) + (1 if site is not None and site.next_kblock else 0)
    return HungWait(site, site_word & 255, start, waited, stage, tile, kblock, site_word >> 8)


def decode_notes(u32: Sequence[int]) -> list[HungWait]:
    """The record's copy of the CTA's notes (unsigned words), those that are set."""
    notes = []
    for w in range(NOTE_SLOTS):
        base = REC_NOTES + NOTE_WORDS * w
        start = _u64(u32, base + NOTE_START // 4)
        if start:
            what = base + NOTE_WHAT // 4
            notes.append(_hung_wait(u32[what], start, _u64(u32, base + NOTE_WAITED // 4),
                                    *u32[what + 1:what + 4]))
    return notes


def waits_on(cause: HungWait, wait: HungWait) -> bool:
    """Whether `wait` hung because of `cause` (both hung in one CTA): cause's warps are those
    that complete wait, and they stand where they have not yet done so. A wait for data
    (a full barrier) waits on its producer standing at or before the data's place; a wait
    for a buffer back (backpressure) on its consumer standing before the buffer's next use
    (strictly: a consumer waiting for the very data the producer would load next is itself
    waiting on the producer). Which of two waits started first cannot tell this: a
    producer that runs ahead starts its backpressure wait as the consumer hangs. A site
    holds one note, so a wait never waits on its own site's."""
    if cause.site_id == wait.site_id or cause.site is None or wait.site is None or wait.site.waits_on is None:
        return False
    if cause.site.kernel != wait.site.kernel or cause.site.party != wait.site.waits_on:
        return False
    if wait.site.backpressure:
        return cause.position < wait.position
    return cause.position <= wait.position


def hang_cause(notes: Sequence[HungWait], abort_ns: int = 0) -> HungWait | None:
    """The hung wait that the CTA's other hung waits waited on: among the waits that were
    waiting when the CTA gave up (started before abort_ns; 0: all), one that waits on none
    of the others, the first to start where several do (or where each waits on another)."""
    before = [n for n in notes if not abort_ns or n.start_ns < abort_ns] or list(notes)
    causes = [n for n in before if not any(waits_on(m, n) for m in before)] or before
    return min(causes, key=lambda n: n.start_ns, default=None)


def decode_record(words: Sequence[int]) -> WaitTimeout | None:
    """The timeout a record holds, or None where its flag is clear: the hang's cause among
    the CTA's notes (hang_cause), else the head's first hung wait."""
    if not words[REC_FLAG]:
        return None
    u32 = [w & 0xFFFFFFFF for w in words]
    notes = decode_notes(u32)
    wait = hang_cause(notes, _u64(u32, REC_ABORT_NS))
    if wait is None:
        wait = _hung_wait(u32[REC_SITE] | (u32[REC_PHASE] << 8), 0, _u64(u32, REC_WAITED_NS),
                          u32[REC_STAGE], u32[REC_TILE], u32[REC_KBLOCK])
    drains = tuple(n for n in notes if n.site is not None and n.site.drain and n is not wait)
    return WaitTimeout(wait.site, wait.site_id, u32[REC_CTA], wait.tile, wait.kblock, wait.stage,
                       wait.phase, u32[REC_TAG], round(wait.waited_ns / 1e6), drains)


class WatchdogRecord:
    """One config's error record on one device: RECORD_WORDS int32 in pinned host memory,
    which the GPU writes directly (a pinned allocation is addressable from the device under
    unified addressing), and the claim words in device memory (CLAIM_WORDS: the writers'
    lock, the start of the note written). `tripped` reads the flag word without touching the GPU (a few tens of
    nanoseconds), so every launch may check it. On a device-less runner (the CPU tests) the
    record is ordinary host memory."""

    def __init__(self, device: torch.device | None):
        cuda = device is not None and device.type == "cuda"
        self.words = torch.zeros(RECORD_WORDS, dtype=torch.int32, pin_memory=cuda)
        self.claim = torch.zeros(CLAIM_WORDS, dtype=torch.int32, device=device if cuda else "cpu")
        self._flag = ctypes.c_int32.from_address(self.words.data_ptr() + 4 * REC_FLAG)

    @property
    def tripped(self) -> bool:
        return self._flag.value != 0

    def read(self) -> WaitTimeout | None:
        return decode_record(self.words.tolist()) if self.tripped else None


@dataclasses.dataclass(frozen=True)
class LaunchWatch:
    """What one launch passes its watchdog: the config's record, the launch's tag (the
    runner's name for its sizes) and the timeout."""

    record: WatchdogRecord
    tag: int
    timeout_ns: int

    def args(self) -> tuple:
        """The kernel's (record, claim, tag, timeout_ns) arguments."""
        return (gmem_arg(self.record.words, cutlass.Int32), gmem_arg(self.record.claim, cutlass.Int32),
                int_arg(Int32, self.tag), int_arg(Int64, self.timeout_ns))


def fake_watch_args() -> tuple:
    """The watchdog's kernel arguments for a compile without a GPU."""
    return fake_ptr(cutlass.Int32), fake_ptr(cutlass.Int32), Int32(0), Int64(0)


# ------------------------------------------------------------------------- device side
def note_offset(site: int) -> int:
    return BLK_NOTES + NOTE_BYTES * (site % NOTE_SLOTS)


# A waiting thread sleeps in mbarrier.try_wait at most this long before each check of the
# abort flag and the clock (the barrier's completion wakes it at once): once the CTA gave
# up, a wait that does not complete costs this.
SUSPEND_NS = 20_000

# Inline PTX of the waits. Operands: $0 the result (1 done, 0 gave up), $1 the block, $2
# the phase, $3 the tile, $4 the k-block, $5 the barrier's address (the split-K slot of a
# flag wait), $6 the flag's address (flag waits). Every branch is uniform across the warp
# (bra.uni, as in the DSL's own waits): its lanes read the same barrier, flag and clock in
# one instruction each, and the note's claim decides only predicated stores. Divergence,
# the thread's index, or the barrier's address used as data anywhere in the asm cost
# ptxas the K-loops' uniform registers (their address arithmetic in vector registers: 3-33
# more SASS instructions per K-tile on the Hopper K-loops, python tools/probes/sm90_sass.py
# --fast-path); the barrier's address as an address does not.
_PROLOGUE = "{\n.reg .pred p, e;\n.reg .b32 c, m, x;\n.reg .b64 t, t0, lim, old;\nmov.u32 $0, 1;\n"


def _slow_path(retry: str, site: int, stage: str, drain: bool, peer: bool) -> str:
    """The retries of a wait whose first probe failed, up to its give-up (WD_GIVEUP), for
    `site`. A drain ignores the abort flag (what it waits for was issued and completes on
    its own) and waits DRAIN_FACTOR x the deadline; `peer`: a give-up also sets the CTA
    pair's other abort flag."""
    note = note_offset(site)
    # the abort flag: a CTA that gave up pays nothing more (not in a drain)
    check_abort = "" if drain else "ld.volatile.shared.u32 c, [$1];\nsetp.ne.u32 p, c, 0;\n@p bra.uni WD_ABORTED;\n"
    limit = "ld.shared.u64 lim, [$1+8];\n" + (f"mul.lo.u64 lim, lim, {DRAIN_FACTOR};\n" if drain else "")
    tell_peer = ""
    if peer:  # the pair's other CTA gives up too: it must stop issuing into this one
        tell_peer = (f"ld.shared.u32 x, [$1+{BLK_PEER}];\nsetp.ne.u32 e, x, 0;\n"
                     "@e st.volatile.shared::cluster.u32 [x], 1;\n")
    return (
        # the wait's start on the clock (which wait of a CTA started first names the hang),
        # read once, with no other work before the first sleep
        "mov.u64 t0, %globaltimer;\n"
        "WD_SLOW:\n"
        # first the probe that sleeps until the barrier completes (or SUSPEND_NS pass): a
        # wait that completes then continues as soon as the DSL's own would
        + retry + check_abort +
        # past the block's timeout it gives up
        "mov.u64 t, %globaltimer;\n"
        + limit +
        "add.u64 lim, lim, t0;\n"
        "setp.ge.u64 p, t, lim;\n"
        "@p bra.uni WD_TIMEOUT;\n"
        "bra.uni WD_SLOW;\n"
        "WD_TIMEOUT:\n"
        # the whole CTA gives up: every other wait at its next check (the clock first: a
        # wait that started later was not waiting when the CTA gave up)
        f"st.volatile.shared.u64 [$1+{BLK_ABORT_NS}], t;\n"
        "st.volatile.shared.u32 [$1], 1;\n"
        + tell_peer +
        # the launch's first give-up owns the record (its CTA's last warp writes it, once)
        f"ld.shared.u64 lim, [$1+{BLK_CLAIM}];\n"
        "atom.global.cas.b32 c, [lim], 0, 1;\n"
        "setp.eq.u32 e, c, 0;\n"
        f"@e st.volatile.shared.u32 [$1+{BLK_OWNER}], 1;\n"
        "WD_ABORTED:\n"
        # a wait that was waiting notes itself in its site's note, the first there only (one
        # that came after the CTA gave up notes a later start, and loses to the hang)
        f"atom.shared.cas.b64 old, [$1+{note}], 0, t0;\n"
        "setp.eq.u64 e, old, 0;\n"
        "mov.u64 t, %globaltimer;\n"
        "sub.u64 t, t, t0;\n"
        + stage +
        "shl.b32 x, $2, 8;\n"
        f"or.b32 x, x, {site};\n"
        f"@e st.volatile.shared.v4.u32 [$1+{note + NOTE_WHAT}], {{x, c, $3, $4}};\n"
        f"@e st.volatile.shared.u64 [$1+{note + NOTE_WAITED}], t;\n"
        "WD_GIVEUP:\n"
        "mov.u32 $0, 0;\n"
        "WD_END:\n"
    )


def _wait_ptx(first: str, retry: str, site: int, stage: str, after: str = "", drain: bool = False,
              peer: bool = False) -> str:
    """`first`: the fast path's probe, which branches to WD_END when the wait is over (and
    falls through to the retries); `retry`: the probe of a retry, which branches to WD_END
    too; `stage`: what puts the noted stage in c; `after`: what a completed wait does last
    (it may clear $0)."""
    return _PROLOGUE + first + _slow_path(retry, site, stage, drain, peer) + after + "}"


@dsl_user_op
def bounded_mbarrier_wait(mbar: Int32, phase: Int32, block: Int32, site: int, tile: Int32, kblock: Int32,
                          stage_offset: int | None, check_abort: bool = False, drain: bool = False,
                          peer: bool = False, *, loc=None, ip=None) -> Int32:
    """Waits for phase `phase` of the mbarrier at shared address `mbar` to complete, or gives
    up (WaitGuard). Returns 1 when it completed, 0 when this thread gave up (its own deadline,
    or its CTA's abort flag; check_abort: also when the flag is set after the phase
    completed). The same for every lane of a warp that calls it.

    The fast path is the DSL's: one mbarrier.try_wait without a time hint and a branch, the
    barrier addressed from a uniform register. A retry sleeps in mbarrier.try_wait at most
    SUSPEND_NS (a completion wakes it at once). The note's stage is the word stage_offset
    bytes past the barrier (WaitGuard.start writes it; None: 0), read with the barrier's
    address as an address: as data it would leave the uniform registers (see above).
    drain: a wait for work already issued (not cut short by the abort flag; its bound is
    DRAIN_FACTOR deadlines); peer: a give-up also sets the CTA pair's other abort flag."""
    assert not (drain and check_abort), "a drain is not cut short by the abort flag"
    first = "mbarrier.try_wait.parity.shared::cta.b64 p, [$5], $2;\n@p bra.uni WD_END;\nmov.u32 m, $5;\n"
    retry = f"mbarrier.try_wait.parity.shared::cta.b64 p, [m], $2, {SUSPEND_NS};\n@p bra.uni WD_END;\n"
    after = ""
    if check_abort:  # a completed wait also gives up where the CTA did (WD_END is reached by both)
        after = "ld.volatile.shared.u32 c, [$1];\nsetp.ne.u32 p, c, 0;\n@p mov.u32 $0, 0;\n"
    stage = "mov.u32 c, 0;\n" if stage_offset is None else f"ld.shared.u32 c, [m+{stage_offset}];\n"
    asm = _wait_ptx(first, retry, site, stage, after, drain, peer)
    args = [_v(Int32(x), loc, ip) for x in (block, phase, tile, kblock, mbar)]
    return _asm_value(Int32, args, asm, "=r,r,r,r,r,r,~{memory}", loc, ip)


@dsl_user_op
def bounded_flag_wait(flag: Int64, block: Int32, site: int, slot: Int32, tile: Int32, kblock: Int32,
                      *, loc=None, ip=None) -> Int32:
    """Waits until the gpu-scope flag at global address `flag` is nonzero (acquire), or gives
    up as bounded_mbarrier_wait does. Returns 1 when the flag was seen set, else 0."""
    probe = "ld.acquire.gpu.global.u32 c, [$6];\nsetp.ne.u32 p, c, 0;\n@p bra.uni WD_END;\n"
    asm = _wait_ptx(probe, "nanosleep.u32 64;\n" + probe, site, "mov.u32 c, $5;\n")
    args = [_v(Int32(x), loc, ip) for x in (block, 0, tile, kblock, slot)] + [_v(Int64(flag), loc, ip)]
    return _asm_value(Int32, args, asm, "=r,r,r,r,r,r,l,~{memory}", loc, ip)


def stage_table_offset(stages: int) -> int:
    """Bytes from a barrier of a pipeline's array (2 x stages barriers) to its stage number
    (WaitGuard)."""
    return 16 * stages


@dsl_user_op
def store_shared_u32(addr: Int32, value: Int32, *, loc=None, ip=None) -> None:
    _asm_effect([_v(Int32(addr), loc, ip), _v(Int32(value), loc, ip)], "st.shared.u32 [$0], $1;",
                "r,r,~{memory}", loc, ip)


@dsl_user_op
def load_abort_flag(block: Int32, *, loc=None, ip=None) -> Int32:
    """The CTA's abort flag (a volatile load: other threads, and the pair's other CTA, set
    it). This and the waits' own reads of it are the kernels' only `ld.volatile.shared.u32
    R, [B]`: tools/ptx_flow.py reads that form as the flag."""
    return _asm_value(Int32, [_v(Int32(block), loc, ip)], "ld.volatile.shared.u32 $0, [$1];", "=r,r,~{memory}",
                      loc, ip)


@dsl_user_op
def load_owner(block: Int32, *, loc=None, ip=None) -> Int32:
    """Nonzero where this CTA's give-up claimed the launch's record (BLK_OWNER)."""
    return _asm_value(Int32, [_v(Int32(block), loc, ip)], f"ld.volatile.shared.u32 $0, [$1+{BLK_OWNER}];",
                      "=r,r,~{memory}", loc, ip)


@dsl_user_op
def count_exit(block: Int32, *, loc=None, ip=None) -> Int32:
    """A warp leaves (one thread of it calls this): its notes are ordered before the count,
    and the count before whatever the last warp reads. Returns the warps counted before."""
    return _asm_value(
        Int32, [_v(Int32(block), loc, ip)],
        "{\n.reg .b32 one;\nmov.u32 one, 1;\nfence.acq_rel.cta;\n"
        f"atom.shared.add.u32 $0, [$1+{BLK_EXITS}], one;\nfence.acq_rel.cta;\n}}",
        "=r,r,~{memory}", loc, ip,
    )


@dsl_user_op
def first_note(block: Int32, *, loc=None, ip=None) -> Int32:
    """The shared address of the note whose wait started first (0: none)."""
    scan = "".join(
        f"ld.volatile.shared.u64 t, [$1+{BLK_NOTES + NOTE_BYTES * w}];\n"
        "setp.ne.u64 p, t, 0;\nsetp.lt.and.u64 p, t, best, p;\n"
        f"@p mov.u64 best, t;\n@p add.u32 $0, $1, {BLK_NOTES + NOTE_BYTES * w};\n"
        for w in range(NOTE_SLOTS)
    )
    return _asm_value(
        Int32, [_v(Int32(block), loc, ip)],
        "{\n.reg .pred p;\n.reg .b64 t, best;\nmov.u64 best, -1;\nmov.u32 $0, 0;\n" + scan + "}",
        "=r,r,~{memory}", loc, ip,
    )


@dsl_user_op
def write_record(block: Int32, note: Int32, *, loc=None, ip=None) -> None:
    """One thread of the CTA that owns the launch's record (BLK_OWNER: its give-up was the
    launch's first, which claimed the record) copies the note at shared address `note`
    into it: the fields, the clock when the CTA gave up and a copy of every note (from
    which the host picks the hang's cause: hang_cause), a system-scope fence, then the flag
    the host polls. Only the owner writes, once, so the host reads the record whole once
    it sees the flag."""
    copy_notes = "".join(
        f"ld.volatile.shared.v4.u32 {{sp, st, ti, kb}}, [$0+{BLK_NOTES + NOTE_BYTES * w + 16 * h}];\n"
        + "".join(f"st.volatile.global.u32 [rp+{4 * REC_NOTES + NOTE_BYTES * w + 16 * h + 4 * i}], {r};\n"
                  for i, r in enumerate(("sp", "st", "ti", "kb")))
        for w in range(NOTE_SLOTS) for h in range(2)
    )
    _asm_effect(
        [_v(Int32(block), loc, ip), _v(Int32(note), loc, ip)],
        "{\n.reg .b32 c, sp, st, ti, kb;\n.reg .b64 rp, t;\n"
        f"ld.shared.u64 rp, [$0+{BLK_RECORD}];\n"
        f"ld.volatile.shared.v4.u32 {{sp, st, ti, kb}}, [$1+{NOTE_WHAT}];\n"
        f"and.b32 c, sp, 255;\nst.volatile.global.u32 [rp+{4 * REC_SITE}], c;\n"
        f"shr.u32 c, sp, 8;\nst.volatile.global.u32 [rp+{4 * REC_PHASE}], c;\n"
        f"st.volatile.global.u32 [rp+{4 * REC_STAGE}], st;\n"
        f"st.volatile.global.u32 [rp+{4 * REC_TILE}], ti;\n"
        f"st.volatile.global.u32 [rp+{4 * REC_KBLOCK}], kb;\n"
        f"ld.shared.u32 c, [$0+{BLK_TAG}];\nst.volatile.global.u32 [rp+{4 * REC_TAG}], c;\n"
        f"mov.u32 c, %ctaid.x;\nst.volatile.global.u32 [rp+{4 * REC_CTA}], c;\n"
        f"ld.volatile.shared.u64 t, [$1+{NOTE_WAITED}];\nst.volatile.global.u64 [rp+{4 * REC_WAITED_NS}], t;\n"
        f"ld.volatile.shared.u64 t, [$0+{BLK_ABORT_NS}];\nst.volatile.global.u64 [rp+{4 * REC_ABORT_NS}], t;\n"
        + copy_notes +
        "fence.sc.sys;\n"
        f"st.volatile.global.u32 [rp+{4 * REC_FLAG}], 1;\n"
        "}",
        "r,r,~{memory}", loc, ip,
    )


@dsl_user_op
def store_block(block: Int32, tag: Int32, timeout: Int64, claim: Int64, record: Int64, peer: Int32, *,
                loc=None, ip=None) -> None:
    """One thread writes the CTA's block: the abort flag, the exit count, the owner word and
    every note clear, the launch's tag, the timeout, the claim word's and the record's
    addresses, and the pair's other block (0: none)."""
    clear = "".join(f"st.shared.u64 [$0+{BLK_NOTES + NOTE_BYTES * w + NOTE_START}], z;\n"
                    for w in range(NOTE_SLOTS))
    _asm_effect(
        [_v(Int32(block), loc, ip), _v(Int32(tag), loc, ip), _v(Int64(timeout), loc, ip),
         _v(Int64(claim), loc, ip), _v(Int64(record), loc, ip), _v(Int32(peer), loc, ip)],
        "{\n.reg .b64 z;\nmov.u64 z, 0;\n"
        f"st.shared.u64 [$0+{BLK_ABORT}], z;\nst.shared.u64 [$0+{BLK_EXITS}], z;\n"
        f"st.shared.u64 [$0+{BLK_ABORT_NS}], z;\n" + clear + "}\n"
        f"st.shared.u32 [$0+{BLK_TAG}], $1;\nst.shared.u64 [$0+{BLK_TIMEOUT}], $2;\n"
        f"st.shared.u64 [$0+{BLK_CLAIM}], $3;\nst.shared.u64 [$0+{BLK_RECORD}], $4;\n"
        f"st.shared.u32 [$0+{BLK_PEER}], $5;\nst.shared.u32 [$0+{BLK_OWNER}], 0;",
        "r,r,l,l,l,r,~{memory}", loc, ip,
    )


@dsl_user_op
def map_shared_to_rank(addr: Int32, rank: Int32, *, loc=None, ip=None) -> Int32:
    """The shared::cluster address of shared address `addr` in the cluster's CTA `rank`."""
    return _asm_value(Int32, [_v(Int32(addr), loc, ip), _v(Int32(rank), loc, ip)],
                      "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r", loc, ip)


@dsl_user_op
def barrier_any(barrier_id, threads: int, value: Int32, *, loc=None, ip=None) -> Int32:
    """Named barrier `barrier_id` (static, or a warp-uniform Int32) of `threads` threads
    that also returns, to all of them, 1 where any of them passed a nonzero `value`
    (bar.red.or): a decision they all take alike."""
    args = [_v(Int32(value), loc, ip)]
    bar = str(barrier_id)
    if not isinstance(barrier_id, int):
        args.append(_v(Int32(barrier_id), loc, ip))
        bar = "$2"
    return _asm_value(
        Int32, args,
        "{\n.reg .pred p, q;\nsetp.ne.u32 q, $1, 0;\n"
        f"bar.red.or.pred p, {bar}, {threads}, q;\n"
        "selp.u32 $0, 1, 0, p;\n}",
        "=r,r" + (",r" if len(args) == 2 else "") + ",~{memory}", loc, ip,
    )


@cute.jit
def injected_fault(guard, name: str, here, cta: int = 0):
    """Where the fault of wait site `name` is built in (WatchSettings.inject): Int32 1 in CTA
    `cta` where `here` holds, else 0; None (static) in every other build, which then has no
    trace of it."""
    if cutlass.const_expr(not guard.injects(name)):
        return None
    bidx, _, _ = cute.arch.block_idx()
    return Int32((bidx == cta) & here)


class WaitGuard:
    """The device side of the watchdog for one kernel, built in the kernel from the static
    WatchSettings, the CTA's block (BLOCK_BYTES of shared memory), the number of warps that
    wait (each calls leave() on its way out) and its barrier arrays: (site names, the
    array's first barrier, its stages). An array is a pipeline's full and empty barriers
    (2 x stages) followed by as many words of stage numbers (stage_table_offset: its
    storage is 4 x stages barriers long), from which a wait notes its stage. Without the
    watchdog its waits are the DSL's unbounded ones and nothing is written.

    How a hang ends (the abort protocol, design.md section 9): a wait that has waited
    `timeout` (its own clock, started at its first retry) sets the CTA's abort flag (and,
    with `peer`, the CTA pair's other one) and claims the launch's record if no CTA has;
    every wait of the CTA then gives up at its next check (a retry comes at least every
    SUSPEND_NS), noting itself in its site's note if it was waiting, except the drains,
    which wait on for what was already issued; each role stops issuing work (the kernels
    say how); the last warp of the record's owner to leave copies the note of the wait that
    started first (the others waited on it) into the record."""

    def __init__(self, settings: WatchSettings, block, warps: int, barrier_arrays=(), peer: bool = False):
        self.settings = settings
        self.block = block
        self.warps = warps
        self.barrier_arrays = barrier_arrays
        self.peer = peer

    @property
    def enabled(self) -> bool:
        return self.settings.enabled

    def injects(self, name: str) -> bool:
        return self.settings.injects(name)

    @cute.jit
    def start(self, is_writer, args, peer_rank=None):
        """The block and the stage tables, by the one thread where is_writer; a CTA-wide
        barrier must follow before any wait. args: the launch's (record, claim, tag,
        timeout_ns) arguments; peer_rank (with `peer`): the pair's other CTA's rank in the
        cluster, whose block is this one's address mapped there."""
        if cutlass.const_expr(self.enabled):
            record, claim, tag, timeout = args
            peer = Int32(0)
            if cutlass.const_expr(self.peer):
                peer = map_shared_to_rank(self.block, peer_rank)
            if is_writer:
                store_block(self.block, tag, timeout, claim.toint(), record.toint(), peer)
                for i in cutlass.range_constexpr(len(self.barrier_arrays)):
                    _, base, count = self.barrier_arrays[i]
                    for j in cutlass.range_constexpr(2 * count):
                        store_shared_u32(base.toint() + stage_table_offset(count) + 8 * j, Int32(j % count))

    def wait(self, barrier_ptr, phase, site: str, tile, kblock, *, check_abort=False):
        """Bounded wait on an mbarrier (a cute.Pointer into shared memory): 1 when its phase
        completed, 0 when this thread gave up (bounded_mbarrier_wait; the same for every lane
        of a warp), which the caller decides on: after a 0 its role issues no new work.
        tile, k-block: where the role is, for the note."""
        assert not SITE_BY_NAME[site].drain, f"{site} is a drain (WaitGuard.drain)"
        return self._wait(barrier_ptr, phase, site, tile, kblock, check_abort, False)

    def wait_run_out(self, barrier_ptr, phase, site: str, tile, kblock):
        """A wait of a role that runs its loops out whether or not it completes (the Hopper
        consumers: their named barriers need every consumer thread, and a wgmma every warp
        of its warpgroup, while a wait's result is the warp's own). It returns nothing: a
        wait that gives up always leaves the CTA's abort flag set (it set it, or gave up on
        seeing it), and that flag is what the role's stores are decided on, once per tile
        and alike for the threads of a barrier (design.md section 9, the abort protocol).
        Keeping no result costs the K-loop nothing: the tile_n 256 split-K loop carrying one
        took 577 SASS instructions against 504 (tests/test_sm90_compile.py's budget test)."""
        self._wait(barrier_ptr, phase, site, tile, kblock, False, False)

    def drain(self, barrier_ptr, phase, site: str, tile, kblock):
        """A drain: waits for work this CTA already issued (its loads landing, its MMAs'
        commit, the pair's exit), not cut short by the abort flag, up to DRAIN_FACTOR
        deadlines. It returns nothing: what follows is the same whether the barrier completed
        or the bound expired (what it waits for completes within microseconds of its issue,
        so an expired drain means a barrier short of arrivals or bytes that nothing in
        flight brings), and an expired drain notes itself, so the record says so."""
        assert SITE_BY_NAME[site].drain, f"{site} is not a drain (WaitGuard.wait)"
        self._wait(barrier_ptr, phase, site, tile, kblock, False, True)

    def _wait(self, barrier_ptr, phase, site: str, tile, kblock, check_abort: bool, drain: bool):
        if not self.enabled:
            cute.arch.mbarrier_wait(barrier_ptr, phase)
            return Int32(1)
        offset = None
        for names, _, count in self.barrier_arrays:
            if site in names:
                offset = stage_table_offset(count)
        return bounded_mbarrier_wait(barrier_ptr.toint(), phase, self.block, site_id(site), tile, kblock,
                                     offset, check_abort, drain, self.peer)

    def wait_flag(self, flag_addr, site: str, slot, tile, kblock):
        """Bounded wait for a split-K flag in global memory (watchdog builds only)."""
        return bounded_flag_wait(flag_addr, self.block, site_id(site), slot, tile, kblock)

    def aborted(self):
        """Nonzero once the CTA gave up (0 always without the watchdog)."""
        if not self.enabled:
            return Int32(0)
        return load_abort_flag(self.block)

    @cute.jit
    def leave(self, is_lane0):
        """A waiting warp's way out (every lane calls it): lane 0 counts the warp; the CTA's
        last warp, where the CTA owns the launch's record (its give-up was the launch's
        first), writes the record from the first hung wait's note."""
        if cutlass.const_expr(self.enabled):
            if is_lane0:
                if count_exit(self.block) == self.warps - 1:
                    if load_owner(self.block) != 0:
                        note = first_note(self.block)
                        if note != 0:
                            write_record(self.block, note)
