"""Exceptions raised by confkit."""


class ConfigError(Exception):
    """Base class for confkit errors."""


class ParseError(ConfigError):
    def __init__(self, message, lineno, line):
        super().__init__(f"line {lineno}: {message}: {line!r}")
        self.lineno = lineno
        self.line = line


class MissingOptionError(ConfigError, KeyError):
    def __init__(self, section, key):
        super().__init__(f"no option {key!r} in section {section!r}")
        self.section = section
        self.key = key

    def __str__(self):
        return self.args[0]


class InterpolationError(ConfigError):
    """A ``${...}`` reference could not be resolved."""
