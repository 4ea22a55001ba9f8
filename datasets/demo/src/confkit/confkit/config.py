"""The :class:`Config` object."""

from .errors import ConfigError, MissingOptionError
from .interpolation import interpolate
from .parser import DEFAULT_SECTION, parse_string

_TRUE = {"1", "yes", "true", "on"}
_FALSE = {"0", "no", "false", "off"}


def _to_bool(value):
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(f"not a boolean: {value!r}")


class Config:
    """Parsed configuration.  Values of ``DEFAULT`` are inherited by every section."""

    def __init__(self, sections=None):
        self._sections = {DEFAULT_SECTION: {}}
        for name, options in (sections or {}).items():
            self._sections.setdefault(name, {}).update(options)

    @property
    def defaults(self):
        return dict(self._sections[DEFAULT_SECTION])

    def sections(self):
        """Section names in file order, without ``DEFAULT``."""
        return [name for name in self._sections if name != DEFAULT_SECTION]

    def has_section(self, section):
        return section in self._sections and section != DEFAULT_SECTION

    def has_option(self, section, key):
        return self.get_raw(section, key.lower()) is not None

    def get_raw(self, section, key):
        """The value before interpolation, or None."""
        options = self._sections.get(section)
        if options is None:
            return None
        if key in options:
            return options[key]
        return self._sections[DEFAULT_SECTION].get(key)

    def get(self, section, key, fallback=None, raw=False):
        """Return the value of *key* in *section*.

        If the option is missing, *fallback* is returned when given, else
        :class:`MissingOptionError` is raised.
        """
        value = self.get_raw(section, key.lower())
        if value is None:
            if fallback:
                return fallback
            raise MissingOptionError(section, key)
        return value if raw else interpolate(self, section, value)

    def getint(self, section, key, fallback=None):
        return int(self.get(section, key, fallback))

    def getfloat(self, section, key, fallback=None):
        return float(self.get(section, key, fallback))

    def getboolean(self, section, key, fallback=None):
        return _to_bool(self.get(section, key, fallback))

    def getlist(self, section, key, fallback=None, separator=","):
        value = self.get(section, key, fallback)
        if isinstance(value, list):
            return value
        return [item.strip() for item in value.replace("\n", separator).split(separator) if item.strip()]

    def items(self, section):
        """``(key, value)`` pairs of *section*, defaults included, interpolated."""
        if section not in self._sections:
            raise ConfigError(f"no section {section!r}")
        keys = dict.fromkeys(list(self._sections[DEFAULT_SECTION]) + list(self._sections[section]))
        return [(key, self.get(section, key)) for key in keys]

    def set(self, section, key, value):
        if section not in self._sections:
            raise ConfigError(f"no section {section!r}")
        self._sections[section][key.lower()] = str(value)

    def add_section(self, section):
        if section in self._sections:
            raise ConfigError(f"section {section!r} already exists")
        self._sections[section] = {}

    def to_dict(self):
        return {name: dict(self.items(name)) for name in self.sections()}


def loads(text):
    """Parse configuration text."""
    return Config(parse_string(text))


def load(path, encoding="utf-8"):
    """Read and parse the file at *path*."""
    with open(path, encoding=encoding) as handle:
        return loads(handle.read())
