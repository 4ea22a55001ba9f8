"""Building hashable cache keys from call arguments."""

_KWARGS_MARK = object()


class HashedKey(tuple):
    """A tuple that caches its own hash (keys are hashed on every lookup)."""

    __slots__ = ()

    def __hash__(self):
        return tuple.__hash__(self)


def make_key(args, kwargs, typed=False):
    """Return a hashable key for a call with *args* and *kwargs*.

    Keyword arguments are sorted so that ``f(a=1, b=2)`` and ``f(b=2, a=1)``
    share a key.  With *typed*, ``f(1)`` and ``f(1.0)`` get different keys.
    """
    key = tuple(args)
    if kwargs:
        key += (_KWARGS_MARK,) + tuple(sorted(kwargs.items()))
    if typed:
        key += tuple(type(value) for value in args)
        if kwargs:
            key += tuple(type(value) for _, value in sorted(kwargs.items()))
    return HashedKey(key)
