import pytest

from semverkit import InvalidVersion, Version, compare, parse


def test_parse_full_version():
    v = Version.parse("1.4.2-beta.1+exp.sha.5114f85")
    assert v.release == (1, 4, 2)
    assert v.prerelease == ("beta", "1")
    assert v.build == ("exp", "sha", "5114f85")


def test_parse_accepts_leading_v_and_whitespace():
    assert parse(" v2.0.1 ") == Version(2, 0, 1)


@pytest.mark.parametrize("text", ["1.2", "01.2.3", "1.2.3-", "1.2.3+", "a.b.c", ""])
def test_parse_rejects_invalid(text):
    with pytest.raises(InvalidVersion):
        Version.parse(text)


def test_parse_rejects_non_string():
    with pytest.raises(TypeError):
        Version.parse(1.2)


def test_str_roundtrip():
    for text in ["0.0.1", "1.2.3-rc.1", "1.2.3+build.7", "10.20.30-alpha.beta+meta"]:
        assert str(Version.parse(text)) == text


def test_release_ordering():
    assert Version.parse("1.2.3") < Version.parse("1.2.4")
    assert Version.parse("1.10.0") > Version.parse("1.9.9")
    assert Version.parse("2.0.0") > Version.parse("1.99.99")


def test_prerelease_is_lower_than_release():
    assert Version.parse("1.0.0-alpha") < Version.parse("1.0.0")
    assert compare("1.0.0", "1.0.0-rc.1") == 1


def test_prerelease_alphanumeric_ordering():
    ordered = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0"]
    versions = [Version.parse(v) for v in ordered]
    assert sorted(reversed(versions)) == versions


def test_build_metadata_is_ignored_in_comparison():
    assert Version.parse("1.0.0+a") == Version.parse("1.0.0+b")
    assert hash(Version.parse("1.0.0+a")) == hash(Version.parse("1.0.0"))


def test_bump():
    v = Version.parse("1.4.2")
    assert v.bump_major() == Version(2, 0, 0)
    assert v.bump_minor() == Version(1, 5, 0)
    assert v.bump_patch() == Version(1, 4, 3)
    assert Version.parse("1.4.2-rc.1").bump_patch() == Version(1, 4, 2)


def test_negative_component_rejected():
    with pytest.raises(InvalidVersion):
        Version(1, -1, 0)
