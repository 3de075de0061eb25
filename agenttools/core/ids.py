"""UUID checks shared by the backend tools.

Two notions on purpose: :func:`is_strict_uuid` is the exact 36-character form used to
decide whether a model-supplied id beats the one from the UI context (§6 of the
reference); :func:`parse_uuid` is the lenient form accepted as tool input (hyphenated,
32 hex digits, braces, ``urn:uuid:``), always returned canonical and lower-case so it is
safe in a URL.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

__all__ = ["is_strict_uuid", "parse_uuid", "uuid_error"]

_STRICT_UUID = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)


def is_strict_uuid(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 36 and _STRICT_UUID.fullmatch(value) is not None


def parse_uuid(value: Any) -> str | None:
    """Canonical lower-case UUID, or ``None`` when ``value`` is not one."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text or len(text) > 45:
        return None
    try:
        return str(uuid.UUID(text))
    except ValueError:
        return None


def uuid_error(field: str, value: Any) -> str:
    shown = value if isinstance(value, str) else repr(value)
    if isinstance(shown, str) and len(shown) > 80:
        shown = shown[:80] + "…"
    length = len(value) if isinstance(value, str) else 0
    return (
        f"{field} must be a full 36-character UUID (e.g. 35da6628-a96b-4bc4-a90f-8fa874ae48cc), "
        f'got "{shown}" (length {length}): check the context for the correct value'
    )
