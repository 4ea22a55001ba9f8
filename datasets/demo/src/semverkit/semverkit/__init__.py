"""semverkit - parse, compare and match semantic versions."""

from .errors import InvalidRange, InvalidVersion, SemverError
from .ranges import Comparator, Range, max_satisfying, min_satisfying, satisfies
from .version import Version, compare, parse

__all__ = [
    "Comparator",
    "InvalidRange",
    "InvalidVersion",
    "Range",
    "SemverError",
    "Version",
    "compare",
    "max_satisfying",
    "min_satisfying",
    "parse",
    "satisfies",
]

__version__ = "0.1.0"
