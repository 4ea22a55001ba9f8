"""The :class:`Version` type and version comparison."""

import re
from functools import total_ordering

from .errors import InvalidVersion

_VERSION_RE = re.compile(
    r"^v?(?P<major>0|[1-9]\d*)\.(?P<minor>0|[1-9]\d*)\.(?P<patch>0|[1-9]\d*)"
    r"(?:-(?P<pre>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
    r"(?:\+(?P<build>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
)


def _split_identifiers(text):
    if not text:
        return ()
    return tuple(text.split("."))


def _compare_identifiers(a, b):
    """Compare two pre-release identifiers (semver section 11.4)."""
    a_numeric = a.isdigit()
    b_numeric = b.isdigit()
    if a_numeric and not b_numeric:
        return -1
    if b_numeric and not a_numeric:
        return 1
    if a == b:
        return 0
    return -1 if a < b else 1


def _compare_prerelease(a, b):
    # A version without a pre-release has higher precedence than one with.
    if not a and not b:
        return 0
    if not a:
        return 1
    if not b:
        return -1
    for left, right in zip(a, b):
        result = _compare_identifiers(left, right)
        if result:
            return result
    return (len(a) > len(b)) - (len(a) < len(b))


@total_ordering
class Version:
    """A semantic version such as ``1.4.0-rc.1+build.5``.

    Build metadata is kept but ignored when comparing versions.
    """

    __slots__ = ("major", "minor", "patch", "prerelease", "build")

    def __init__(self, major, minor=0, patch=0, prerelease=(), build=()):
        for name, value in (("major", major), ("minor", minor), ("patch", patch)):
            if not isinstance(value, int) or value < 0:
                raise InvalidVersion(f"{name} must be a non-negative integer, got {value!r}")
        self.major = major
        self.minor = minor
        self.patch = patch
        if isinstance(prerelease, str):
            prerelease = _split_identifiers(prerelease)
        if isinstance(build, str):
            build = _split_identifiers(build)
        self.prerelease = tuple(str(part) for part in prerelease)
        self.build = tuple(str(part) for part in build)

    @classmethod
    def parse(cls, text):
        """Parse *text* (an optional leading ``v`` is accepted)."""
        if isinstance(text, Version):
            return text
        if not isinstance(text, str):
            raise TypeError(f"expected a string, got {type(text).__name__}")
        match = _VERSION_RE.match(text.strip())
        if match is None:
            raise InvalidVersion(f"invalid version: {text!r}")
        return cls(
            int(match.group("major")),
            int(match.group("minor")),
            int(match.group("patch")),
            _split_identifiers(match.group("pre")),
            _split_identifiers(match.group("build")),
        )

    @property
    def is_prerelease(self):
        return bool(self.prerelease)

    @property
    def release(self):
        """The ``(major, minor, patch)`` triple."""
        return (self.major, self.minor, self.patch)

    def bump_major(self):
        return Version(self.major + 1, 0, 0)

    def bump_minor(self):
        return Version(self.major, self.minor + 1, 0)

    def bump_patch(self):
        if self.prerelease:
            return Version(self.major, self.minor, self.patch)
        return Version(self.major, self.minor, self.patch + 1)

    def compare(self, other):
        """Return -1, 0 or 1 as *self* is lower than, equal to or higher than *other*."""
        other = Version.parse(other)
        if self.release != other.release:
            return -1 if self.release < other.release else 1
        return _compare_prerelease(self.prerelease, other.prerelease)

    def __eq__(self, other):
        if not isinstance(other, (Version, str)):
            return NotImplemented
        return self.compare(other) == 0

    def __lt__(self, other):
        if not isinstance(other, (Version, str)):
            return NotImplemented
        return self.compare(other) < 0

    def __hash__(self):
        return hash((self.release, self.prerelease))

    def __str__(self):
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(self.prerelease)
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    def __repr__(self):
        return f"Version({str(self)!r})"


def parse(text):
    """Shortcut for :meth:`Version.parse`."""
    return Version.parse(text)


def compare(a, b):
    """Compare two versions given as strings or :class:`Version` objects."""
    return Version.parse(a).compare(b)
