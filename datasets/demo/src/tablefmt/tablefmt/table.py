"""The :func:`render` entry point."""

from .align import pad
from .cells import format_cell, is_number
from .styles import STYLES
from .widths import column_widths


def _default_aligns(rows, count):
    aligns = []
    for index in range(count):
        values = [row[index] for row in rows if row[index] is not None]
        aligns.append("r" if values and all(is_number(v) for v in values) else "l")
    return aligns


def render(rows, headers=None, style="plain", align=None, precision=None, missing=""):
    """Render *rows* (a sequence of sequences) as a table and return it as a string."""
    if style not in STYLES:
        raise ValueError(f"unknown style {style!r}; expected one of {sorted(STYLES)}")
    rows = [list(row) for row in rows]
    count = len(headers) if headers else (len(rows[0]) if rows else 0)
    for number, row in enumerate(rows, start=1):
        if len(row) != count:
            raise ValueError(f"row {number} has {len(row)} cells, expected {count}")
    aligns = list(align) if align else _default_aligns(rows, count)
    if len(aligns) != count:
        raise ValueError(f"align has {len(aligns)} entries, expected {count}")

    text_rows = [[format_cell(v, precision, missing) for v in row] for row in rows]
    text_headers = [str(h) for h in headers] if headers else None
    widths = column_widths(text_rows, text_headers)

    body = [[pad(cell, w, a) for cell, w, a in zip(row, widths, aligns)] for row in text_rows]
    header = None
    if text_headers is not None:
        header = [pad(h, w, a) for h, w, a in zip(text_headers, widths, aligns)]
    return "\n".join(STYLES[style](header, body, widths, aligns))
