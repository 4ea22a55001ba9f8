import pytest

from textkit import truncate, truncate_words


def test_short_text_unchanged():
    assert truncate("hello", 10) == "hello"


def test_long_text_is_cut_with_suffix():
    assert truncate("The quick brown fox", 10) == "The qui..."
    assert len(truncate("The quick brown fox", 10)) == 10


def test_custom_suffix():
    assert truncate("abcdefghij", 5, suffix="~") == "abcd~"


def test_width_smaller_than_suffix():
    assert truncate("abcdefghij", 2) == ".."


def test_negative_width():
    with pytest.raises(ValueError):
        truncate("abc", -1)


def test_truncate_words():
    assert truncate_words("one two three four", 2) == "one two..."
    assert truncate_words("one two", 5) == "one two"
