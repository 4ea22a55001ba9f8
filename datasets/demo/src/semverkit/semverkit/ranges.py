"""Version ranges: comparators, caret, tilde and x-ranges."""

import operator
import re

from .errors import InvalidRange
from .version import Version

_OPERATORS = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
    "=": operator.eq,
}

_PARTIAL_RE = re.compile(
    r"^v?(?P<major>\d+|[xX*])"
    r"(?:\.(?P<minor>\d+|[xX*]))?"
    r"(?:\.(?P<patch>\d+|[xX*]))?"
    r"(?:-(?P<pre>[0-9A-Za-z.-]+))?$"
)
_COMPARATOR_RE = re.compile(r"^(?P<op>>=|<=|>|<|=|\^|~)?\s*(?P<version>\S+)$")


class Comparator:
    """A single ``<op><version>`` test such as ``>=1.2.0``."""

    __slots__ = ("op", "version")

    def __init__(self, op, version):
        if op not in _OPERATORS:
            raise InvalidRange(f"unknown operator {op!r}")
        self.op = op
        self.version = Version.parse(version)

    def test(self, version):
        return _OPERATORS[self.op](Version.parse(version), self.version)

    def __str__(self):
        return f"{self.op}{self.version}"

    def __repr__(self):
        return f"Comparator({str(self)!r})"


def _parse_partial(text):
    """Split ``1.2``, ``1.x`` or ``1.2.3-rc.1`` into (major, minor, patch, pre).

    Missing or wildcard parts are returned as ``None``.
    """
    match = _PARTIAL_RE.match(text)
    if match is None:
        raise InvalidRange(f"invalid version in range: {text!r}")
    parts = []
    for name in ("major", "minor", "patch"):
        value = match.group(name)
        parts.append(None if value is None or value in "xX*" else int(value))
    # Once a part is a wildcard everything after it is a wildcard as well.
    for index in range(1, 3):
        if parts[index - 1] is None:
            parts[index] = None
    pre = match.group("pre") or ""
    if pre and parts[2] is None:
        raise InvalidRange(f"pre-release needs a full version: {text!r}")
    return parts[0], parts[1], parts[2], pre


def _expand_caret(text):
    """``^1.2.3`` allows changes that do not modify the left-most non-zero part."""
    major, minor, patch, pre = _parse_partial(text)
    if major is None:
        return []
    lower = Version(major, minor or 0, patch or 0, pre)
    if major > 0 or minor is None:
        upper = Version(major + 1, 0, 0)
    elif patch is None:
        upper = Version(0, minor + 1, 0)
    else:
        upper = Version(0, 0, patch + 1)
    return [Comparator(">=", lower), Comparator("<", upper)]


def _expand_tilde(text):
    """``~1.2.3`` allows patch-level changes; ``~1`` allows minor-level changes."""
    major, minor, patch, pre = _parse_partial(text)
    if major is None:
        return []
    lower = Version(major, minor or 0, patch or 0, pre)
    if minor is None:
        upper = Version(major + 1, 0, 0)
    else:
        upper = Version(major, minor + 1, 0)
    return [Comparator(">=", lower), Comparator("<", upper)]


def _expand_plain(op, text):
    major, minor, patch, pre = _parse_partial(text)
    if op:
        return [Comparator(op, Version(major or 0, minor or 0, patch or 0, pre))]
    if major is None:
        return []
    if minor is None:
        return [Comparator(">=", Version(major, 0, 0)), Comparator("<", Version(major + 1, 0, 0))]
    if patch is None:
        return [
            Comparator(">=", Version(major, minor, 0)),
            Comparator("<", Version(major, minor + 1, 0)),
        ]
    return [Comparator("=", Version(major, minor, patch, pre))]


def _parse_comparator(token):
    match = _COMPARATOR_RE.match(token)
    if match is None:
        raise InvalidRange(f"invalid comparator: {token!r}")
    op, text = match.group("op"), match.group("version")
    if op == "^":
        return _expand_caret(text)
    if op == "~":
        return _expand_tilde(text)
    return _expand_plain(op, text)


class Range:
    """A union (``||``) of comparator sets, e.g. ``>=1.2 <2 || ^3.1``."""

    def __init__(self, text):
        if not isinstance(text, str):
            raise TypeError(f"expected a string, got {type(text).__name__}")
        self.text = text
        self.sets = []
        for alternative in text.split("||"):
            # Allow "> = 1.2" style spacing by gluing operators to their version.
            tokens = re.sub(r"(>=|<=|>|<|=|\^|~)\s+", r"\1", alternative.strip()).split()
            comparators = []
            for token in tokens:
                comparators.extend(_parse_comparator(token))
            self.sets.append(comparators)

    def test(self, version):
        version = Version.parse(version)
        return any(_set_matches(comparators, version) for comparators in self.sets)

    def __contains__(self, version):
        return self.test(version)

    def __str__(self):
        return " || ".join(" ".join(str(c) for c in s) or "*" for s in self.sets)

    def __repr__(self):
        return f"Range({self.text!r})"


def _set_matches(comparators, version):
    if not all(comparator.test(version) for comparator in comparators):
        return False
    if not version.is_prerelease:
        return True
    # A pre-release only matches if the range explicitly mentions a pre-release
    # of the same major.minor.patch.
    return any(
        comparator.version.is_prerelease and comparator.version.release == version.release
        for comparator in comparators
    )


def _as_range(spec):
    return spec if isinstance(spec, Range) else Range(spec)


def satisfies(version, spec):
    """Return True if *version* is inside the range *spec*."""
    return _as_range(spec).test(version)


def max_satisfying(versions, spec):
    """Return the highest version of *versions* inside *spec*, or None."""
    spec = _as_range(spec)
    matching = [Version.parse(v) for v in versions if spec.test(v)]
    return max(matching) if matching else None


def min_satisfying(versions, spec):
    """Return the lowest version of *versions* inside *spec*, or None."""
    spec = _as_range(spec)
    matching = [Version.parse(v) for v in versions if spec.test(v)]
    return min(matching) if matching else None
