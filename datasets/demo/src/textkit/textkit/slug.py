"""URL slugs."""

import re
import unicodedata

_NON_WORD = re.compile(r"[^A-Za-z0-9]+")


def _to_ascii(text):
    """Best-effort transliteration of *text* to plain ASCII."""
    normalized = unicodedata.normalize("NFKC", text)
    return normalized.encode("ascii", "ignore").decode("ascii")


def slugify(text, separator="-", max_length=None, lowercase=True):
    """Turn *text* into a URL-friendly slug.

    Runs of characters other than ASCII letters and digits become a single
    *separator*; leading and trailing separators are removed.  If
    *max_length* is given the slug is cut to at most that many characters,
    without leaving a dangling separator.
    """
    if not isinstance(text, str):
        raise TypeError(f"slugify() expects a string, got {type(text).__name__}")
    if max_length is not None and max_length < 0:
        raise ValueError("max_length must be >= 0")
    slug = _NON_WORD.sub(separator, _to_ascii(text)).strip(separator)
    if lowercase:
        slug = slug.lower()
    if max_length is not None and len(slug) > max_length:
        slug = slug[:max_length].rstrip(separator)
    return slug
