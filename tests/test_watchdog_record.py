"""Which hung wait the watchdog's warning names (watchdog.hang_cause), from the record as
the kernel writes it: the wait every other hung wait of the CTA waited on, whichever
started first.

Each case is the hang of one injected fault (NVFP4_GEMM_INJECT_HANG, design.md section 9)
as the CTA's warps leave it: the wait the fault hangs and the waits that hang because of
it, with the tile and k-block each kernel passes. A producer that runs ahead may start its
wait for a buffer back before the consumer's own wait hangs (the Hopper kernel's token
fault did so under DSL 4.5.2: the TMA warp's wait for stage 1 started first), so every
order of their starts must name the same wait."""

import itertools

import pytest
from record_words import Note, write_record

from nvfp4_gemm import watchdog

# Blackwell schedule rows of one CTA (first row, the next two, the end of the schedule)
T0, T1, T2, END = 3, 3 + 148, 3 + 296, 600

HANGS = {
    # the consumers leave out a release of stage 0: the TMA warp waits to load k-block 4
    # into it; the consumers use k-blocks 1-3, then wait for k-block 4 (counter 3)
    "sm90.producer.empty": [("sm90.producer.empty", 0, 4), ("sm90.consumer.full", 0, 3)],
    "sm90.producer.tail": [("sm90.producer.tail", 7, 0)],
    # stage 0 expects 16 bytes more: the consumers wait for k-block 0 (counter -1), the
    # TMA warp loads k-blocks 0-3 and waits to load k-block 4
    "sm90.consumer.full": [("sm90.consumer.full", 0, -1), ("sm90.producer.empty", 0, 4)],
    # no arrive on token buffer 0: the consumers wait for k-tile 0's tokens, having used
    # and released k-block 0; the TMA warp waits for stage 1 to load k-block 5
    "sm90.consumer.tokens": [("sm90.consumer.tokens", 0, 0), ("sm90.producer.empty", 0, 5)],
    # a FIXUP unit's flag never set: its consumers wait; the TMA warp, done, waits in its tail
    "sm90.fixup.flag": [("sm90.fixup.flag", 32, 0), ("sm90.producer.tail", 32, 0)],
    # the MMA warp leaves out a release of stage 0: the TMA warp waits to load k-block 4,
    # the MMA warp for k-block 4, the epilogue for the tile's accumulator
    "sm100.tma.empty": [("sm100.tma.empty", T0, 4), ("sm100.mma.full", T0, 4),
                        ("sm100.epilogue.acc_full", T0, 0)],
    "sm100.tma.tail": [("sm100.tma.tail", END, 0)],
    "sm100.mma.full": [("sm100.mma.full", T0, 0), ("sm100.tma.empty", T0, 4),
                       ("sm100.epilogue.acc_full", T0, 0)],
    # the epilogue leaves out its release of accumulator 0: the MMA warp waits for it at
    # the third tile, the epilogue for that tile's accumulator, the TMA warp for a stage
    "sm100.mma.acc_empty": [("sm100.mma.acc_empty", T2, 0), ("sm100.epilogue.acc_full", T2, 0),
                            ("sm100.tma.empty", T2, 4)],
    "sm100.mma.tail": [("sm100.mma.tail", END, 0), ("sm100.teardown.mma_done", END, 0)],
    # the MMA warp leaves out its commit of accumulator 0: the epilogue waits at the first
    # tile; the MMA warp runs the second and waits for accumulator 0 at the third
    "sm100.epilogue.acc_full": [("sm100.epilogue.acc_full", T0, 0), ("sm100.mma.acc_empty", T2, 0),
                                ("sm100.tma.empty", T2, 4)],
    "sm100.teardown.mma_done": [("sm100.teardown.mma_done", END, 0)],
    "sm100.teardown.peer": [("sm100.teardown.peer", END, 0)],
}


def test_every_injectable_wait_site_has_a_hang():
    assert set(HANGS) == set(watchdog.INJECTABLE)
    assert all(s.drain for s in watchdog.WAIT_SITES if s.name not in watchdog.INJECTABLE)


