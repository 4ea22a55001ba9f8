"""``${key}`` and ``${section:key}`` references inside values."""

import re

from .errors import InterpolationError

_REFERENCE = re.compile(r"\$\{([^}:]+)(?::([^}]+))?\}")
MAX_DEPTH = 10


def interpolate(config, section, value, depth=0):
    """Expand references in *value*, which was read from *section*.

    ``$$`` is a literal dollar sign.
    """
    if depth > MAX_DEPTH:
        raise InterpolationError(f"interpolation too deep in section {section!r}: {value!r}")

    def replace(match):
        if match.group(2) is None:
            ref_section, ref_key = section, match.group(1)
        else:
            ref_section, ref_key = match.group(1), match.group(2)
        raw = config.get_raw(ref_section, ref_key.strip().lower())
        if raw is None:
            raise InterpolationError(f"bad reference {match.group(0)!r} in section {section!r}")
        return interpolate(config, ref_section, raw, depth + 1)

    parts = value.split("$$")
    return "$".join(_REFERENCE.sub(replace, part) for part in parts)
