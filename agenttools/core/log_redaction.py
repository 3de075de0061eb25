"""What of a tool call goes into the tool-call log (seed 001: "parameters and results
sanitized to remove sensitive data before storage").

The log keeps a call's arguments and result for debugging; it must not become a second
copy of credentials or of text that breaks whoever reads it. ``redact_for_log`` applies
the same rules to both, at any depth:

* values under secret-looking keys (``password``, ``token``, ``authorization``,
  ``api_key``, …) become ``"***"``;
* ``Bearer …`` credentials inside any string become ``Bearer ***``;
* control and invisible formatting characters are stripped (the validator's
  ``sanitize_text``), so a logged result prints as what it says;
* strings, lists and objects are cut (``MAX_STRING_CHARS``, ``MAX_ITEMS``, ``MAX_DEPTH``).

``log_text`` then renders the redacted value as the stored text, cut to the column's cap.

``redact_secrets`` applies the first two rules only (nothing cut or stripped): for a
copy that must stay whole, such as the tool calls kept in a conversation's history.
"""

from __future__ import annotations

import re
from typing import Any, Final

import orjson

from agenttools.core.validation_pass import sanitize_text

SECRET_KEY_PARTS: Final = (
    "password",
    "passwd",
    "token",
    "secret",
    "authorization",
    "api_key",
    "apikey",
    "cookie",
    "private_key",
    "credential",
)
MASK: Final = "***"
MAX_STRING_CHARS: Final = 2000
MAX_ITEMS: Final = 100
MAX_DEPTH: Final = 6

_BEARER = re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]+")


def is_secret_key(key: object) -> bool:
    lowered = str(key).lower().replace("-", "_")
    return any(part in lowered for part in SECRET_KEY_PARTS)


def redact_text(text: str) -> str:
    clean = _BEARER.sub(rf"\1 {MASK}", sanitize_text(text))
    return clean if len(clean) <= MAX_STRING_CHARS else clean[:MAX_STRING_CHARS] + "…"


def redact_for_log(value: Any, depth: int = 0) -> Any:
    """A copy of ``value`` fit for the log (see the module docstring)."""
    if depth > MAX_DEPTH:
        return "…"
    if isinstance(value, dict):
        return {
            str(k): (MASK if is_secret_key(k) else redact_for_log(v, depth + 1))
            for k, v in list(value.items())[:MAX_ITEMS]
        }
    if isinstance(value, list | tuple):
        return [redact_for_log(v, depth + 1) for v in list(value)[:MAX_ITEMS]]
    if isinstance(value, str):
        return redact_text(value)
    if value is None or isinstance(value, bool | int | float):
        return value
    return redact_text(str(value))


def redact_secrets(value: Any, depth: int = 0) -> Any:
    """A copy of ``value`` with the log's credential rules applied (secret-looking keys
    masked, ``Bearer`` credentials masked) and nothing else changed."""
    if depth > 50:
        return value
    if isinstance(value, dict):
        return {k: (MASK if is_secret_key(k) else redact_secrets(v, depth + 1)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_secrets(v, depth + 1) for v in value]
    if isinstance(value, str):
        return _BEARER.sub(rf"\1 {MASK}", value)
    return value


def log_text(value: Any, limit: int) -> str:
    """``value`` redacted and rendered as the log's text, at most ``limit`` characters
    (a JSON string is parsed first, so the keys inside it are redacted too)."""
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            return _redact_long(value)[:limit]
    redacted = redact_for_log(value)
    text = redacted if isinstance(redacted, str) else orjson.dumps(redacted, default=str).decode()
    return text[:limit]


def _redact_long(text: str) -> str:
    """A long plain text: redacted whole, not cut to ``MAX_STRING_CHARS`` (the caller cuts)."""
    return _BEARER.sub(rf"\1 {MASK}", sanitize_text(text))


__all__ = ["MASK", "is_secret_key", "log_text", "redact_for_log", "redact_secrets", "redact_text"]
