"""Conversations and their messages on PostgreSQL.

A conversation's owner is written the moment it is first named (``claim``): an
``INSERT … ON CONFLICT DO NOTHING`` then a ``SELECT … FOR UPDATE`` in the same
transaction, so of two replicas claiming one new conversation exactly one wins and the
other reads the winner. Message ``seq`` numbers are computed inside the insert; the
conversation's row is locked first (``UPDATE conversations SET updated_at``), so
appends to one conversation from any number of replicas queue on that row lock and
each sees the previous one's messages (read committed takes a fresh snapshot per
statement): they never collide and never get lost.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from llm.types import Message
from storage.errors import ConversationOwnedByAnother
from storage.postgres.database import Conn, PostgresDatabase, Statement
from storage.records import StoredMessage

_NOW = "(extract(epoch from clock_timestamp())::double precision)"
CLAIM_SQL = "INSERT INTO conversations(id, user_id) VALUES (%s, %s) ON CONFLICT (id) DO NOTHING"
LOCK_SQL = f"UPDATE conversations SET updated_at = {_NOW} WHERE id = %s"
APPEND_SQL = (
    "INSERT INTO messages(conversation_id, seq, role, payload, run_id) "
    "SELECT %s, COALESCE(MAX(seq), 0) + 1, %s, %s, %s FROM messages WHERE conversation_id = %s"
)


async def claim_in(conn: Conn, conversation_id: str, user_id: str) -> None:
    """Create-or-check ownership inside an open transaction; the conversation's row
    stays locked until it ends."""
    await conn.execute(CLAIM_SQL, (conversation_id, user_id))
    cur = await conn.execute("SELECT user_id FROM conversations WHERE id = %s FOR UPDATE", (conversation_id,))
    row = await cur.fetchone()
    if row is None or row[0] != user_id:
        raise ConversationOwnedByAnother(conversation_id)


def append_statements(conversation_id: str, messages: Sequence[Message], run_id: str | None = None) -> list[Statement]:
    if not messages:
        return []
    out: list[Statement] = [(LOCK_SQL, (conversation_id,))]  # the row lock first: it orders the appends
    out += [
        (APPEND_SQL, (conversation_id, m.role, orjson.dumps(m.to_dict()), run_id, conversation_id)) for m in messages
    ]
    return out


class PostgresConversationStore:
    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db

    async def owner(self, conversation_id: str) -> str | None:
        row = await self.db.fetchone("SELECT user_id FROM conversations WHERE id = %s", (conversation_id,))
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
            "SELECT payload FROM (SELECT seq, payload FROM messages WHERE conversation_id = %s "
            "ORDER BY seq DESC LIMIT %s) m ORDER BY seq",
            (conversation_id, limit),
        )
        return [Message.from_dict(orjson.loads(r[0])) for r in rows]

    async def messages(self, conversation_id: str) -> list[StoredMessage]:
        rows = await self.db.fetchall(
            "SELECT seq, payload, created_at FROM messages WHERE conversation_id = %s ORDER BY seq",
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

        async def run(conn: Conn) -> None:
            await claim_in(conn, conversation_id, user_id)
            async with conn.cursor() as cur:
                for sql, params in append_statements(conversation_id, messages):
                    await cur.execute(sql, params)  # type: ignore[arg-type]

        await self.db.transact(run)
