import pytest

from cachekit import LRUCache


def test_set_and_get():
    cache = LRUCache(2)
    cache["a"] = 1
    assert cache["a"] == 1
    assert len(cache) == 1


def test_evicts_least_recently_used():
    cache = LRUCache(2)
    cache["a"] = 1
    cache["b"] = 2
    cache["a"]  # a is now the most recently used
    cache["c"] = 3
    assert "b" not in cache
    assert set(cache) == {"a", "c"}
    assert cache.evictions == 1


def test_hits_and_misses():
    cache = LRUCache(2)
    cache["a"] = 1
    cache.get("a")
    cache.get("zzz")
    assert (cache.hits, cache.misses) == (1, 1)


def test_peek_does_not_touch_order():
    cache = LRUCache(2)
    cache["a"] = 1
    cache["b"] = 2
    assert cache.peek("a") == 1
    assert cache.keys_by_age() == ["a", "b"]


def test_pop():
    cache = LRUCache(2)
    cache["a"] = 1
    assert cache.pop("a") == 1
    assert cache.pop("a", None) is None
    with pytest.raises(KeyError):
        cache.pop("a")


def test_invalid_maxsize():
    with pytest.raises(ValueError):
        LRUCache(0)
