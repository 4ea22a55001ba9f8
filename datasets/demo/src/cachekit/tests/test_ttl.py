import pytest

from cachekit import TTLCache


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_entry_expires():
    clock = FakeClock()
    cache = TTLCache(maxsize=4, ttl=10, clock=clock)
    cache.set("a", 1)
    assert cache["a"] == 1
    clock.now += 10
    with pytest.raises(KeyError):
        cache["a"]
    assert "a" not in cache


def test_remaining():
    clock = FakeClock()
    cache = TTLCache(maxsize=4, ttl=10, clock=clock)
    cache.set("a", 1)
    clock.now += 4
    assert cache.remaining("a") == pytest.approx(6)
    assert cache.remaining("nope") is None


def test_expired_entries_are_dropped_before_evicting():
    clock = FakeClock()
    cache = TTLCache(maxsize=2, ttl=10, clock=clock)
    cache.set("a", 1)
    clock.now += 5
    cache.set("b", 2)
    clock.now += 6  # "a" has expired, "b" has not
    cache.set("c", 3)
    assert cache.evictions == 0
    assert sorted(cache) == ["b", "c"]


def test_get_with_default():
    clock = FakeClock()
    cache = TTLCache(maxsize=2, ttl=1, clock=clock)
    assert cache.get("x", "default") == "default"


def test_invalid_ttl():
    with pytest.raises(ValueError):
        TTLCache(ttl=0)
