"""Memoizing decorators."""

import functools

from .keys import make_key


def memoize(func=None, *, cache={}, key=make_key, typed=False):
    """Cache the results of *func*.

    Use it bare (``@memoize``) or with options
    (``@memoize(cache=LRUCache(100))``).  *cache* is any mutable mapping;
    by default every decorated function gets a plain ``dict``.  The wrapper
    exposes the mapping as ``wrapper.cache`` and ``wrapper.cache_clear()``.
    """

    def decorator(function):
        store = cache

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            k = key(args, kwargs, typed)
            try:
                return store[k]
            except KeyError:
                pass
            result = function(*args, **kwargs)
            store[k] = result
            return result

        wrapper.cache = store
        wrapper.cache_clear = store.clear
        return wrapper

    if func is not None:
        return decorator(func)
    return decorator
