"""The host side of the masked op's kernels, shared by the Hopper and Blackwell runners:
per set of buffers a cached entry (config, launch shape, device tables, launchers per
stream handle), the pointer rows computed on the GPU, and the first run's check.

    runner.run(a, sfa, b, sfb, masked_m, out, p, expected_m, exact)

A subclass (sm90_masked.MaskedSm90Runner, sm100_masked.MaskedSm100Runner) gives the
kernel-specific steps: the config choice, the launch shape, the refusal, the tables and
the bound launchers. This module launches nothing itself and imports no DSL.

The first run's check (check_first_run): the first eager run of each config on a device is
compared with the exact torch path on the same call, every element of `out` (rows at or
above masked_m included, which must keep what they held), within the leaderboard's
tolerance. It waits for the GPU once, which only that run does; a config that fails it
restores `out` to the exact result and raises MaskedCheckFailed, and the op takes the
torch path on that device from then on (moe._kernel_into).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

import torch

from .graph_pools import outside_graph_pools
from .torch_paths import first_mismatch

# the current CUDA stream's raw handle by device index, as torch.compile's generated code
# reads it: no torch.cuda.Stream object made a call. Absent from a torch without CUDA.
_raw_current_queue = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def current_queue(device: torch.device) -> int:
    """The handle of the current CUDA stream on `device` (an indexed CUDA device), what
    torch.cuda.current_stream(device).cuda_stream gives."""
    if _raw_current_queue is not None:
        return _raw_current_queue(device.index)
    return torch.cuda.current_stream(device).cuda_stream


def env_switch(name: str, default: str) -> bool:
    """A 0 / 1 switch of the masked op from the environment (`default` where unset);
    anything else is a ValueError naming the variable."""
    value = os.environ.get(name, default)
    if value not in ("0", "1"):
        raise ValueError(f"{name}={value!r}: expected 0 or 1")
    return value == "1"


class FirstRunInCapture(RuntimeError):
    """A config's first run (compile and module load) inside a CUDA graph capture, which
    cannot hold it: the caller must run the op once before capturing."""


class MaskedCheckFailed(RuntimeError):
    """A config's first run did not give the exact path's result (the message says where);
    the caller's `out` holds the exact result."""


@dataclasses.dataclass
class MaskedEntry:
    """One set of buffers' device tables, its config and its launchers per stream handle."""

    grid: object
    config: object
    tables: dict
    launchers: dict = dataclasses.field(default_factory=dict)
    initialized: bool = False
    # group_bases of a, b, sfa, sfb, out: addresses only, since a tensor kept here would
    # stay live (in a graph's pool, where a capture made it)
    bases: tuple = ()


def group_bases(a, b, sfa, sfb, out) -> tuple[tuple[int, int], ...]:
    """(address, bytes from one group to the next) of a, b, sfa, sfb and out, in the order
    of the pointer rows (the layout both GEMMs read: a, b, sfa, sfb, c): their group
    dimension's strides, which the op's checks have found dense (1-byte elements but out's)."""
    return tuple((t.data_ptr(), t.stride(group_dim) * t.element_size())
                 for t, group_dim in ((a, 0), (b, 0), (sfa, 5), (sfb, 5), (out, 0)))


def write_pointer_rows(ptrs: torch.Tensor, bases: tuple[tuple[int, int], ...]) -> None:
    """ptrs (G, 5) int64 <- each group's addresses of group_bases' tensors, computed on the
    GPU: no host table, so nothing to copy and nothing a capture could not hold."""
    g = torch.arange(ptrs.shape[0], dtype=torch.int64, device=ptrs.device)
    for col, (base, stride) in enumerate(bases):
        ptrs[:, col].copy_(g * stride + base)


def check_against_exact(out: torch.Tensor, before: torch.Tensor, exact: Callable[[torch.Tensor], None],
                        what: str) -> None:
    """The first run's check: `out` after the kernel against the exact path written into a
    copy of `before` (out as the caller passed it), over every element: the rows the call
    computes within the tolerance, the others as they were. On a mismatch `out` gets the
    exact result and MaskedCheckFailed names the group and the element. Waits for the GPU."""
    want = before.clone()
    exact(want)
    wrong = first_mismatch(list(out), list(want))
    if wrong is not None:
        out.copy_(want)
        raise MaskedCheckFailed(f"{what} failed its first-run check against the exact path: {wrong}")


