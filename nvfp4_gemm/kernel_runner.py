"""The host wrapper both kernels share (GroupedGemmRunner): the validation-free fast paths for
calls seen before, the slow path through the compile / plan / schedule / pointer caches, the
self-check of a config's first launch, and the backend interface a kernel family provides."""

from __future__ import annotations

import dataclasses
import functools
import struct
import threading
import weakref
from collections import deque
from collections.abc import Callable
from itertools import chain
from operator import is_
from typing import Any, NamedTuple

import torch

from .binding import KernelLaunchError, int32_rows, to_device_async, upload_async
from .caches import HashedLruCache, LruCache
from .common import warn_once
from .inputs import GroupedProblem, tensor_fields
from .schedule import build_tile_schedule, persistent_grid
from .torch_paths import first_mismatch, run_torch_exact
from .watchdog import DEFAULT_WATCHDOG_MS, LaunchWatch, WatchdogRecord, WatchSettings, timeout_ns

# Whether every launch runs the build with the watchdog, or only a config's first launch in
# the process and its self-checked ones (a second compile, untimed): the latter. With it in every
# launch the Hopper kernel ran 2.2 % slower (geomean; 0.995-1.034 over the benchmark and
# decode cases) on the H200, alternating with and without it in one process (python
# tools/probes/kernel_ab.py submission.py submission.py --env-old NVFP4_GEMM_WATCHDOG_MS=0
# --spec-file tools/regime_specs.txt --shapes 0,1,2,3,6,7,8; docs/performance.md, "The
# watchdog's cost"), where its rounds agree within 0.3 %.
WATCHDOG_IN_EVERY_LAUNCH = False


def exact_into(outputs: list, exact: list) -> list:
    """outputs, overwritten with the exact path's results (a launch that gave up or failed
    its self-check)."""
    for c, e in zip(outputs, exact):
        c.copy_(e)
    return outputs


@functools.lru_cache(maxsize=16)
def call_key_function(groups: int) -> Callable[[Any], tuple]:
    """The call key of a call with `groups` groups: the ids of its a, b, c of every group,
    then of its reordered sfa, sfb, then its sizes, as one flat tuple. Raises ValueError or
    TypeError where data does not unpack into that many groups of that arity (the caller's
    miss). Sizes given as lists still build a key; hashing it raises TypeError.

    One star-unpacking of map(id, ...): 0.57 us at 2 groups and 1.65 at 8 on the 2-core CI
    CPU (measured: timeit of each on a leaderboard-shaped call). Code generated per group count ran in 0.27 and
    1.08 us, but executing generated code is what the leaderboard's KernelGuard refuses."""
    size = 6 * groups  # 5 tensors and the sizes per group

    def call_key(data):
        abc, _, sfr, sizes = data
        key = (*map(id, chain(*abc, *sfr)), *sizes)
        if len(key) != size:
            raise ValueError(f"not {groups} groups of 3 and 2 tensors and sizes")
        return key

    return call_key


@dataclasses.dataclass(frozen=True)
class KernelBackend:
    """What the runner needs from one kernel family (Blackwell or Hopper).

    choose_config(sizes, num_sms) -> config; can_implement(config, sizes) -> (ok, reason);
    tile_shape(config) -> (tile_m, tile_n) along the problem's M and N;
    compile(config, watch: WatchSettings) -> CompiledKernels, one build for every group
    count (the count is a launch argument); num_desc: descriptors per group;
    grid(config, num_tiles, num_sms, device_index) -> CTAs of the persistent launch
    (device_index None: no device, as in the CPU tests);
    schedule(sizes, config, num_sms) -> HostSchedule, where the kernel walks per-CTA work
    units (None: the whole-tile round robin of build_tile_schedule, in rows "schedule");
    self_check: whether the runner checks a config's first launch on each problem size
    against the exact path (NVFP4_GEMM_SELF_CHECK=1 / 0 overrides it);
    alternatives(config) -> the configs to try, in order, for a problem whose chosen config
    is retired, before the caller's fallback (None: none; each must still pass
    can_implement, and runs its own self-check and watchdog on its first launch);
    tile_order(sizes, tile_m, tile_n) -> the whole-tile schedule's rows (group, tile along M,
    along N), where schedule is None (build_tile_schedule's order unless the backend says);
    size_class(sizes) -> sizes: the representative of the sizes' class, for which
    choose_config, can_implement and schedule give what they give every member; the
    runner makes one choice and one schedule per class (None: each sizes its own class);
    config_name(config) -> how warnings name a config; fallback: what runs a call the kernel
    cannot take, in the warnings' words.
    """

    name: str
    choose_config: Callable
    can_implement: Callable
    tile_shape: Callable
    compile: Callable
    num_desc: int
    grid: Callable = lambda config, num_tiles, num_sms, device_index: persistent_grid(num_tiles, num_sms)
    schedule: Callable | None = None
    # check each (config, sizes)'s first launch against the exact path (GroupedGemmRunner.run)
    self_check: bool = False
    needs_aligned_c: bool = False  # C only through TMA stores (GroupedProblem.c_misaligned)
    size_class: Callable | None = None
    tile_order: Callable = build_tile_schedule
    alternatives: Callable | None = None
    config_name: Callable = str
    fallback: str = "the torch path"


