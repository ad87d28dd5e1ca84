"""Bounded LRU caches for the host wrapper: lookups that tolerate a concurrent put or pop
without a lock, and a hashed variant whose keys are compared only on a hash match."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any


def _touch(data: OrderedDict, key) -> None:
    """Mark key most recently used, unless another thread (or a weakref callback) has just
    removed it."""
    try:
        data.move_to_end(key)
    except KeyError:
        pass


class LruCache:
    """A bounded mapping that evicts the least recently used entry; counts hits and misses.

    Lookups may run on several threads at once, and beside a put on another thread or a
    weakref callback's pop (the runner serializes its puts; see GroupedGemmRunner): an
    entry that leaves between a lookup's get and its move_to_end is still returned."""

    def __init__(self, maxsize: int):
        self.maxsize = maxsize
        self._data: OrderedDict = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key):
        value = self._data.get(key)
        if value is None:
            self.misses += 1
            return None
        _touch(self._data, key)
        self.hits += 1
        return value

    def put(self, key, value) -> None:
        self._data[key] = value
        _touch(self._data, key)
        while len(self._data) > self.maxsize:
            try:
                self._data.popitem(last=False)
            except KeyError:  # emptied by another thread meanwhile
                break

    def get_or_create(self, key, create: Callable[[], Any]):
        value = self.get(key)
        if value is None:
            value = create()
            self.put(key, value)
        return value

    def pop(self, key) -> None:
        self._data.pop(key, None)

    def discard(self, key, value) -> None:
        """Removes key where it maps to this very value (not to a later one put there)."""
        if self._data.get(key) is value:
            self._data.pop(key, None)

    def drop_where(self, doomed: Callable[[Any, Any], bool]) -> None:
        """Removes every entry whose (key, value) `doomed` accepts (a snapshot of the items
        is walked: list() of them runs in C, with no Python between, so no other thread
        changes them meanwhile)."""
        for key, value in list(self._data.items()):
            if doomed(key, value):
                self._data.pop(key, None)

    def clear(self) -> None:
        self._data.clear()
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key) -> bool:
        return key in self._data


class HashedLruCache(LruCache):
    """An LRU cache for the fast paths' long tuple keys (a call's tensor ids, or its
    tensors' layouts): one tuple hash per lookup. Python does not cache a tuple's hash,
    and OrderedDict.get + move_to_end would hash the key twice, so items are filed under
    the key's hash as (key, value); a lookup is one hash, one int-keyed probe and one
    tuple comparison. Two keys with the same hash simply replace each other. The item of
    the latest hit is checked first, by comparison alone: a benchmark repeats one call."""

    def __init__(self, maxsize: int):
        super().__init__(maxsize)
        self._latest = None  # (key, value) of the latest hit

    def get(self, key):
        latest = self._latest
        if latest is not None and latest[0] == key:
            self.hits += 1
            return latest[1]
        h = hash(key)
        item = self._data.get(h)
        if item is None or item[0] != key:
            self.misses += 1
            return None
        _touch(self._data, h)
        self.hits += 1
        self._latest = item
        return item[1]

    def put(self, key, value) -> None:
        latest = self._latest
        if latest is not None:
            _touch(self._data, hash(latest[0]))  # its hits by comparison count as use
        self._latest = None
        super().put(hash(key), (key, value))

    def pop(self, key) -> None:
        h = hash(key)
        item = self._data.get(h)
        if item is not None and item[0] == key:
            self._data.pop(h, None)
            if item is self._latest:
                self._latest = None

    def drop_where(self, doomed: Callable[[Any, Any], bool]) -> None:
        for h, item in list(self._data.items()):
            if doomed(*item):
                self._data.pop(h, None)
                if item is self._latest:
                    self._latest = None

    def clear(self) -> None:
        super().clear()
        self._latest = None

    def __contains__(self, key) -> bool:
        item = self._data.get(hash(key))
        return item is not None and item[0] == key
