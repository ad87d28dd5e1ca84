"""Device tensors kept across calls by the modules outside submission.py (the masked op's
tables and the torch path's decode table), allocated where no CUDA graph's private pool
takes them."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch


def outside_graph_pools(make: Callable[[], Any], device: torch.device) -> Any:
    """make() run in a thread of its own, for tensors kept across calls (caches of device
    tables). torch routes a CUDA graph capture's allocations into the graph's private pool
    by the capturing stream, and torch.compile's graph-tree warm-up by the calling thread;
    a cached tensor allocated there stays live in that pool, which the graph tree refuses
    (no graph output accounts for it). A thread of its own, whose current stream is not
    capturing, allocates from the ordinary pool. make() should only allocate (its thread's
    stream is not the caller's); the caller fills the tensors on its own stream."""
    result: list = []

    def work() -> None:
        try:
            with torch.cuda.device(device):
                result.append((True, make()))
        except BaseException as e:  # re-raised in the caller
            result.append((False, e))

    thread = threading.Thread(target=work, name="nvfp4-gemm-tables")
    thread.start()
    thread.join()
    ok, value = result[0]
    if not ok:
        raise value
    return value
