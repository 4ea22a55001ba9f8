"""Turning INI text into ``{section: {key: value}}`` dictionaries."""

from .errors import ParseError

DEFAULT_SECTION = "DEFAULT"
COMMENT_PREFIXES = ("#", ";")


def _split_option(line):
    """Split ``key = value`` or ``key: value`` at the first separator."""
    positions = [line.find(sep) for sep in "=:" if sep in line]
    if not positions:
        return None
    sep = line[min(positions)]
    key, value = line.split(sep)
    return key.strip().lower(), value.strip()


def parse_lines(lines):
    """Parse an iterable of lines.

    Returns an ordered dict of sections, each an ordered dict of options.
    Indented lines continue the value of the previous option.
    """
    sections = {DEFAULT_SECTION: {}}
    current = sections[DEFAULT_SECTION]
    last_key = None
    for lineno, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n")
        stripped = line.strip()
        if not stripped or stripped.startswith(COMMENT_PREFIXES):
            continue
        if line[:1].isspace() and last_key is not None:
            current[last_key] += "\n" + stripped
            continue
        if stripped.startswith("["):
            if not stripped.endswith("]"):
                raise ParseError("unterminated section header", lineno, line)
            name = stripped[1:-1].strip()
            if not name:
                raise ParseError("empty section name", lineno, line)
            current = sections.setdefault(name, {})
            last_key = None
            continue
        option = _split_option(stripped)
        if option is None:
            raise ParseError("expected 'key = value'", lineno, line)
        key, value = option
        if not key:
            raise ParseError("empty key", lineno, line)
        current[key] = value
        last_key = key
    return sections


def parse_string(text):
    return parse_lines(text.splitlines())
