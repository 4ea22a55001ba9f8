from tablefmt import column_widths, display_width


def test_display_width_ascii():
    assert display_width("hello") == 5


def test_display_width_wide_and_combining():
    assert display_width("日本") == 4
    assert display_width("e\u0301") == 1


def test_column_widths_uses_widest_cell():
    assert column_widths([["a", "bbb"], ["cc", "d"]]) == [2, 3]


def test_column_widths_header_wider_than_cells():
    assert column_widths([["1", "2"]], ["first", "x"]) == [5, 1]
