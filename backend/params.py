"""Query-string and path-parameter checks shared by the routes.

Every integer a client sends is range-checked here before it reaches SQLite, whose
integers are signed 64-bit (a larger one is an ``OverflowError``, i.e. a 500).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from backend.responses import invalid_argument

DEFAULT_ROWS = 10
MAX_ROWS = 1000
# (page - 1) * rows stays far inside SQLite's 64-bit OFFSET, and inside a Go int32.
MAX_PAGE = 2**31 - 1
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
# ASCII digits only: Python's int() also takes "1_000", " 7 ", "+7" and non-ASCII digits.
_INTEGER = re.compile(r"-?[0-9]{1,19}")


@dataclass(frozen=True, slots=True)
class Page:
    page: int
    rows: int

    @property
    def offset(self) -> int:
        return (self.page - 1) * self.rows

    def envelope(self, items: list[Any], total: int) -> dict[str, Any]:
        return {"items": items, "total": total, "page": self.page, "rows_per_page": self.rows}


def bounded_int(raw: str, name: str, low: int, high: int) -> int:
    """``raw`` as an integer in ``[low, high]`` (``-?[0-9]+``), else a 400 naming ``name``."""
    if not _INTEGER.fullmatch(raw):
        shown = raw if len(raw) <= 40 else raw[:40] + "…"
        raise invalid_argument(f"{name}: must be an integer between {low} and {high}, got {shown!r}")
    value = int(raw)
    if not low <= value <= high:
        raise invalid_argument(f"{name}: must be between {low} and {high}, got {value}")
    return value


def _int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    return bounded_int(raw, name, low, high)


def parse_page(request: Request) -> Page:
    """``page`` 1–2³¹-1 (default 1), ``rows`` 1–1000 (default 10); anything else is a 400."""
    return Page(
        page=_int_param(request, "page", 1, 1, MAX_PAGE),
        rows=_int_param(request, "rows", DEFAULT_ROWS, 1, MAX_ROWS),
    )


def parse_csv_enum(request: Request, name: str, allowed: Collection[str]) -> list[str]:
    """A comma list whose every item is in ``allowed``; empty items are ignored."""
    raw = request.query_params.get(name)
    if not raw:
        return []
    values = [v.strip() for v in raw.split(",") if v.strip()]
    bad = [v for v in values if v not in allowed]
    if bad:
        raise invalid_argument(
            f"{name}: invalid value(s) {', '.join(repr(b) for b in bad)}; allowed: {', '.join(sorted(allowed))}"
        )
    return values


def canonical_uuid(value: str) -> str | None:
    """The lower-case hyphenated form of a UUID, or None when ``value`` is not one."""
    if len(value) != 36:
        return None
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return None


def path_uuid(request: Request, name: str, what: str) -> str:
    """A UUID path parameter: malformed is a 400 (as in Ichor), unknown is the caller's 404."""
    raw = str(request.path_params[name])
    value = canonical_uuid(raw)
    if value is None:
        raise invalid_argument(f"{what} id must be a UUID, got {raw!r}")
    return value


def query_uuid(request: Request, name: str) -> str | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    value = canonical_uuid(raw)
    if value is None:
        raise invalid_argument(f"{name}: must be a UUID, got {raw!r}")
    return value


def sql_identifier(request: Request, name: str) -> str:
    """A schema/table path segment: a plain SQL identifier (no ``/``, ``..``, ``?``, ``#``)."""
    raw = str(request.path_params[name])
    if not _IDENTIFIER.fullmatch(raw):
        raise invalid_argument(f"{name}: must be a plain SQL identifier, got {raw!r}")
    return raw
