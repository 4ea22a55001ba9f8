"""Padding cells to a width."""

from .widths import display_width


def pad(text, width, align="l"):
    """Pad *text* with spaces to *width* display columns."""
    gap = width - display_width(text)
    if gap <= 0:
        return text
    if align == "r":
        return " " * gap + text
    if align == "c":
        left = gap // 2
        return " " * left + text + " " * (gap - left)
    if align == "l":
        return text + " " * gap
    raise ValueError(f"unknown alignment {align!r}")
