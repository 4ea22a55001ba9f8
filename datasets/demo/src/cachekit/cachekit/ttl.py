"""LRU cache whose entries expire after a fixed time-to-live."""

import time

from .lru import LRUCache


class TTLCache(LRUCache):
    """An :class:`LRUCache` whose entries expire *ttl* seconds after being set.

    *clock* is a function returning the current time in seconds; it defaults
    to :func:`time.monotonic` and can be replaced in tests.
    """

    def __init__(self, maxsize=128, ttl=60.0, clock=time.monotonic):
        if ttl <= 0:
            raise ValueError("ttl must be positive")
        super().__init__(maxsize)
        self.ttl = ttl
        self.clock = clock

    def __getitem__(self, key):
        expires, value = super().__getitem__(key)
        if expires <= self.clock():
            del self._data[key]
            self.hits -= 1
            self.misses += 1
            raise KeyError(key)
        return value

    def __setitem__(self, key, value):
        self.expire()
        super().__setitem__(key, (self.clock() + self.ttl, value))

    def set(self, key, value):
        self[key] = value

    def __contains__(self, key):
        entry = self._data.get(key)
        return entry is not None and entry[0] > self.clock()

    def peek(self, key, default=None):
        if key in self:
            return self._data[key][1]
        return default

    def pop(self, key, default=None):
        entry = self._data.pop(key, None)
        if entry is None or entry[0] <= self.clock():
            return default
        return entry[1]

    def expire(self):
        """Drop every expired entry; return how many were dropped."""
        now = self.clock()
        expired = [key for key, (expires, _) in self._data.items() if expires <= now]
        for key in expired:
            del self._data[key]
        return len(expired)

    def remaining(self, key):
        """Seconds until *key* expires, or None if it is absent or expired."""
        entry = self._data.get(key)
        if entry is None:
            return None
        left = entry[0] - self.clock()
        return left if left > 0 else None
