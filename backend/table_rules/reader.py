"""Reading a table configuration that may be malformed anywhere: the report
(``TableConfigError`` / ``TableConfigWarning``) and ``ConfigReader``, whose typed reads
turn a value of the wrong type into an ``INVALID_TYPE`` error on that field and carry on.

Apart from the Appendix B rules (``validation``) because these reads are
how every rule looks at the config, and the rules read better without them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

IDENTIFIER_PATH = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*(\.[a-zA-Z_][a-zA-Z0-9_]*)*$")


@dataclass(frozen=True, slots=True)
class TableConfigError:
    field: str
    message: str
    code: str

    def as_dict(self) -> dict[str, str]:
        return {"field": self.field, "message": self.message, "code": self.code}


@dataclass(frozen=True, slots=True)
class TableConfigWarning:
    field: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"field": self.field, "message": self.message}


@dataclass(slots=True)
class TableConfigReport:
    errors: list[TableConfigError] = field(default_factory=list)
    warnings: list[TableConfigWarning] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.errors


class ConfigReader:
    """Collects errors and warnings into ``report`` while reading fields by type."""

    def __init__(self) -> None:
        self.report = TableConfigReport()

    # -- recording -------------------------------------------------------------------

    def error(self, where: str, message: str, code: str) -> None:
        self.report.errors.append(TableConfigError(where, message, code))

    def warn(self, where: str, message: str) -> None:
        self.report.warnings.append(TableConfigWarning(where, message))

    # -- typed access ---------------------------------------------------------------------

    def obj(self, parent: dict[str, Any], key: str, where: str) -> dict[str, Any] | None:
        value = parent.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            self.error(where, "must be an object", "INVALID_TYPE")
            return None
        return value

    def arr(self, parent: dict[str, Any], key: str, where: str) -> list[Any]:
        value = parent.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            self.error(where, "must be an array", "INVALID_TYPE")
            return []
        return value

    def text(self, parent: dict[str, Any], key: str, where: str) -> str:
        value = parent.get(key)
        if value is None:
            return ""
        if not isinstance(value, str):
            self.error(where, "must be a string", "INVALID_TYPE")
            return ""
        return value

    def number(self, parent: dict[str, Any], key: str, where: str, *, integer: bool = True) -> float | None:
        value = parent.get(key)
        if value is None:
            return None
        ok = isinstance(value, int) if integer else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok:
            self.error(where, "must be an integer" if integer else "must be a number", "INVALID_TYPE")
            return None
        return float(value) if isinstance(value, float) else int(value)

    def flag(self, parent: dict[str, Any], key: str, where: str) -> bool:
        value = parent.get(key)
        if value is None:
            return False
        if not isinstance(value, bool):
            self.error(where, "must be a boolean", "INVALID_TYPE")
            return False
        return value

    def non_negative(self, parent: dict[str, Any], key: str, where: str) -> None:
        value = self.number(parent, key, where)
        if value is not None and value < 0:
            self.error(where, f"{key} must be >= 0", "INVALID_VALUE")

    def one_of(self, value: str, allowed: Iterable[str], where: str, what: str) -> None:
        allowed = tuple(allowed)
        if value and value not in allowed:
            self.error(where, f"invalid {what} {value!r}; must be one of {', '.join(allowed)}", "INVALID_VALUE")

    def required(self, parent: dict[str, Any], key: str, where: str) -> str:
        """A string that must be there and not empty; ``null`` counts as missing (Go
        decodes it to ``""``), a value of another type is ``INVALID_TYPE`` only."""
        value = self.text(parent, key, where)
        raw = parent.get(key)
        if not value and (raw is None or isinstance(raw, str)):
            self.error(where, f"{key} is required", "REQUIRED")
        return value

    def identifier(self, value: str, where: str) -> None:
        if value and not IDENTIFIER_PATH.fullmatch(value):
            self.error(where, f"{value!r} is not a valid column reference", "INVALID_FORMAT")

    def items(self, values: list[Any], where: str) -> Iterable[tuple[str, dict[str, Any]]]:
        for i, value in enumerate(values):
            path = f"{where}[{i}]"
            if isinstance(value, dict):
                yield path, value
            else:
                self.error(path, "must be an object", "INVALID_TYPE")
