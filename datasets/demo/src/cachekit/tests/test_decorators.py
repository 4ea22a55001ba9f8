from cachekit import LRUCache, memoize


def test_memoize_caches_results():
    calls = []

    @memoize
    def square(x):
        calls.append(x)
        return x * x

    assert square(4) == 16
    assert square(4) == 16
    assert calls == [4]


def test_memoize_with_custom_cache():
    store = LRUCache(1)

    @memoize(cache=store)
    def double(x):
        return 2 * x

    double(1)
    double(2)
    assert len(store) == 1
    assert double.cache is store


def test_memoize_preserves_metadata():
    @memoize
    def documented(x):
        """Docs."""
        return x

    assert documented.__name__ == "documented"
    assert documented.__doc__ == "Docs."


def test_cache_clear():
    calls = []

    @memoize
    def ident(x):
        calls.append(x)
        return x

    ident(1)
    ident.cache_clear()
    ident(1)
    assert calls == [1, 1]
