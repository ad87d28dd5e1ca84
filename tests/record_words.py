"""The watchdog's record as the kernel writes it (watchdog.write_record), for CPU tests of
its decoding: the head from the note that started first, the clock when the CTA gave up,
a copy of every note in its site's slot, then the flag."""

import dataclasses

from nvfp4_gemm import watchdog


@dataclasses.dataclass(frozen=True)
class Note:
    """What a wait that gave up notes in shared memory (bounded_mbarrier_wait)."""

    site: str
    start_ns: int
    tile: int = 0
    kblock: int = 0  # the value the kernel passes (the Hopper consumers' K-loop counter)
    stage: int = 0
    phase: int = 0
    waited_ns: int = 2_000_000_000


def _put64(words, word: int, value: int) -> None:
    words[word], words[word + 1] = _s32(value & 0xFFFFFFFF), _s32(value >> 32)


def _s32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def write_record(words, notes, *, abort_ns: int = 0, cta: int = 5, tag: int = 0) -> None:
    """Writes `notes` (one per site) into `words` (RECORD_WORDS int32, a list or a tensor)
    as the kernel's last warp out does; abort_ns 0: the first end of a noted wait (the
    wait that timed out ends as the CTA gives up, the others at their next check)."""
    assert len({n.site for n in notes}) == len(notes), "one note per site"
    first = min(notes, key=lambda n: n.start_ns)
    site_word = watchdog.SITE_BY_NAME[first.site].id | (first.phase << 8)
    for word, value in ((watchdog.REC_SITE, site_word & 255), (watchdog.REC_PHASE, site_word >> 8),
                        (watchdog.REC_STAGE, first.stage), (watchdog.REC_TILE, first.tile),
                        (watchdog.REC_KBLOCK, first.kblock), (watchdog.REC_TAG, tag), (watchdog.REC_CTA, cta)):
        words[word] = _s32(value)
    _put64(words, watchdog.REC_WAITED_NS, first.waited_ns)
    _put64(words, watchdog.REC_ABORT_NS, abort_ns or min(n.start_ns + n.waited_ns for n in notes))
    for w in range(watchdog.NOTE_SLOTS):
        for i in range(watchdog.NOTE_WORDS):
            words[watchdog.REC_NOTES + watchdog.NOTE_WORDS * w + i] = 0
    for n in notes:
        site = watchdog.SITE_BY_NAME[n.site].id
        base = watchdog.REC_NOTES + watchdog.NOTE_WORDS * (site % watchdog.NOTE_SLOTS)
        _put64(words, base + watchdog.NOTE_START // 4, n.start_ns)
        _put64(words, base + watchdog.NOTE_WAITED // 4, n.waited_ns)
        what = base + watchdog.NOTE_WHAT // 4
        for i, value in enumerate((site | (n.phase << 8), n.stage, n.tile, n.kblock)):
            words[what + i] = _s32(value)
    words[watchdog.REC_FLAG] = 1
