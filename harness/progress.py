"""A long case's progress: lines the worker process sends to the parent ahead of a result.

The worker attaches its pipe while a request asks for progress; report_progress does
nothing otherwise, so the timing code runs unchanged in tools, tests and the parent."""

from __future__ import annotations

import dataclasses
import time


@dataclasses.dataclass
class Progress:
    """A line of progress from the worker, sent ahead of the result of a request."""

    text: str


PROGRESS_EVERY_S = 1.0  # the worker sends at most one Progress a second
_progress_conn = None  # in the worker, the pipe while a request wants progress
_progress_sent = 0.0


def attach(conn) -> None:
    """In the worker: send report_progress's lines down conn (None: send none) from now on,
    the first one at once."""
    global _progress_conn, _progress_sent
    _progress_conn, _progress_sent = conn, time.monotonic()


def report_progress(text: str) -> None:
    """Tell the parent how a long case is going (at most one line a PROGRESS_EVERY_S);
    nothing when the request did not ask for progress or outside the worker."""
    global _progress_sent
    now = time.monotonic()
    if _progress_conn is not None and now - _progress_sent >= PROGRESS_EVERY_S:
        _progress_sent = now
        _progress_conn.send(Progress(text))
