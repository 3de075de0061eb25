"""Conversations and their messages on SQLite.

A conversation's owner is written the moment it is first named (``claim``), inside the
write transaction, so a second user can never slip in before the first run ends.
Message ``seq`` numbers are computed inside the insert itself, on the one writer, so
concurrent appends to one conversation never collide.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

import aiosqlite
import orjson

from llm.types import Message
from storage.errors import ConversationOwnedByAnother
from storage.records import StoredMessage
from storage.sqlite.database import SqliteDatabase, Statement

_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
CLAIM_SQL = "INSERT INTO conversations(id, user_id) VALUES (?, ?) ON CONFLICT(id) DO NOTHING"
APPEND_SQL = (
    "INSERT INTO messages(conversation_id, seq, role, payload, run_id) "
    "SELECT ?, COALESCE(MAX(seq), 0) + 1, ?, ?, ? FROM messages WHERE conversation_id = ?"
)
TOUCH_SQL = f"UPDATE conversations SET updated_at = {_NOW} WHERE id = ?"


async def claim_in(conn: aiosqlite.Connection, conversation_id: str, user_id: str) -> None:
    """Create-or-check ownership on an open write transaction."""
    await conn.execute(CLAIM_SQL, (conversation_id, user_id))
    async with conn.execute("SELECT user_id FROM conversations WHERE id = ?", (conversation_id,)) as cur:
        row = await cur.fetchone()
    if row is None or row[0] != user_id:
        raise ConversationOwnedByAnother(conversation_id)


def claim_sync(conn: sqlite3.Connection, conversation_id: str, user_id: str) -> None:
    """``claim_in`` for a plain connection (a transaction run on the writer's thread)."""
    conn.execute(CLAIM_SQL, (conversation_id, user_id))
    row = conn.execute("SELECT user_id FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
    if row is None or row[0] != user_id:
        raise ConversationOwnedByAnother(conversation_id)


def append_statements(conversation_id: str, messages: Sequence[Message], run_id: str | None = None) -> list[Statement]:
    out: list[Statement] = [
        (APPEND_SQL, (conversation_id, m.role, orjson.dumps(m.to_dict()), run_id, conversation_id)) for m in messages
    ]
    if messages:
        out.append((TOUCH_SQL, (conversation_id,)))
    return out


class SqliteConversationStore:
    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db

    async def owner(self, conversation_id: str) -> str | None:
        row = await self.db.fetchone("SELECT user_id FROM conversations WHERE id = ?", (conversation_id,))
        return str(row[0]) if row else None

    async def claim(self, conversation_id: str, user_id: str) -> None:
        await self.db.transact(lambda conn: claim_in(conn, conversation_id, user_id))

    async def load(self, conversation_id: str, user_id: str, *, limit: int = 400) -> list[Message]:
        owner = await self.owner(conversation_id)
        if owner is None:
            return []
        if owner != user_id:
            raise ConversationOwnedByAnother(conversation_id)
        rows = await self.db.fetchall(
            "SELECT payload FROM (SELECT seq, payload FROM messages WHERE conversation_id = ? "
            "ORDER BY seq DESC LIMIT ?) ORDER BY seq",
            (conversation_id, limit),
        )
        return [Message.from_dict(orjson.loads(r[0])) for r in rows]

    async def messages(self, conversation_id: str) -> list[StoredMessage]:
        rows = await self.db.fetchall(
            "SELECT seq, payload, created_at FROM messages WHERE conversation_id = ? ORDER BY seq",
            (conversation_id,),
        )
        out: list[StoredMessage] = []
        for seq, payload, created in rows:
            d: dict[str, Any] = orjson.loads(payload)
            out.append(StoredMessage(int(seq), float(created), d))
        return out

    async def append(self, conversation_id: str, user_id: str, messages: Sequence[Message]) -> None:
        if not messages:
            return

        async def run(conn: aiosqlite.Connection) -> None:
            await claim_in(conn, conversation_id, user_id)
            for sql, params in append_statements(conversation_id, messages):
                await conn.execute(sql, params)

        await self.db.transact(run)
