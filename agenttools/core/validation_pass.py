"""One validation pass and what every check shares: the limits, the issue collector
(``Walk``), the marker of a rejected value, and the text helpers (invisible characters,
type names, previews).

The bottom of the validator: the schema walker and the field guards both report into a
``Walk`` and neither imports the other's module for it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

MAX_NESTED_BYTES: Final = 64 * 1024
"""Cap on the serialized size of one nested object or array parameter."""
MAX_DEPTH: Final = 16
"""Cap on nesting depth inside free-form values."""
DEFAULT_MAX_ITEMS: Final = 100
"""``maxItems`` for arrays whose schema sets none."""
DEFAULT_MAX_STRING: Final = 20_000
"""``maxLength`` for strings inside free-form values and strings whose schema sets none."""
MAX_ISSUES: Final = 6
"""How many problems one error reports (enough to fix a call, short enough to read)."""

INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b\u200e\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")


class Walk:
    """One validation pass: collects problems and the guards that were tripped."""

    __slots__ = ("hints", "issues", "tool")

    def __init__(self, tool: str) -> None:
        self.tool = tool
        self.issues: list[str] = []
        self.hints: list[str] = []

    def fail(self, path: str, message: str, hint: str | None = None) -> None:
        if len(self.issues) < MAX_ISSUES:
            self.issues.append(f"{path or 'arguments'}: {message}")
        if hint is not None and hint not in self.hints:
            self.hints.append(hint)


MISSING: Final = object()


def sanitize_text(text: str) -> str:
    """Strip control and invisible formatting characters (keeping ``\\n`` and ``\\t``) and
    surrounding whitespace."""
    return INVISIBLE.sub("", text).strip()


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def preview(text: str, limit: int = 40) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "…")
