"""The app's durable stores on SQLite: conversations, the tool-call log, the run log.

Each is a small class behind the protocol the agent or the routes use, so a deployment
that outgrows one machine can swap in another database without touching the agent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from app.agent import ToolCallRecord
from app.db import Database
from app.runs import Run, RunEvent
from llm.types import Message


class ConversationOwnedByAnother(Exception):
    pass


class SqliteConversationStore:
    def __init__(self, db: Database, *, max_messages: int = 400) -> None:
        self.db = db
        self.max_messages = max_messages

    async def owner(self, conversation_id: str) -> str | None:
        row = await self.db.fetchone("SELECT user_id FROM conversations WHERE id = ?", (conversation_id,))
        return str(row[0]) if row else None

    async def load(self, conversation_id: str, user_id: str) -> list[Message]:
        owner = await self.owner(conversation_id)
        if owner is None:
            return []
        if owner != user_id:
            raise ConversationOwnedByAnother(conversation_id)
        rows = await self.db.fetchall(
            "SELECT payload FROM (SELECT seq, payload FROM messages WHERE conversation_id = ? "
            "ORDER BY seq DESC LIMIT ?) ORDER BY seq",
            (conversation_id, self.max_messages),
        )
        return [Message.from_dict(orjson.loads(r[0])) for r in rows]

    async def load_dicts(self, conversation_id: str) -> list[dict[str, Any]]:
        rows = await self.db.fetchall(
            "SELECT seq, role, payload, created_at FROM messages WHERE conversation_id = ? ORDER BY seq",
            (conversation_id,),
        )
        out = []
        for seq, _role, payload, created in rows:
            d = orjson.loads(payload)
            d.pop("replay", None)
            d["seq"] = seq
            d["created_at"] = created
            out.append(d)
        return out

    async def append(self, conversation_id: str, user_id: str, messages: Sequence[Message]) -> None:
        if not messages:
            return
        owner = await self.owner(conversation_id)
        if owner is not None and owner != user_id:
            raise ConversationOwnedByAnother(conversation_id)
        row = await self.db.fetchone(
            "SELECT COALESCE(MAX(seq), 0) FROM messages WHERE conversation_id = ?", (conversation_id,)
        )
        start = int(row[0]) if row else 0
        statements: list[tuple[str, Sequence[Any]]] = [
            (
                "INSERT INTO conversations(id, user_id) VALUES (?, ?) "
                "ON CONFLICT(id) DO UPDATE SET updated_at = ((julianday('now') - 2440587.5) * 86400.0)",
                (conversation_id, user_id),
            )
        ]
        for i, m in enumerate(messages, start=start + 1):
            statements.append(
                (
                    "INSERT INTO messages(conversation_id, seq, role, payload) VALUES (?, ?, ?, ?)",
                    (conversation_id, i, m.role, orjson.dumps(m.to_dict())),
                )
            )
        await self.db.write(statements)


class SqliteToolCallLog:
    """Seed 001's tool-call log, written in the background (never blocks the stream)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def record(self, entry: ToolCallRecord) -> None:
        self.db.enqueue(
            "INSERT INTO tool_calls(run_id, conversation_id, user_id, tool_use_id, tool_name, parameters, "
            "result, status, error, duration_ms, retry_count) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (
                entry.run_id,
                entry.conversation_id,
                entry.user_id,
                entry.tool_use_id,
                entry.tool_name,
                orjson.dumps(_sanitise(entry.arguments)),
                entry.result,
                entry.status,
                entry.error,
                entry.duration_ms,
                entry.retry_count,
            ),
        )


_SECRET_KEYS = ("password", "token", "secret", "authorization", "api_key", "apikey")


def _sanitise(value: Any, depth: int = 0) -> Any:
    """Mask secret-looking keys and cut long strings before they are logged."""
    if depth > 6:
        return "…"
    if isinstance(value, dict):
        return {
            k: ("***" if any(s in str(k).lower() for s in _SECRET_KEYS) else _sanitise(v, depth + 1))
            for k, v in list(value.items())[:100]
        }
    if isinstance(value, list):
        return [_sanitise(v, depth + 1) for v in value[:100]]
    if isinstance(value, str) and len(value) > 2000:
        return value[:2000] + "…"
    return value


@dataclass(frozen=True, slots=True)
class StoredRun:
    id: str
    conversation_id: str
    user_id: str
    context_type: str
    status: str


class SqliteRunLog:
    """Durable run events, appended in order in the background; replays after restarts."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def created(self, run: Run) -> None:
        self.db.enqueue(
            "INSERT OR IGNORE INTO runs(id, conversation_id, user_id, context_type, status) VALUES (?,?,?,?,?)",
            (run.id, run.conversation_id, run.user_id, run.context_type, run.status),
        )

    def append(self, run_id: str, event: RunEvent) -> None:
        self.db.enqueue(
            "INSERT OR IGNORE INTO run_events(run_id, seq, event, data) VALUES (?,?,?,?)",
            (run_id, event.seq, event.event, event.data),
        )
        if event.event == "message_complete":
            status = orjson.loads(event.data).get("status", "completed")
            self.db.enqueue(
                "UPDATE runs SET status = ?, finished_at = ((julianday('now') - 2440587.5) * 86400.0) WHERE id = ?", (status, run_id)
            )

    async def get(self, run_id: str) -> StoredRun | None:
        row = await self.db.fetchone(
            "SELECT id, conversation_id, user_id, context_type, status FROM runs WHERE id = ?", (run_id,)
        )
        return StoredRun(*row) if row else None

    async def events_after(self, run_id: str, after: int, limit: int = 10_000) -> list[RunEvent]:
        rows = await self.db.fetchall(
            "SELECT seq, event, data FROM run_events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            (run_id, after, limit),
        )
        return [RunEvent(int(s), str(e), str(d)) for s, e, d in rows]
