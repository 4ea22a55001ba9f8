"""confkit - read INI-style configuration files."""

from .config import Config, load, loads
from .errors import ConfigError, InterpolationError, MissingOptionError, ParseError

__all__ = [
    "Config",
    "ConfigError",
    "InterpolationError",
    "MissingOptionError",
    "ParseError",
    "load",
    "loads",
]

__version__ = "0.1.0"