@dataclasses.dataclass
class CompiledKernels:
    """Launchers of one compiled config, on torch tensors, on the default CUDA queue.

    init(ptrs, sizes, tensormaps) -> launch: binds the descriptor init's arguments once;
    each launch writes every group's TMA descriptors from the pointer and size rows as they
    are then (a table's own pointers, or a spare table's new ones).
    prepare(sizes, ptrs, tensormaps, sched: TileSchedule, scratch: SplitKScratch | None,
    watch: LaunchWatch) -> launch: binds the kernel arguments once; launch() then runs all
    groups.
    """

    init: Callable
    prepare: Callable
    info: dict = dataclasses.field(default_factory=dict)  # e.g. shared memory per CTA


@dataclasses.dataclass(frozen=True)
class HostSchedule:
    """A backend's static schedule on the host: int rows of each table the kernel reads,
    the grid, and the split-K scratch that each pointer table needs (0: none)."""

    tables: dict  # name -> list of equal-length int tuples
    num_tiles: int  # rows of the work list
    grid: int
    workspace_floats: int = 0  # fp32 partial sums
    num_flags: int = 0  # int32 arrival flags, zero between calls
    unit_stride: int = 0  # units table rows per CTA (WorkSchedule.unit_stride), where used


@dataclasses.dataclass
class TileSchedule:
    """Device copy of a HostSchedule's tables, per (size class, config)."""

    tables: dict  # name -> (rows, fields) int32 device tensor
    host: HostSchedule  # the grid, the tile count and the split-K scratch sizes (no rows)

    @property
    def schedule(self) -> torch.Tensor:
        """The whole-tile round robin's rows: group, tile index along M, along N."""
        return self.tables["schedule"]


@dataclasses.dataclass
class SplitKScratch:
    """Split-K scratch of one pointer table: partial sums and their arrival flags. The
    kernel's FIXUP units reset each flag they consumed, so the flags are zeroed only once,
    by the table's upload (TableLayout); every call runs on the default CUDA queue, so one table's calls are ordered like
    any writes to its C."""

    partials: torch.Tensor  # fp32
    flags: torch.Tensor  # int32


@dataclasses.dataclass(eq=False)
class PointerTable:
    """Device pointer table and TMA descriptors of one set of pointers, and the ready launches.

    The launches hold raw device addresses of everything here and of the schedule's tables,
    so the table keeps its TileSchedule alive: the schedules cache may evict that entry
    while a call entry still launches this table.

    A table outlives the pointers it was made for: `live` counts the calls remembered with
    it (GroupedGemmRunner._remember_call) whose tensors are all still alive, and one that
    no such call holds is a spare, which the next new pointers of the same config and
    sizes take over (GroupedGemmRunner._take_spare): their rows are uploaded into `buffer`
    and init_launch rewrites the descriptors, without an allocation or a new binding.
    """

    ptrs: torch.Tensor  # (G, 5) int64: a, b, sfa_reordered, sfb_reordered, c
    sizes: torch.Tensor  # (G, 4) int32: the groups' own sizes, which the kernel reads
    tensormaps: torch.Tensor  # (G, num_desc, 16) int64, written once by the init kernel
    launch: Callable[[], None]
    scratch: SplitKScratch | None = None
    schedule: TileSchedule | None = None
    config: Any = None
    record: WatchdogRecord | None = None  # the config's watchdog record (checked before a launch)
    watch: LaunchWatch | None = None  # what this table's launches pass the watchdog
    checked_launch: Callable[[], None] | None = None  # the self-check's build, where it is another
    buffer: torch.Tensor | None = None  # (words,) int64: the one allocation ptrs, sizes and the rest view
    init_launch: Callable[[], None] | None = None  # the descriptor init, bound to this table
    key: tuple | None = None  # (config, sizes, ptrs): the pointers it holds now
    live: int = 0  # calls remembered with it whose tensors are all alive


# A config and sizes makes this many pointer tables before new pointers take over spares.
# The leaderboard calls each shape on 15 inputs, first each on a clone (whose tensors but C
# it frees right after the call), then the inputs themselves in its timed rounds: were the
# clones' tables taken over at once, its correctness pass would leave one spare, and the
# first timed round, whose 15 calls all meet new pointers, would make 14 tables.
TABLES_BEFORE_REUSE = 15


