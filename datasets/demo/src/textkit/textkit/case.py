"""Case conversion."""

import re

_WORD_RE = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


def split_words(text):
    """Split identifiers like ``HTTPServerError`` or ``user_id-2`` into words."""
    return _WORD_RE.findall(text)


def snake_case(text):
    return "_".join(word.lower() for word in split_words(text))


def kebab_case(text):
    return "-".join(word.lower() for word in split_words(text))


def camel_case(text):
    words = split_words(text)
    if not words:
        return ""
    return words[0].lower() + "".join(word.capitalize() for word in words[1:])


def title_case(text, small_words=("a", "an", "and", "of", "the", "in", "on", "to")):
    """Capitalise each word except *small_words* (the first word is always capitalised)."""
    words = text.split()
    result = []
    for index, word in enumerate(words):
        if index and word.lower() in small_words:
            result.append(word.lower())
        else:
            result.append(word[:1].upper() + word[1:].lower())
    return " ".join(result)
