"""Seed 001's tool-call log on PostgreSQL, written in the background (never blocks the stream)."""

from __future__ import annotations

from typing import Any

import orjson

from storage.postgres.database import PostgresDatabase
from storage.records import ToolCallRecord
from storage.sqlite.tool_calls import sanitise

_INSERT = (
    "INSERT INTO tool_calls(run_id, conversation_id, user_id, tool_use_id, tool_name, parameters, "
    "result, status, error, duration_ms, retry_count) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)


def text(value: str | None) -> str | None:
    """PostgreSQL text cannot hold NUL characters; a tool's output might."""
    return value.replace("\x00", "\ufffd") if value is not None and "\x00" in value else value


class PostgresToolCallLog:
    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db

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
                        text(entry.result),
                        entry.status,
                        text(entry.error),
                        entry.duration_ms,
                        entry.retry_count,
                    ),
                )
            ]
        )

    async def for_run(self, run_id: str) -> list[dict[str, Any]]:
        rows = await self.db.fetchall(
            "SELECT tool_use_id, tool_name, status, retry_count, duration_ms "
            "FROM tool_calls WHERE run_id = %s ORDER BY id",
            (run_id,),
        )
        keys = ("tool_use_id", "tool_name", "status", "retry_count", "duration_ms")
        return [dict(zip(keys, r, strict=True)) for r in rows]
