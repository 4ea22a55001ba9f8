import pytest

from textkit import slugify


def test_basic():
    assert slugify("Hello, World!") == "hello-world"


def test_collapses_runs_and_strips_edges():
    assert slugify("  --Release   notes: v2.0--  ") == "release-notes-v2-0"


def test_custom_separator():
    assert slugify("Hello World", separator="_") == "hello_world"


def test_keep_case():
    assert slugify("Hello World", lowercase=False) == "Hello-World"


def test_max_length_does_not_leave_separator():
    assert slugify("hello big world", max_length=10) == "hello-big"


def test_fullwidth_characters_are_folded():
    assert slugify("ＡＢＣ １２３") == "abc-123"


def test_only_symbols_gives_empty_slug():
    assert slugify("!!! ???") == ""


def test_rejects_non_string():
    with pytest.raises(TypeError):
        slugify(None)
