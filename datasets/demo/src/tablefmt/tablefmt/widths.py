"""Measuring columns."""

import unicodedata


def display_width(text):
    """Width of *text* in a terminal: East Asian wide characters count twice."""
    width = 0
    for char in text:
        if unicodedata.combining(char):
            continue
        width += 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
    return width


def column_widths(rows, headers=None):
    """Width of each column: the widest of its cells and its header.

    *rows* is a list of lists of strings, all of the same length.
    """
    count = len(headers) if headers else (len(rows[0]) if rows else 0)
    widths = []
    for index in range(count):
        widest = max(display_width(row[index]) for row in rows)
        if headers:
            widest = max(widest, display_width(headers[index]))
        widths.append(widest)
    return widths
