import pytest

from confkit import ParseError
from confkit.parser import parse_string


def test_sections_and_options():
    sections = parse_string("[a]\nx = 1\ny: 2\n[b]\nz=3\n")
    assert sections == {"DEFAULT": {}, "a": {"x": "1", "y": "2"}, "b": {"z": "3"}}


def test_comments_and_blank_lines():
    sections = parse_string("# top\n\n[a]\n; note\nx = 1\n")
    assert sections["a"] == {"x": "1"}


def test_keys_are_lowercased():
    assert parse_string("[a]\nHost = h\n")["a"] == {"host": "h"}


def test_options_before_first_section_go_to_default():
    assert parse_string("x = 1\n[a]\n")["DEFAULT"] == {"x": "1"}


def test_continuation_lines():
    sections = parse_string("[a]\nitems = one\n  two\n  three\n")
    assert sections["a"]["items"] == "one\ntwo\nthree"


def test_empty_value():
    assert parse_string("[a]\nx =\n")["a"] == {"x": ""}


def test_missing_separator_is_an_error():
    with pytest.raises(ParseError) as info:
        parse_string("[a]\njust some words\n")
    assert info.value.lineno == 2


def test_unterminated_header():
    with pytest.raises(ParseError):
        parse_string("[a\n")
