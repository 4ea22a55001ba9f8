from decimal import Decimal

import pytest

from tablefmt import format_cell, format_number, is_number


def test_is_number():
    assert is_number(3) and is_number(2.5) and is_number(Decimal("1.1"))
    assert not is_number(True)
    assert not is_number("3")


def test_format_number_without_precision():
    assert format_number(3) == "3"
    assert format_number(0.1) == "0.1"


def test_format_number_precision():
    assert format_number(1.5, 2) == "1.50"
    assert format_number(3.14159, 3) == "3.142"
    assert format_number(7, 2) == "7"


def test_format_number_negative_precision():
    with pytest.raises(ValueError):
        format_number(1.0, -1)


def test_format_cell():
    assert format_cell(None) == ""
    assert format_cell(None, missing="-") == "-"
    assert format_cell("x") == "x"
