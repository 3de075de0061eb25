"""A tool result in one short, quoted line for the stream (``tool_call_result.summary``).

The model gets the whole result; a person watching the stream gets this line, so every
call shows what came back, not only that it ended. What a result holds is often text a
server or a document supplied (an MCP tool's output, a search hit), so the line is
treated as retrieved data: control tokens neutralised (``agenttools.core.untrusted``), one
line, at most ``MAX_SUMMARY_CHARS`` characters, inside typographic quotes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from agenttools.core.untrusted import neutralize_text

MAX_SUMMARY_CHARS: Final = 200
OPEN_QUOTE: Final = "\u201c"
CLOSE_QUOTE: Final = "\u201d"

#: Fields that say what a result is, tried in this order before the result is described.
_TEXT_FIELDS: Final = ("answer", "text", "summary", "message", "result", "content", "status")
#: Labels and advice that say nothing about the result itself.
_SKIPPED: Final = frozenset({"quoted_from", "trust", "guidance", "note", "server", "tool"})


def summarize_result(content: Any) -> str:
    """``content`` (a tool result's JSON value) as ``“…”``, at most 200 characters."""
    text = " ".join(_describe(content).split())
    inner = MAX_SUMMARY_CHARS - 2
    if len(text) > inner:
        text = text[: inner - 1].rstrip() + "\u2026"
    return OPEN_QUOTE + neutralize_text(text)[:inner] + CLOSE_QUOTE


def _describe(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Mapping):
        for key in _TEXT_FIELDS:
            value = content.get(key)
            if isinstance(value, str) and value.strip():
                return value
        parts = [f"{k}: {_scalar(v)}" for k, v in content.items() if str(k) not in _SKIPPED]
        return ", ".join(parts) or "(empty)"
    if isinstance(content, list | tuple):
        return f"{len(content)} items" + (f": {_scalar(content[0])}, …" if content else "")
    return _scalar(content)


def _scalar(value: Any) -> str:
    """A value inside a description: nested structures are counted, not spelled out."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(str(k) for k in list(value)[:4]) + (", …}" if len(value) > 4 else "}")
    if isinstance(value, list | tuple):
        return f"{len(value)} items"
    if value is None:
        return "none"
    text = str(value)
    return text if len(text) <= 80 else text[:79] + "\u2026"
