"""Greedy word wrapping."""


def _chunks(word, width):
    return [word[i : i + width] for i in range(0, len(word), width)]


def wrap(text, width=70, break_long_words=True):
    """Wrap *text* into lines of at most *width* characters.

    Whitespace between words is collapsed.  Words longer than *width* are
    split across lines unless *break_long_words* is false, in which case
    they are put on a line of their own.
    """
    if width <= 0:
        raise ValueError("width must be > 0")
    lines = []
    current = ""
    for word in text.split():
        pieces = _chunks(word, width) if break_long_words and len(word) > width else [word]
        for piece in pieces:
            if not current:
                current = piece
            elif len(current) + 1 + len(piece) <= width:
                current += " " + piece
            else:
                lines.append(current)
                current = piece
    if current:
        lines.append(current)
    return lines


def fill(text, width=70, **kwargs):
    """Like :func:`wrap` but returns a single string with newlines."""
    return "\n".join(wrap(text, width, **kwargs))