@dataclasses.dataclass
class TableGroup:
    """The pointer tables of one config and sizes: how many were made (evicted ones
    included), and weak references to those that no live call holds, oldest first (the
    pointers cache alone keeps a spare alive)."""

    made: int = 0
    spares: deque = dataclasses.field(default_factory=lambda: deque(maxlen=64))


@dataclasses.dataclass
class CallEntry:
    """A call seen before: same tensor objects and sizes. Holds the c tensors it returns and
    weak references to the rest; the entry is dropped as soon as one of those is freed, so
    a recycled id never hits (its c tensors live as long as the entry)."""

    table: PointerTable
    outputs: list
    refs: list


def pointer_table_rows(ptrs, sizes, zero_words: int = 0) -> tuple[torch.Tensor, int]:
    """A pointer table's host rows as one int64 tensor, uploaded in one copy: the (G, 5)
    int64 addresses (group_pointers), then the (G, 4) int32 sizes from word `sizes_at` on,
    16-byte aligned as the kernels' pointers to them assume, then `zero_words` zero words
    (TableLayout's flags). Returns (rows, sizes_at)."""
    groups = len(ptrs)
    sizes_at = 5 * groups + (5 * groups) % 2
    flat = bytearray(8 * (sizes_at + 2 * groups + zero_words))
    struct.pack_into(f"={5 * groups}q", flat, 0, *chain.from_iterable(ptrs))
    struct.pack_into(f"={4 * groups}i", flat, 8 * sizes_at, *chain.from_iterable(sizes))
    return torch.frombuffer(flat, dtype=torch.int64), sizes_at


class TableLayout(NamedTuple):
    """Where a pointer table's parts lie in its one device buffer, in int64 words:
    [rows (pointers, sizes) | split-K flags | descriptors | split-K partials]. The rows and
    the flags' zeros are uploaded in one copy (the kernel resets each flag it consumes, so
    they are zeroed once, by the upload); the descriptors start on a 128-byte boundary, as
    the kernels assume; the partials need no initial value."""

    flags_at: int
    flag_words: int
    desc_at: int
    partials_at: int
    words: int


