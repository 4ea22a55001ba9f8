import pytest

from confkit import InterpolationError, loads


def test_same_section_reference():
    cfg = loads("[paths]\nroot = /srv\nlogs = ${root}/logs\n")
    assert cfg.get("paths", "logs") == "/srv/logs"


def test_cross_section_reference():
    cfg = loads("[a]\nx = 1\n[b]\ny = ${a:x}2\n")
    assert cfg.get("b", "y") == "12"


def test_reference_to_default():
    cfg = loads("home = /home/u\n[a]\ncache = ${home}/.cache\n")
    assert cfg.get("a", "cache") == "/home/u/.cache"


def test_escaped_dollar():
    cfg = loads("[a]\nprice = $$5\n")
    assert cfg.get("a", "price") == "$5"


def test_raw_value():
    cfg = loads("[a]\nx = ${y}\ny = 1\n")
    assert cfg.get("a", "x", raw=True) == "${y}"


def test_missing_reference():
    cfg = loads("[a]\nx = ${nope}\n")
    with pytest.raises(InterpolationError):
        cfg.get("a", "x")


def test_recursive_reference():
    cfg = loads("[a]\nx = ${y}\ny = ${x}\n")
    with pytest.raises(InterpolationError):
        cfg.get("a", "x")
