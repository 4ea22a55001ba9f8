"""Least-recently-used cache."""

from collections import OrderedDict
from collections.abc import MutableMapping

_MISSING = object()


class LRUCache(MutableMapping):
    """A mapping holding at most *maxsize* entries.

    Reading or writing an entry marks it as most recently used; when the
    cache is full, adding a new key evicts the least recently used entry.
    """

    def __init__(self, maxsize=128):
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        self.maxsize = maxsize
        self._data = OrderedDict()
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def __getitem__(self, key):
        try:
            value = self._data[key]
        except KeyError:
            self.misses += 1
            raise
        self._data.move_to_end(key)
        self.hits += 1
        return value

    def __setitem__(self, key, value):
        if len(self._data) >= self.maxsize:
            self._evict()
        self._data[key] = value
        self._data.move_to_end(key)

    def __delitem__(self, key):
        del self._data[key]

    def __iter__(self):
        return iter(self._data)

    def __len__(self):
        return len(self._data)

    def __contains__(self, key):
        # Membership tests do not count as a use.
        return key in self._data

    def _evict(self):
        self._data.popitem(last=False)
        self.evictions += 1

    def peek(self, key, default=None):
        """Return the value for *key* without marking it as used."""
        return self._data.get(key, default)

    def get(self, key, default=None):
        try:
            return self[key]
        except KeyError:
            return default

    def pop(self, key, default=_MISSING):
        if key in self._data:
            return self._data.pop(key)
        if default is _MISSING:
            raise KeyError(key)
        return default

    def clear(self):
        self._data.clear()

    def keys_by_age(self):
        """Keys from least to most recently used."""
        return list(self._data)

    def __repr__(self):
        return f"{type(self).__name__}(maxsize={self.maxsize}, size={len(self)})"