def test_an_expired_drain_is_said_but_is_no_cause():
    """sm90.consumer.full's fault leaves stage 0's full barrier 16 bytes short: the
    consumers' wait is the cause, and the TMA warp's drain of that stage, which starts
    after the CTA gave up and expires DRAIN_FACTOR deadlines later, is named after it."""
    abort = 1_000 + 2_000_000_000
    notes = [Note("sm90.consumer.full", 1_000, tile=0, kblock=-1),
             Note("sm90.producer.empty", 1_200, tile=0, kblock=4),
             Note("sm90.producer.drain", abort + 50, tile=0, kblock=0, waited_ns=4_000_000_000)]
    got = _decode(notes, abort_ns=abort)
    assert got.site.name == "sm90.consumer.full"
    assert got.describe().endswith("; then the TMA warp's drain waited 4000 ms for the loads of stage 0 (full), "
                                   "which did not complete either")


def _decode(notes, **kw):
    words = [0] * watchdog.RECORD_WORDS
    write_record(words, notes, **kw)
    return watchdog.decode_record(words)


@pytest.mark.parametrize("fault", sorted(HANGS))
def test_the_warning_names_the_hung_wait_in_any_order_of_starts(fault):
    waits = HANGS[fault]
    for order in itertools.permutations(range(len(waits))):
        notes = [Note(site, 1_000 + 300 * order[i], tile=tile, kblock=kblock)
                 for i, (site, tile, kblock) in enumerate(waits)]
        got = _decode(notes)
        assert got.site.name == fault, (order, got.describe())


def test_the_token_hang_as_the_h100_recorded_it():
    """The TMA warp's wait started first (as watchdog_check.py saw under DSL 4.5.2); the
    warning names the consumers' wait for the tokens."""
    notes = [Note("sm90.producer.empty", 5_000, tile=0, kblock=5, stage=1),
             Note("sm90.consumer.tokens", 5_180, tile=0, kblock=0, stage=0)]
    got = _decode(notes, cta=0)
    assert got.describe() == ("gave up after 2000 ms in the consumer warpgroups waiting for token buffer 0 "
                              "(full), work unit 0, k-block 0, phase 0, CTA 0")


def test_a_wait_that_started_after_the_cta_gave_up_is_no_cause():
    """The Hopper consumers run their loops to the end once the CTA gave up; a wait they
    start then notes itself but held nothing up."""
    abort = 1_000 + 500_000_000
    notes = [Note("sm90.consumer.tokens", 1_000, tile=0, kblock=0),
             Note("sm90.consumer.full", abort + 40, tile=0, kblock=-1, waited_ns=10)]
    assert _decode(notes, abort_ns=abort).site.name == "sm90.consumer.tokens"
    # counted as waiting, the consumers' wait for k-block 0 would be the tokens' cause
    assert _decode(notes, abort_ns=abort + 100).site.name == "sm90.consumer.full"


def test_waits_on_is_one_way_for_any_two_waits():
    """Of two hung waits of one CTA, at most one waited on the other: hang_cause always has
    a wait that waits on none (no cycle), at every pair of positions."""
    sites = watchdog.WAIT_SITES
    positions = [(t, k) for t in (T0, T1) for k in (0, 1, 4)]
    for a, b in itertools.combinations_with_replacement(sites, 2):
        for pa, pb in itertools.product(positions, repeat=2):
            x = watchdog.HungWait(a, a.id, 1, 0, 0, *pa, 0)
            y = watchdog.HungWait(b, b.id, 2, 0, 0, *pb, 0)
            assert not (watchdog.waits_on(x, y) and watchdog.waits_on(y, x)), (a.name, pa, b.name, pb)


def test_unknown_sites_fall_back_to_the_first_to_start():
    unknown = [watchdog.HungWait(None, 99, 700, 0, 0, 0, 0, 0), watchdog.HungWait(None, 98, 600, 0, 0, 0, 0, 0)]
    assert watchdog.hang_cause(unknown).site_id == 98
    assert watchdog.hang_cause([]) is None
