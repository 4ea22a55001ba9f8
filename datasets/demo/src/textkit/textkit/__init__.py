"""textkit - small text helpers."""

from .case import camel_case, kebab_case, snake_case, split_words, title_case
from .slug import slugify
from .truncate import truncate, truncate_words
from .wrap import fill, wrap

__all__ = [
    "camel_case",
    "fill",
    "kebab_case",
    "slugify",
    "snake_case",
    "split_words",
    "title_case",
    "truncate",
    "truncate_words",
    "wrap",
]

__version__ = "0.1.0"
