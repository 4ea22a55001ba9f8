"""Exceptions raised by semverkit."""


class SemverError(ValueError):
    """Base class for every error raised by semverkit."""


class InvalidVersion(SemverError):
    """A string is not a valid semantic version."""


class InvalidRange(SemverError):
    """A string is not a valid version range."""
