import pytest

from semverkit import InvalidRange, Range, max_satisfying, min_satisfying, satisfies


def test_plain_comparators():
    assert satisfies("1.2.3", ">=1.2.3")
    assert not satisfies("1.2.2", ">=1.2.3")
    assert satisfies("1.9.0", ">=1.2 <2")
    assert not satisfies("2.0.0", ">=1.2 <2")


def test_exact_version():
    assert satisfies("1.2.3", "1.2.3")
    assert satisfies("1.2.3", "=1.2.3")
    assert not satisfies("1.2.4", "1.2.3")


def test_caret_major():
    assert satisfies("1.2.3", "^1.2.3")
    assert satisfies("1.9.0", "^1.2.3")
    assert not satisfies("2.0.0", "^1.2.3")
    assert not satisfies("1.2.2", "^1.2.3")


def test_caret_zero_zero_patch():
    assert satisfies("0.0.3", "^0.0.3")
    assert not satisfies("0.0.4", "^0.0.3")


def test_caret_partial():
    assert satisfies("1.7.0", "^1.x")
    assert satisfies("0.9.0", "^0.x")
    assert not satisfies("1.0.0", "^0.x")


def test_tilde():
    assert satisfies("1.2.9", "~1.2.3")
    assert not satisfies("1.3.0", "~1.2.3")
    assert satisfies("1.9.0", "~1")
    assert not satisfies("2.0.0", "~1")


def test_x_ranges():
    assert satisfies("1.2.7", "1.2.x")
    assert not satisfies("1.3.0", "1.2.x")
    assert satisfies("1.99.0", "1.*")
    assert satisfies("42.0.0", "*")


def test_union():
    r = Range("~1.2 || ^3.1")
    assert "1.2.5" in r
    assert "3.4.0" in r
    assert "2.0.0" not in r


def test_spaces_after_operator():
    assert satisfies("1.5.0", ">= 1.2.0 < 2.0.0")


def test_prerelease_excluded_unless_named():
    assert not satisfies("1.3.0-beta.1", "^1.2.0")
    assert satisfies("1.3.0-beta.2", ">=1.3.0-beta.1 <2")


def test_max_and_min_satisfying():
    versions = ["1.2.0", "1.9.3", "2.0.0", "1.4.1"]
    assert str(max_satisfying(versions, "^1.2.0")) == "1.9.3"
    assert str(min_satisfying(versions, "^1.2.0")) == "1.2.0"
    assert max_satisfying(versions, ">=3") is None


@pytest.mark.parametrize("spec", ["^", ">=1.2.3.4", "~a.b"])
def test_invalid_ranges(spec):
    with pytest.raises(InvalidRange):
        Range(spec)