class MaskedRunner:
    """One device's masked kernel: entries per set of buffers, launches on the current
    stream. Host work per warm call: a dict lookup on the buffers' addresses and sizes, the
    current stream's handle, two launches by bound launchers. A new set of buffers fills its
    pointer and descriptor-size tables by kernels (no copy from the host) and runs the
    descriptor init first. Its tables come from the ordinary pool even inside a CUDA graph
    capture or torch.compile's graph-tree warm-up (graph_pools.outside_graph_pools)."""

    KERNEL = "the masked kernel"  # the warnings' name for it

    def __init__(self, device: torch.device, num_sms: int, maxsize: int = 64, check_first_run: bool = False):
        self.device = device
        self.num_sms = num_sms
        self.maxsize = maxsize
        self.check_first_run = check_first_run
        self.entries: dict = {}
        self.configs: dict = {}
        self.loaded: set = set()  # configs whose kernels have run outside a capture
        self.checked: set = set()  # configs whose first run passed check_against_exact

    # --------------------------------------------------------------- the kernel's steps
    def choose(self, p, expected_m):
        raise NotImplementedError

    def launch_shape(self, config, p):
        raise NotImplementedError

    def refusal(self, p, a, sfa, b, sfb, out) -> str | None:
        raise NotImplementedError

    def allocate(self, shape, config, p) -> dict:
        """The entry's device tables, uninitialized, with its (G, 5) int64 "ptrs" and (G, 4)
        int32 "desc_sizes"."""
        raise NotImplementedError

    def desc_sizes(self, shape) -> tuple[int, int, int, int]:
        """The (M, N, K, L) every group's descriptors are built for."""
        raise NotImplementedError

    def compile(self, config):
        raise NotImplementedError

    def bind(self, kernels, shape, tables: dict, queue: int) -> tuple:
        """(init, plan, gemm) launchers on stream handle `queue`."""
        raise NotImplementedError

    # --------------------------------------------------------------- shared
    def entry(self, a, sfa, b, sfb, masked_m, out, p, expected_m) -> MaskedEntry | str:
        """The entry of these buffers, made on their first call; or why the kernel cannot
        take them (refusal, decided then and on every later such call)."""
        ckey = (p.groups, p.max_m, p.n, p.k, expected_m)
        cfg = self.configs.get(ckey)
        if cfg is None:
            cfg = self.configs[ckey] = self.choose(p, expected_m)
        if isinstance(cfg, str):
            return cfg
        key = (a.data_ptr(), sfa.data_ptr(), b.data_ptr(), sfb.data_ptr(), masked_m.data_ptr(), out.data_ptr(),
               p.groups, p.max_m, p.n, p.k, cfg)
        e = self.entries.get(key)
        if e is None:
            reason = self.refusal(p, a, sfa, b, sfb, out)
            if reason is not None:
                return reason
            if len(self.entries) >= self.maxsize:
                self.entries.pop(next(iter(self.entries)))
            shape = self.launch_shape(cfg, p)
            # allocation only: the fills are on the caller's stream (prepare)
            tables = outside_graph_pools(lambda: self.allocate(shape, cfg, p), self.device)
            tables["masked_m"] = masked_m.data_ptr()  # its address only: the caller owns the tensor
            e = self.entries[key] = MaskedEntry(shape, cfg, tables, bases=group_bases(a, b, sfa, sfb, out))
        return e

    def prepare(self, e: MaskedEntry, init) -> None:
        """The entry's pointer and descriptor-size rows, a split-K config's flags, then its
        descriptors (init)."""
        write_pointer_rows(e.tables["ptrs"], e.bases)
        if "flags" in e.tables:
            e.tables["flags"].zero_()
        for col, value in enumerate(self.desc_sizes(e.grid)):
            e.tables["desc_sizes"][:, col].fill_(value)
        init()

    def run(self, a, sfa, b, sfb, masked_m, out, p, expected_m,
            exact: Callable[[torch.Tensor], None] | None = None) -> str | None:
        """The call's plan and GEMM; or, launching nothing, why the kernel cannot take it.
        exact(dst): the exact path into dst, for the first run's check (check_first_run)."""
        e = self.entry(a, sfa, b, sfb, masked_m, out, p, expected_m)
        if isinstance(e, str):
            return e
        capturing = torch.cuda.is_current_stream_capturing()
        if capturing and e.config not in self.loaded:
            raise FirstRunInCapture(
                f"grouped_mm_masked: {self.KERNEL} {e.config.name} has not run on {self.device} yet, and "
                "its first run (compile and module load) cannot be captured; run the op once with these "
                "sizes before capturing it")
        queue = current_queue(self.device)
        launchers = e.launchers.get(queue)
        if launchers is None:
            launchers = e.launchers[queue] = self.bind(self.compile(e.config), e.grid, e.tables, queue)
        init, plan, gemm = launchers
        check = self.check_first_run and exact is not None and not capturing and e.config not in self.checked
        before = out.clone() if check else None
        if not e.initialized:
            # in a capture this is recorded, not run: the entry stays uninitialized, so an
            # eager call before the graph's first replay prepares it again
            self.prepare(e, init)
            e.initialized = not capturing
        plan()
        gemm()
        if e.initialized:
            self.loaded.add(e.config)
        if check:
            check_against_exact(out, before, exact, f"{self.KERNEL} {e.config.name}")
            self.checked.add(e.config)
        return None
