import pytest

from textkit import fill, wrap


def test_wrap_simple():
    assert wrap("a b c d e f", 5) == ["a b c", "d e f"]


def test_wrap_collapses_whitespace():
    assert wrap("one   two\n three", 20) == ["one two three"]


def test_wrap_breaks_long_words():
    assert wrap("abcdefghij xy", 4) == ["abcd", "efgh", "ij", "xy"]


def test_wrap_keeps_long_words_when_asked():
    assert wrap("abcdefghij xy", 4, break_long_words=False) == ["abcdefghij", "xy"]


def test_wrap_empty():
    assert wrap("", 10) == []


def test_fill():
    assert fill("aaa bbb ccc", 7) == "aaa bbb\nccc"


def test_invalid_width():
    with pytest.raises(ValueError):
        wrap("x", 0)
