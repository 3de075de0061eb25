"""Parse a Server-Sent Events stream exactly as a browser's EventSource would."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson


@dataclass(slots=True)
class SSEEvent:
    event: str = "message"
    data: str = ""
    id: str | None = None
    retry: int | None = None
    comments: list[str] = field(default_factory=list)

    def json(self) -> Any:
        return orjson.loads(self.data) if self.data else None


async def iter_sse(lines: AsyncIterator[str]) -> AsyncIterator[SSEEvent]:
    """Yield events from an async iterator of text lines (``httpx.Response.aiter_lines``).

    Follows the WHATWG rules: ``field: value`` (one optional space stripped), ``data``
    lines joined with ``\n``, a blank line dispatches, an event with no data is dropped,
    comment lines (``:``) are collected on the next event for tests that look for pings.
    """
    cur = SSEEvent()
    data_lines: list[str] = []
    has_data = False
    async for raw in lines:
        line = raw.rstrip("\r")
        if line == "":
            if has_data:
                cur.data = "\n".join(data_lines)
                yield cur
            pending_comments = [] if has_data else cur.comments
            last_id = cur.id
            cur = SSEEvent(comments=pending_comments)
            cur.id = None if has_data else last_id
            data_lines, has_data = [], False
            continue
        if line.startswith(":"):
            cur.comments.append(line[1:].lstrip())
            continue
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            cur.event = value
        elif name == "data":
            data_lines.append(value)
            has_data = True
        elif name == "id":
            cur.id = value
        elif name == "retry" and value.isdigit():
            cur.retry = int(value)