def table_layout(groups: int, num_desc: int, num_flags: int, partial_floats: int) -> TableLayout:
    rows = 5 * groups + (5 * groups) % 2 + 2 * groups  # pointer_table_rows without zeros
    flag_words = (num_flags + 1) // 2
    desc_at = -(-(rows + flag_words) // 16) * 16
    partials_at = desc_at + 16 * num_desc * groups
    return TableLayout(rows, flag_words, desc_at, partials_at, partials_at + (partial_floats + 1) // 2)


def group_pointers(data, sizes) -> tuple[tuple[int, ...], ...]:
    """(a, b, sfa_reordered, sfb_reordered, c) addresses per non-empty group."""
    abc, _, sfr, _ = data
    return tuple(
        (a.data_ptr(), b.data_ptr(), sfa.data_ptr(), sfb.data_ptr(), c.data_ptr())
        for (a, b, c), (sfa, sfb), (m, n, _, _) in zip(abc, sfr, sizes)
        if m and n
    )


class RepeatedCall(NamedTuple):
    """A call repeated back to back (two call-cache hits in a row on one entry): its group
    tuples (a, b, c) and (sfa, sfb) and its size tuples, held strongly, and its entry. The
    next call is that call again when its lists hold these very objects: tuples are
    immutable, so their identity fixes every tensor and size in them, and the check is
    2 x G + G identity comparisons with nothing built: 0.63 / 0.87 us at G = 2 / 8 on the
    H200's host, where the call key (5 x G new ints) took 1.79 / 4.15 and its lookup 0.37 /
    0.79 (python tools/probes/host_overhead.py --breakdown). Holding the tuples keeps one call's
    tensors alive, and only while its caller is repeating it: any other call drops it."""

    groups: int
    abc: tuple
    sfr: tuple
    sizes: tuple
    entry: CallEntry

    def matches(self, abc, sfr, sizes) -> bool:
        """Whether a call's three lists hold exactly this call's objects."""
        return (len(abc) == len(sfr) == len(sizes) == self.groups and all(map(is_, abc, self.abc))
                and all(map(is_, sfr, self.sfr)) and all(map(is_, sizes, self.sizes)))


class LayoutMiss(NamedTuple):
    """What a call that missed both fast paths has read already: its tensors' layout fields
    (GroupedGemmRunner.layout_fields), for validation, the layout key it looked up
    (hashable: the lookup hashed it), which the slow path stores, and the call key it
    looked up where it built one (also hashed), which the slow path remembers; none is
    built again. Made and used within one call, on its own data."""

    fields: list
    key: tuple
    call_key: tuple | None = None


class GroupedGemmRunner:
    """Validation-free fast path for repeated calls plus the cached slow path.

    Caches, all bounded LRU:
      compiled:  config -> CompiledKernels (one per config, whatever the group count)
      plans:     size class -> (config, None) or (None, reason); the config choice can
                 model the schedule (milliseconds of Python), so it runs once per class of
                 problem sizes (KernelBackend.size_class)
      schedules: (size class, config) -> TileSchedule
      pointers:  (config, sizes, pointers) -> PointerTable (descriptors built once)
      groups:    (config, sizes) -> TableGroup: how many tables were made, and weak
                 references to those that no live call holds (spares), which new
                 pointers of those sizes take over (_take_spare) rather than allocate and
                 bind a new table
      calls:     ids of the call's tensors and its sizes -> CallEntry
      layouts:   address, dtype, shape and strides of the call's tensors, and its sizes ->
                 the pointers key (new tensor objects over an earlier call's memory)
      checked:   (config, sizes) whose first launch passed the self-check
    No cache holds anything derived from input values, nor a reference that keeps an
    input alive. One call is held apart: a call repeated back to back (RepeatedCall), whose
    tensors stay alive until another call is made.

    The self-check (backend.self_check, or NVFP4_GEMM_SELF_CHECK=1): the first launch of
    a config on each problem size is compared with the exact path on that call's inputs.
    A mismatch rejects the config for the process (plan() then returns the reason, and the
    caller falls back) and the call returns the exact result. It catches wrong numbers.

    The watchdog (watchdog.py) catches a hang of a config's first launch in the process
    and of its self-checked launches, the ones built with it: every wait of those builds
    gives up after watchdog_ms (a drain, the wait for work already issued, after twice
    that), and the first CTA to give up writes the config's record (host memory the GPU
    writes). The call waits for that launch and reads the record; a set record retires the
    config with one warning naming the wait, and the call returns the exact result. The
    other launches run the build without it (WATCHDOG_IN_EVERY_LAUNCH): a hang there, or
    a guarded launch queued behind one (griddepcontrol.wait is unbounded), is not caught.
    Every launch, fast paths included, first reads the record's flag without waiting for
    the GPU.

    Every launch, upload and init kernel goes to the default CUDA queue, as the leaderboard's
    harness runs: an upload or descriptor build is ordered before the launches that read it
    without any event. CUDA graph capture is not supported (a capture needs another queue).

    A launch error that leaves the CUDA context usable (KernelLaunchError, not sticky), on
    any path, retires the config for the process, like a failed self-check or a set
    watchdog record; a sticky one propagates. Retiring drops every cached way to launch the
    config (_retire), so no fast path launches it again: the call goes to the slow path,
    whose plan() declines the config and the caller falls back.

    Threads: the slow path (plan and run: the choice, compiles, schedules, tables and
    every cache put) holds the runner's lock, so two threads never build the same thing
    or interleave puts. The fast paths take no lock: their lookups tolerate a concurrent
    put or pop (LruCache), and a launch is bound once (bind_launch).
    """

    def __init__(self, backend: KernelBackend, num_sms: int, maxsize: int = 64,
                 self_check: bool | None = None, device_index: int | None = None,
                 other_devices: bool = True, watchdog_ms: int = DEFAULT_WATCHDOG_MS,
                 inject: tuple[str, str | None] | None = None,
                 watch_every_launch: bool = WATCHDOG_IN_EVERY_LAUNCH):
        self.backend = backend
        self.num_sms = num_sms
        # the CUDA device whose context the kernels live in (None: no device, as in the CPU
        # tests); a call made while another device is current runs under a device guard.
        # other_devices=False: the process sees no other device (then none can be current,
        # and the warm path skips the query, 0.18 us on the H200's host)
        self.device_index = device_index
        self._guarded = device_index is not None and other_devices
        self.self_check = backend.self_check if self_check is None else self_check
        self.compiled = LruCache(16)
        self.plans = LruCache(maxsize)
        self.schedules = LruCache(maxsize)
        self.pointers = LruCache(maxsize)
        self.calls = HashedLruCache(maxsize)
        self.layouts = HashedLruCache(maxsize)
        self.checked = LruCache(maxsize)
        # configs whose first launch in this process ran the watchdog's build and did not
        # hang (a config's first launch is guarded whatever the self-check: _run)
        self.guarded: set = set()
        self.groups = LruCache(maxsize)
        self._repeat: RepeatedCall | None = None  # the call being repeated (run_cached)
        # the latest call-cache hit's entry (it holds that call's c tensors, as the cache's
        # own latest item does; no input)
        self._last_hit: CallEntry | None = None
        self.rejected: dict = {}  # config -> why it is not used again (self-check, launch error)
        self.launches = 0  # kernel launches issued on every path (what the GPU tests count per call)
        # the watchdog: how long a wait may last (0: kernels built without it), the fault to
        # build in (watch_settings), one error record per config, and the sizes of each
        # pointer table's launches by tag
        self.watchdog_ms = watchdog_ms
        self.inject = inject
        self.watch_every_launch = watch_every_launch
        self.timeout_ns = timeout_ns(watchdog_ms)
        self.records: dict = {}
        self._tag_sizes = LruCache(4 * maxsize)
        self._last_tag = 0
        self._lock = threading.RLock()  # the slow path's (run may re-enter under a device guard)

    @staticmethod
    def call_key(data) -> tuple | None:
        """ids of every tensor the kernel touches, then the sizes: one flat tuple
        (call_key_function), or None where it cannot be built or hashed."""
        try:
            key = call_key_function(len(data[0]))(data)
            hash(key)
        except (TypeError, ValueError, LookupError):  # not a call's structure; sizes as lists
            return None
        return key

    def run_cached(self, data):
        """The outputs (a list) of a call seen before, launched; else a LayoutMiss for the
        slow path, or None. A repeat of the held RepeatedCall is recognized by identity
        alone; any other call builds its key (call_key_function), hashed once by the lookup."""
        repeat, key = self._repeat, None
        try:
            abc, _, sfr, sizes = data
            if repeat is not None and repeat.matches(abc, sfr, sizes):
                entry = repeat.entry
            else:
                self._repeat = None
                key = call_key_function(len(abc))(data)
                entry = self.calls.get(key)
                if entry is not None:
                    self._note_hit(entry, abc, sfr, sizes)
        except (TypeError, ValueError, LookupError):  # not a call's structure; sizes as lists
            return None
        if entry is None:
            return self.run_same_layout(data, key)
        return list(entry.outputs) if self._launch_cached(entry.table) else None

    def _note_hit(self, entry: CallEntry, abc, sfr, sizes) -> None:
        """A call-cache hit: the second hit in a row on one entry (a call repeated back to
        back) is held as the RepeatedCall, where its group tuples and sizes are immutable."""
        if entry is self._last_hit and all(type(x) is tuple for x in chain(abc, sfr, sizes)):
            self._repeat = RepeatedCall(len(abc), tuple(abc), tuple(sfr), tuple(sizes), entry)
        self._last_hit = entry

    # (address, dtype, shape, strides) of the 5 x G tensors (inputs.tensor_fields): most of a
    # layout key's cost, read once a call and shared with validation (LayoutMiss)
    layout_fields = staticmethod(tensor_fields)

    @staticmethod
    def layout_key(data, stored: bool = False, fields: list | None = None) -> tuple | None:
        """One flat tuple: each tensor's address, dtype, rank, shape and strides (the layout
        fields: layout_fields, or `fields` read earlier in this same call), then the size
        tuples; None where data is not made of tensors with storage, or its sizes are not
        hashable (validation then says what is wrong, or the call takes the slow path). The
        rank before each shape keeps the flat encoding unambiguous. Flat, a stored key is
        one object for the garbage collector to count, where a tuple per tensor and its
        shape made 10 a group: a first call's surviving objects bring the next collection
        nearer, and in the leaderboard's first round that collection lands in the timed
        calls. A stored key is hashed here, to check that it can be; a lookup's is hashed
        once, by the cache."""
        if fields is None:
            fields = GroupedGemmRunner.layout_fields(data)
            if fields is None:
                return None
        try:
            flat = []
            for p, d, shape, st in fields:
                flat += (p, d, len(shape))
                flat += shape
                flat += st
            key = (*flat, *data[3])
            if stored:
                hash(key)
            return key
        except (TypeError, ValueError, LookupError):
            return None

    def run_same_layout(self, data, call_key: tuple | None = None):
        """The launch for new tensor objects over the memory of an earlier call, or a
        LayoutMiss: what a framework passes when it rebuilds its argument lists, or when the
        caching allocator hands the same blocks back. Address, dtype, shape and strides equal
        to a call that was validated (and self-checked) decide everything validation and the
        descriptors depend on; CUDA addresses are unique across a process's devices. An
        entry names the pointer table's key, not the table, so the pointers LRU alone bounds
        the descriptors and split-K scratch kept; no tensor is referenced, and a stale entry
        is harmless: other tensors at those addresses with that layout are addressed by the
        same descriptors. No remembered call holds a table found here, so another thread's
        slow path may take it over as a spare (_take_spare): the lookup and the launch hold
        the runner's lock."""
        fields = self.layout_fields(data)
        key = None if fields is None else self.layout_key(data, fields=fields)
        if key is None:
            return None
        try:
            table_key = self.layouts.get(key)
        except TypeError:  # sizes given as lists: no fast path for this call
            return None
        with self._lock:
            table = None if table_key is None else self.pointers.get(table_key)
            if table is None:
                return LayoutMiss(fields, key, call_key)
            return [abc[2] for abc in data[0]] if self._launch_cached(table) else None

    def _launch_cached(self, table: PointerTable) -> bool:
        """A fast path's launch of a cached table; False where it did not run: its config's
        watchdog record is set, or the launch failed with the context usable. The config is
        retired in both cases (the caller's call then goes to the slow path, which falls
        back); a sticky launch error propagates."""
        if table.record.tripped:
            self._retire_timed_out(table)
            return False
        self.launches += 1
        try:
            if self._other_device_current():
                with torch.cuda.device(self.device_index):
                    table.launch()
            else:
                table.launch()
        except KernelLaunchError as e:
            if e.sticky:  # the context is gone: no fallback can run
                raise
            self._retire(table.config, f"could not launch ({e})")
            return False
        return True

    def _other_device_current(self) -> bool:
        """Whether the current CUDA device is not the runner's: the kernel's module and the
        default queue it launches on are the runner's device's, so both paths then run under
        its guard."""
        return self._guarded and torch._C._cuda_getDevice() != self.device_index

    def plan(self, problem: GroupedProblem):
        """(config, None) when the kernel takes this problem, else (None, reason)."""
        sizes = tuple(s for s in problem.sizes if s[0] and s[1])
        if not problem.kernel_layout:
            return None, f"inputs are not in the dense layout the TMA descriptors address ({problem.layout_issue})"
        if self.backend.needs_aligned_c and problem.c_misaligned:
            return None, f"the kernel stores C by TMA only ({problem.c_misaligned})"
        if not sizes:
            return None, "every group is empty"
        key = self.size_class(sizes)
        with self._lock:
            config, reason = self.plans.get_or_create(key, lambda: self._plan(key))
        if config in self.rejected:
            return self._alternative(key, config)
        return config, reason

    def _alternative(self, key: tuple, config):
        """(the next config, None) for a problem of size class `key` whose config is
        retired, with one warning naming both; else (None, why the retired one is not
        used), and the caller falls back."""
        b = self.backend
        alt = self._next_config(config, key)
        if alt is None:
            return None, f"{config} {self.rejected[config]}"
        warn_once(f"{b.name} kernel {b.config_name(config)} is retired ({self.rejected[config]}); "
                  f"running {b.config_name(alt)} instead")
        return alt, None

    def _next_config(self, config, key: tuple):
        """The first of the backend's alternatives to `config` that is not retired and takes
        the size class `key`, or None."""
        b = self.backend
        for alt in () if b.alternatives is None else b.alternatives(config):
            if alt not in self.rejected and b.can_implement(alt, key)[0]:
                return alt
        return None

    def size_class(self, sizes: tuple) -> tuple:
        """The sizes a config choice and schedule are made for (KernelBackend.size_class)."""
        return sizes if self.backend.size_class is None else self.backend.size_class(sizes)

    def _plan(self, sizes):
        config = self.backend.choose_config(sizes, self.num_sms)
        ok, reason = self.backend.can_implement(config, sizes)
        return (config, None) if ok else (None, reason)

    def run(self, data, problem: GroupedProblem, config, miss: LayoutMiss | None = None) -> list:
        """Slow path: compile, schedule and descriptors through their caches, then launch.
        `miss`: what this call's fast-path lookups read (run_cached's LayoutMiss). Raises
        KernelLaunchError where the launch fails (a config whose launch fails with the
        context still usable is retired, see plan)."""
        with self._lock:
            return self._run(data, problem, config, miss)

    def _run(self, data, problem: GroupedProblem, config, miss: LayoutMiss | None = None) -> list:
        if self._other_device_current():
            with torch.cuda.device(self.device_index):
                return self._run(data, problem, config, miss)
        b = self.backend
        sizes = tuple(s for s in problem.sizes if s[0] and s[1])
        ptrs = group_pointers(data, problem.sizes)
        check = self.self_check and (config, sizes) not in self.checked
        # a config's first launch in the process runs the watchdog's build and is waited
        # for, with or without the self-check: a never-run config that hangs then costs the
        # deadline and a warning, and the call still returns the exact result
        first = self.watchdog_ms != 0 and config not in self.guarded
        compiled = self.build(config, self.watch_settings(config))
        key = self.size_class(sizes)
        sched = self.schedules.get_or_create(
            (key, config), lambda: self._make_schedule(key, config, problem.device)
        )
        try:
            table = self._pointer_table(config, compiled, sched, ptrs, sizes, problem.device)
        except KernelLaunchError as e:  # the descriptor init's launch
            if not e.sticky:
                self._retire(config, f"could not launch its descriptor init ({e})")
            raise
        if table.record.tripped:  # an earlier launch of this config gave up
            self._retire_timed_out(table)
            raise KernelLaunchError(None, f"{b.name} kernel {b.config_name(config)}", sticky=False)
        self.launches += 1
        try:
            if check or first:
                self._checked_launch(config, table)()
            else:
                table.launch()
        except KernelLaunchError as e:
            if not e.sticky:
                self._retire(config, f"could not launch ({e})")
            raise
        outputs = [abc[2] for abc in data[0]]
        if first and not check:
            if problem.device.type == "cuda":
                torch.cuda.synchronize(problem.device)  # the guarded launch ends within its deadlines
            if table.record.tripped:  # a wait of it gave up: its C is not the answer
                self._retire_timed_out(table)
                return exact_into(outputs, run_torch_exact(data, problem, [torch.empty_like(c) for c in outputs]))
        if first:
            self.guarded.add(config)
        if check:
            exact = run_torch_exact(data, problem, [torch.empty_like(c) for c in outputs])
            wrong = first_mismatch(outputs, exact)  # waits for the launch (and the exact path)
            if table.record.tripped:  # a wait of this launch gave up: its C is not the answer
                self._retire_timed_out(table)
                return exact_into(outputs, exact)
            if wrong is not None:
                self._retire(config, f"failed its self-check ({wrong})")
                warn_once(f"{b.name} kernel {config} failed its self-check on sizes {list(sizes)}: "
                          f"{wrong}; this config is not used again in this process")
                return exact_into(outputs, exact)
            self.checked.put((config, sizes), True)
        key = self.call_key(data) if miss is None or miss.call_key is None else miss.call_key
        if key is not None:
            self._remember_call(key, data, table)
        layout = self.layout_key(data, stored=True) if miss is None else miss.key
        if layout is not None:
            self.layouts.put(layout, (config, sizes, ptrs))
        return outputs

    def watch_settings(self, config, checked: bool = False) -> WatchSettings:
        """How `config` is built for its self-checked launches (checked) or the others: with
        the watchdog unless NVFP4_GEMM_WATCHDOG_MS is 0, and outside the self-check only
        where it goes into every launch (watch_every_launch); with the injected fault
        where NVFP4_GEMM_INJECT_HANG names this config or none, in the builds with the
        watchdog."""
        enabled = self.watchdog_ms != 0 and (checked or self.watch_every_launch)
        if enabled and self.inject is not None:
            site, target = self.inject
            if target is None or target == self.backend.config_name(config):
                return WatchSettings(inject=site)
        return WatchSettings(enabled=enabled)

    def build(self, config, watch: WatchSettings) -> CompiledKernels:
        """The build of config with `watch`: one compile each, the compile cache keyed by
        both (the init kernel, which writes the descriptors, is the same in both)."""
        return self.compiled.get_or_create((config, watch), lambda: self.backend.compile(config, watch))

    def _checked_launch(self, config, table: PointerTable) -> Callable[[], None]:
        """The launch of a self-checked call, or of a config's first in the process: the
        table's own where every launch has the watchdog, else the watchdog build's, bound
        to the table's pointers once."""
        checked = self.watch_settings(config, checked=True)
        if checked == self.watch_settings(config):
            return table.launch
        if table.checked_launch is None:
            build = self.build(config, checked)
            table.checked_launch = build.prepare(table.sizes, table.ptrs, table.tensormaps, table.schedule,
                                                 table.scratch, table.watch)
        return table.checked_launch

    def _retire_timed_out(self, table: PointerTable) -> None:
        """A wait of a launch of table's config gave up (its watchdog record is set): the
        config is not launched again, with one warning naming the config, the sizes of that
        launch where the runner still knows them, and the wait."""
        config = table.config
        if config in self.rejected:
            return
        timeout = table.record.read()
        sizes = self._tag_sizes.get(timeout.tag)
        self._retire(config, timeout.describe())
        # what that launch's sizes run from now on: the next config, or the fallback
        after = None if sizes is None else self._next_config(config, self.size_class(sizes))
        fallback = self.backend.fallback if after is None else self.backend.config_name(after)
        warn_once(timeout.message(self.backend.config_name(config), sizes, fallback))

    def _retire(self, config, why: str) -> None:
        """config is not launched again in this process: plan() declines it with `why`, and
        every cached way to launch it (its pointer tables, the call and layout entries that
        reach them, the repeated call) is dropped, so that no fast path finds it. A fast
        path that fetched its entry before this ran may still launch it once."""
        with self._lock:
            self.rejected.setdefault(config, why)
            self.pointers.drop_where(lambda key, table: table.config == config)
            self.calls.drop_where(lambda key, entry: entry.table.config == config)
            self.layouts.drop_where(lambda key, table_key: table_key[0] == config)
            self.groups.drop_where(lambda key, group: key[0] == config)
            if self._repeat is not None and self._repeat.entry.table.config == config:
                self._repeat = None
            if self._last_hit is not None and self._last_hit.table.config == config:
                self._last_hit = None

    def host_schedule(self, sizes, config) -> HostSchedule:
        b = self.backend
        if b.schedule is not None:
            return b.schedule(sizes, config, self.num_sms)
        rows = b.tile_order(sizes, *b.tile_shape(config))
        return HostSchedule({"schedule": rows}, len(rows), b.grid(config, len(rows), self.num_sms, self.device_index))

    def _make_schedule(self, sizes, config, device) -> TileSchedule:
        host = self.host_schedule(sizes, config)
        tables = {name: to_device_async(int32_rows(rows), device)
                  for name, rows in host.tables.items()}
        # the host rows are not kept: uploaded, they are only garbage for the collector to walk
        return TileSchedule(tables, dataclasses.replace(host, tables={}))

    def _pointer_table(self, config, compiled, sched, ptrs, sizes, device) -> PointerTable:
        """The table of these pointers: cached, else a spare of this config and sizes taken
        over, else a new one; its descriptors' init is launched in the last two cases."""
        key = (config, sizes, ptrs)
        table = self.pointers.get(key)
        if table is None:
            group = self.groups.get_or_create((config, sizes), TableGroup)
            table = self._take_spare(group, sizes, ptrs) if group.made >= TABLES_BEFORE_REUSE else None
            if table is None:
                table = self._make_table(config, compiled, sched, ptrs, sizes, device)
                group.made += 1
            table.key = key
            self.pointers.put(key, table)
        return table

    def _take_spare(self, group: TableGroup, sizes, ptrs) -> PointerTable | None:
        """The group's oldest spare table with `ptrs` uploaded into its rows and its
        descriptors' init launched, or None. Both go to the default queue behind every
        launch that read the old rows: the init kernel is launched without programmatic
        dependence, so it starts after they end, and the kernels acquire each descriptor
        through the tensormap proxy before use. The split-K flags stay zero between calls
        (the kernel resets what it consumed; a launch that gave up retires its config,
        whose tables are dropped)."""
        spares = group.spares
        # the caller holds the runner's lock, as _release does to append: only this pops
        while spares:
            table = spares.popleft()()
            if table is None or table.live or table.record.tripped or table.key is None:
                continue
            self.pointers.discard(table.key, table)
            table.key = None
            upload_async(pointer_table_rows(ptrs, sizes)[0], table.buffer)
            table.init_launch()
            return table
        return None

    def _make_table(self, config, compiled, sched, ptrs, sizes, device) -> PointerTable:
        groups, num_desc, num_flags = len(ptrs), self.backend.num_desc, sched.host.num_flags
        lay = table_layout(groups, num_desc, num_flags, sched.host.workspace_floats)
        host, sizes_at = pointer_table_rows(ptrs, sizes, lay.flag_words)
        # one allocation (torch's are 512-byte aligned) and one upload for the whole table
        buf = to_device_async(host, device, lay.words)
        ptr_dev = buf[: 5 * groups].view(groups, 5)
        sizes_dev = buf[sizes_at:sizes_at + 2 * groups].view(torch.int32).view(groups, 4)
        # the init kernel writes every byte of the descriptors
        tensormaps = buf[lay.desc_at:lay.partials_at].view(groups, num_desc, 16)
        init_launch = compiled.init(ptr_dev, sizes_dev, tensormaps)
        init_launch()
        scratch = None
        if num_flags:
            scratch = SplitKScratch(
                buf[lay.partials_at:].view(torch.float32)[: sched.host.workspace_floats],
                buf[lay.flags_at:lay.flags_at + lay.flag_words].view(torch.int32)[:num_flags],
            )
        record = self.records.get(config)
        if record is None:
            record = self.records[config] = WatchdogRecord(device)
        self._last_tag += 1
        self._tag_sizes.put(self._last_tag, sizes)
        watch = LaunchWatch(record, self._last_tag, self.timeout_ns)
        table = PointerTable(ptr_dev, sizes_dev, tensormaps, None, scratch, sched, config, record, watch,
                             buffer=buf, init_launch=init_launch)
        table.launch = compiled.prepare(sizes_dev, ptr_dev, tensormaps, sched, scratch, watch)
        return table

    def _remember_call(self, key, data, table) -> None:
        """The call's entry, dropped when its first tensor is freed; until then the call
        holds its table (PointerTable.live). The callbacks hold the table through a list that
        the first of them empties, so the release runs once per call, on whichever thread
        frees that tensor, and no reference cycle runs through the entry."""
        calls, release = self.calls, self._release
        holder = [table]

        def forget(_ref, key=key):
            calls.pop(key)
            try:
                release(holder.pop())
            except IndexError:  # an earlier tensor of this call released it
                pass

        tensors = list(chain(*data[0], *data[2]))
        refs = [weakref.ref(t, forget) for t in tensors]
        table.live += 1
        calls.put(key, CallEntry(table, [abc[2] for abc in data[0]], refs))

    def _release(self, table: PointerTable) -> None:
        """One call that held `table` is gone; a table that none holds becomes a spare of its
        config and sizes (while its config is not retired)."""
        with self._lock:
            table.live -= 1
            if table.live or table.key is None or table.config in self.rejected:
                return
            group = self.groups.get(table.key[:2])
            if group is not None:
                group.spares.append(weakref.ref(table))
