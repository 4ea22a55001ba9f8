"""tablefmt - render rows as text tables."""

from .cells import format_cell, format_number, is_number
from .table import render
from .widths import column_widths, display_width

__all__ = ["column_widths", "display_width", "format_cell", "format_number", "is_number", "render"]

__version__ = "0.1.0"
