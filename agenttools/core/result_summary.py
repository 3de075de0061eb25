"""A tool result in one short line a person can read (``tool_call_result.summary``).

The model gets the whole result; a person watching the stream gets this line, so every
call shows what came back, not only that it ended: ``8 passages from 3 documents:
“Durable runs”, “Troubleshooting”, …``, ``table “Invoices” previewed: 5 columns``,
``“Echo: hi”`` for a server's text. Results with an obvious one-line meaning (the
knowledge searches, a web answer, keywords indexed, tools found, previews, table edits,
the workflow lookups) are described by their shape (``agenttools.core.result_shapes``),
whichever tool returned them, so an MCP tool returning passages reads the same; any
other result gets the readable fallback here: its name or title, then counts and the
first few names of its lists, its short values — never a key dump, and no ids or
hashes, which tell a person nothing.

What a result holds is often text a server or a document supplied, so every piece of
it in the line is treated as retrieved data: control tokens neutralised
(``agenttools.core.untrusted``), inside typographic quotes, cut short; the words around
them are ours. A key is the server's choice too: it reads as words only when it is
shaped like a field name (``result_words.label``), otherwise it is quoted. The line is
streamed and stored, so a credential in the result is masked first by the rule the
conversation's stored arguments follow (``log_redaction.redact_secrets``: values under
secret-looking keys, ``Bearer`` tokens), shown as ``password ***``. The line is derived
from the same result the caller gets, so it shows nothing the caller could not read.
One line, at most ``MAX_SUMMARY_CHARS`` characters.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from agenttools.core.log_redaction import MASK, is_secret_key, redact_secrets
from agenttools.core.result_shapes import describe_shape
from agenttools.core.result_words import (
    QUOTED_CHARS,
    is_field_name,
    is_id_key,
    is_id_like,
    label,
    names_of,
    quote,
)
from agenttools.core.untrusted import neutralize_text

MAX_SUMMARY_CHARS: Final = 160
#: A quoted name cut to fewer characters than this is left out of a cut line.
_SHORTEST_QUOTED: Final = 4
OPEN_QUOTE: Final = "\u201c"
CLOSE_QUOTE: Final = "\u201d"

#: Fields whose text says what a result is, tried in this order.
_TEXT_FIELDS: Final = ("answer", "text", "summary", "message", "result", "content")
#: Fields that name the thing a result is about.
_NAME_FIELDS: Final = ("title", "name", "label")
#: Labels and advice that say nothing about the result itself.
_SKIPPED: Final = frozenset(
    {
        "quoted_from",
        "trust",
        "guidance",
        "note",
        "server",
        "tool",
        "next_step",
        "cite_with",
        "sufficient_hint",
        "description",
        "created_at",
        "updated_at",
        "created_date",
        "updated_date",
    }
)
_MAX_PARTS: Final = 4
#: Counts that repeat a list's length.
_COUNTS: Final = frozenset({"total", "count", "showing"})


def summarize_result(content: Any) -> str:
    """``content`` (a tool result's JSON value) in one line of at most 160 characters."""
    content = redact_secrets(content)
    text = " ".join((describe_shape(content) or _describe(content)).split())
    if len(text) > MAX_SUMMARY_CHARS:
        text = _cut(text, MAX_SUMMARY_CHARS)
    return neutralize_text(text)[:MAX_SUMMARY_CHARS]


def _cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with "…", its quotes kept balanced; a quote
    cut before a word of it shows is left out (``“Troubleshooting”, …``, not ``“…”``)."""
    cut = text[: limit - 2].rstrip()
    if cut.count(OPEN_QUOTE) > cut.count(CLOSE_QUOTE):
        opened = cut.rfind(OPEN_QUOTE)
        if len(cut[opened + 1 : limit - 3].strip()) < _SHORTEST_QUOTED:
            return cut[:opened].rstrip() + " \u2026"
        return cut[: limit - 3].rstrip() + "\u2026" + CLOSE_QUOTE
    return cut + "\u2026"


def _describe(content: Any) -> str:
    """The readable fallback: what a result is, from its names, counts and short values."""
    if isinstance(content, str):
        return quote(content, QUOTED_CHARS * 3) if content.strip() else "(empty text)"
    if isinstance(content, list | tuple):
        return _list_part("items", content) or "nothing"
    if isinstance(content, Mapping):
        return _describe_mapping(content)
    if isinstance(content, bool):
        return "yes" if content else "no"
    if content is None:
        return "nothing"
    return quote(str(content))


def _describe_mapping(content: Mapping[str, Any]) -> str:
    for key in _TEXT_FIELDS:
        value = content.get(key)
        if isinstance(value, str) and value.strip() and not is_id_like(value):
            head = _name(content)
            text = quote(value, QUOTED_CHARS * 3)
            return f"{head}: {text}" if head and key != "answer" else text
    parts: list[str] = []
    lengths = {len(v) for v in content.values() if isinstance(v, list | tuple)}
    head = _name(content)
    if head:
        parts.append(head)
    for key, value in content.items():
        if len(parts) >= _MAX_PARTS:
            break
        name = str(key)
        if name in _SKIPPED or is_id_key(name) or name in _NAME_FIELDS:
            continue
        if name in _COUNTS and value in lengths:  # "total 6" beside a list of 6 says it twice
            continue
        part = _part(name, value)
        if part:
            parts.append(part)
    if not parts:
        status = content.get("status")
        return label(status) if isinstance(status, str) and status else "nothing returned"
    return ", ".join(parts)


def _name(content: Mapping[str, Any]) -> str:
    for key in _NAME_FIELDS:
        value = content.get(key)
        if isinstance(value, str) and value.strip() and not is_id_like(value):
            return quote(value)
    return ""


def _part(key: str, value: Any) -> str:
    """One field as words: ``5 columns: “id”, “name”, …``, ``total 6``, ``valid``; a key
    not shaped like a field name quoted (``“Call us now”: yes``), a secret masked."""
    head = label(key)
    named = is_field_name(key)
    if is_secret_key(key):
        return f"{head} {MASK}"
    if isinstance(value, list | tuple):
        return _list_part(key, value)
    if isinstance(value, bool):
        if named:
            return head if value else f"not {head}"
        return f"{head}: {'yes' if value else 'no'}"
    if isinstance(value, int | float):
        return f"{head} {value:g}" if isinstance(value, float) else f"{head} {value}"
    if isinstance(value, str):
        if not value.strip() or is_id_like(value):
            return ""
        return f"{head} {quote(value)}" if named else f"{head}: {quote(value)}"
    if isinstance(value, Mapping):
        inner = _name(value)
        if inner:
            return f"{head} {inner}" if named else f"{head}: {inner}"
        if value and all(isinstance(v, str | int | float | bool) for v in value.values()):
            fields = [p for p in (_part(str(k), v) for k, v in list(value.items())[:3]) if p]
            return f"{head}: {', '.join(fields)}" if fields else ""
        return _list_part(key, [str(k) for k in value]) if value else ""
    return ""


def _list_part(key: str, items: list[Any] | tuple[Any, ...]) -> str:
    """``5 columns: “a”, “b”, …``; under a key that is not a field name, ``“key”: 5 items``."""
    if not is_field_name(key):
        inner = _list_part("items", items) if items else "none"
        return f"{quote(key)}: {inner}"
    noun = _plural(label(key), len(items))
    if not items:
        return f"no {label(key)}"
    names = names_of(items)
    return f"{len(items)} {noun}: {names}" if names else f"{len(items)} {noun}"


_PLURAL_S: Final = re.compile(r"(?<!s)s$")


def _plural(noun: str, n: int) -> str:
    """``"columns"`` for many, ``"column"`` for one (an English plural in ``s`` only)."""
    return _PLURAL_S.sub("", noun) if n == 1 else noun
