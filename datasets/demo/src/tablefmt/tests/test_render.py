import pytest

from tablefmt import render

ROWS = [["apple", 3, 1.5], ["kiwi", 12, 0.25]]
HEADERS = ["fruit", "qty", "price"]


def test_plain():
    assert render(ROWS, HEADERS) == (
        "fruit  qty  price\n"
        "-----  ---  -----\n"
        "apple    3    1.5\n"
        "kiwi    12   0.25"
    )


def test_grid_with_precision():
    assert render(ROWS, HEADERS, style="grid", precision=2) == (
        "+-------+-----+-------+\n"
        "| fruit | qty | price |\n"
        "+-------+-----+-------+\n"
        "| apple |   3 |  1.50 |\n"
        "| kiwi  |  12 |  0.25 |\n"
        "+-------+-----+-------+"
    )


def test_markdown():
    assert render([["a", 1]], ["name", "n"], style="markdown") == (
        "| name | n |\n"
        "| :--- | --: |\n"
        "| a    | 1 |"
    )


def test_explicit_alignment():
    assert render([["x", "y"]], ["left", "right"], align="cr", style="plain") == (
        "left  right\n"
        "----  -----\n"
        " x        y"
    )


def test_missing_values():
    assert render([["a", None]], ["k", "v"], missing="n/a") == "k  v\n-  ---\na  n/a"


def test_without_headers():
    assert render([["a", 1], ["bb", 22]]) == "a    1\nbb  22"


def test_ragged_rows_rejected():
    with pytest.raises(ValueError):
        render([["a", 1], ["b"]])


def test_unknown_style():
    with pytest.raises(ValueError):
        render(ROWS, HEADERS, style="fancy")
