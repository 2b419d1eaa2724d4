"""`{{name}}` placeholders: global variables substituted into a job's text fields."""

from __future__ import annotations

import re
from collections.abc import Mapping

# Whitespace inside the braces is tolerated: `{{name}}` and `{{ name }}` are the same.
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z0-9_]+)\s*\}\}")


def substitute(text: str, variables: Mapping[str, str]) -> str:
    """Replace every `{{name}}` whose name is in `variables` with its value.

    A reference to an unknown name stays in the text as written. Substitution is one pass:
    a value that itself contains `{{other}}` is inserted literally, never expanded again.
    """

    def value(match: re.Match[str]) -> str:
        return variables.get(match.group(1), match.group(0))

    return PLACEHOLDER.sub(value, text)


def references(text: str) -> set[str]:
    """Return the variable names `text` refers to, known or not."""
    return {match.group(1) for match in PLACEHOLDER.finditer(text)}
