"""Table styles."""


def plain(header, body, widths, aligns):
    lines = []
    if header is not None:
        lines.append("  ".join(header).rstrip())
        lines.append("  ".join("-" * w for w in widths))
    lines.extend("  ".join(row).rstrip() for row in body)
    return lines


def grid(header, body, widths, aligns):
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(cells):
        return "| " + " | ".join(cells) + " |"

    lines = [rule]
    if header is not None:
        lines.extend([line(header), rule])
    lines.extend(line(row) for row in body)
    if body:
        lines.append(rule)
    return lines


def markdown(header, body, widths, aligns):
    marks = {"l": (":", "-"), "r": ("-", ":"), "c": (":", ":")}
    if header is None:
        header = [" " * w for w in widths]
    rule = []
    for width, align in zip(widths, aligns):
        left, right = marks[align]
        rule.append(left + "-" * max(width - 2, 1) + right)
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |"]
    lines.extend("| " + " | ".join(row) + " |" for row in body)
    return lines


STYLES = {"plain": plain, "grid": grid, "markdown": markdown}
