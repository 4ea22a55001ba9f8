"""Turning cell values into strings."""

from decimal import Decimal


def is_number(value):
    return isinstance(value, (int, float, Decimal)) and not isinstance(value, bool)


def format_number(value, precision=None):
    """Format a number; with *precision*, use that many decimals, rounding half up."""
    if precision is None or isinstance(value, int):
        return str(value)
    if precision < 0:
        raise ValueError("precision must be >= 0")
    quantum = Decimal(1).scaleb(-precision)
    return str(Decimal(str(value)).quantize(quantum))


def format_cell(value, precision=None, missing=""):
    if value is None:
        return missing
    if is_number(value):
        return format_number(value, precision)
    return str(value)
