"""Seed 001's tool-call log, written in the background (never blocks the stream), on either engine."""

from __future__ import annotations

from typing import Any

import orjson

from storage.records import ToolCallRecord
from storage.sql import SqlEngine

_INSERT = (
    "INSERT INTO tool_calls(run_id, conversation_id, user_id, tool_use_id, tool_name, parameters, "
    "result, status, error, duration_ms, retry_count) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_SECRET_KEYS = ("password", "token", "secret", "authorization", "api_key", "apikey")


class SqlToolCallLog:
    def __init__(self, sql: SqlEngine) -> None:
        self.db = sql

    def record(self, entry: ToolCallRecord) -> None:
        self.db.enqueue(
            [
                (
                    _INSERT,
                    (
                        entry.run_id,
                        entry.conversation_id,
                        entry.user_id,
                        entry.tool_use_id,
                        entry.tool_name,
                        orjson.dumps(sanitise(entry.arguments)),
                        self.db.dialect.text(entry.result),
                        entry.status,
                        self.db.dialect.text(entry.error),
                        entry.duration_ms,
                        entry.retry_count,
                    ),
                )
            ]
        )

    async def for_run(self, run_id: str) -> list[dict[str, Any]]:
        rows = await self.db.fetchall(
            "SELECT tool_use_id, tool_name, status, retry_count, duration_ms "
            "FROM tool_calls WHERE run_id = ? ORDER BY id",
            (run_id,),
        )
        keys = ("tool_use_id", "tool_name", "status", "retry_count", "duration_ms")
        return [dict(zip(keys, r, strict=True)) for r in rows]


def sanitise(value: Any, depth: int = 0) -> Any:
    """Mask secret-looking keys and cut long strings before they are logged."""
    if depth > 6:
        return "…"
    if isinstance(value, dict):
        return {
            k: ("***" if any(s in str(k).lower() for s in _SECRET_KEYS) else sanitise(v, depth + 1))
            for k, v in list(value.items())[:100]
        }
    if isinstance(value, list):
        return [sanitise(v, depth + 1) for v in value[:100]]
    if isinstance(value, str) and len(value) > 2000:
        return value[:2000] + "…"
    return value
