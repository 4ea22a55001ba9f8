from cachekit import make_key


def test_same_call_same_key():
    assert make_key((1, 2), {"a": 3}) == make_key((1, 2), {"a": 3})
    assert hash(make_key((1, 2), {})) == hash(make_key((1, 2), {}))


def test_kwargs_order_does_not_matter():
    assert make_key((), {"a": 1, "b": 2}) == make_key((), {"b": 2, "a": 1})


def test_positional_and_keyword_differ():
    assert make_key((1,), {}) != make_key((), {"x": 1})


def test_typed():
    assert make_key((1,), {}) == make_key((1.0,), {})
    assert make_key((1,), {}, typed=True) != make_key((1.0,), {}, typed=True)
