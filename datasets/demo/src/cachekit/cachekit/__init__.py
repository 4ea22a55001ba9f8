"""cachekit - in-memory LRU and TTL caches."""

from .decorators import memoize
from .keys import make_key
from .lru import LRUCache
from .ttl import TTLCache

__all__ = ["LRUCache", "TTLCache", "make_key", "memoize"]

__version__ = "0.1.0"
