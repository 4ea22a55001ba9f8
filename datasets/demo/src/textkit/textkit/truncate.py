"""Shortening text."""


def truncate(text, width, suffix="..."):
    """Shorten *text* to at most *width* characters.

    If the text has to be cut, *suffix* is appended and counts towards
    *width*.  Text that already fits is returned unchanged.
    """
    if width < 0:
        raise ValueError("width must be >= 0")
    if len(text) < width:
        return text
    if width <= len(suffix):
        return suffix[:width]
    return text[: width - len(suffix)] + suffix


def truncate_words(text, count, suffix="..."):
    """Keep the first *count* words of *text*, appending *suffix* if any were dropped."""
    if count < 0:
        raise ValueError("count must be >= 0")
    words = text.split()
    if len(words) <= count:
        return " ".join(words)
    return " ".join(words[:count]) + suffix
