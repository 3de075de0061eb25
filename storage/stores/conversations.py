"""Conversations and their messages, on either engine.

A conversation is keyed by its user and its id (migration 16): ids are a namespace
per user, so a client-chosen id another user picked first neither blocks nor reveals
anything — each user gets their own conversation under it. A conversation is created
the moment it is first named (``claim``): an ``INSERT … ON CONFLICT DO NOTHING`` then a
read of its row in the same transaction (``FOR UPDATE`` on PostgreSQL, which locks it
until the transaction ends, so two replicas admitting runs on one conversation see
each other). Message ``seq`` numbers are computed inside the insert. The
conversation's row is touched first (``UPDATE conversations SET updated_at``): on
PostgreSQL that row lock orders appends from any number of replicas (read committed
takes a fresh snapshot per statement, so each sees the previous one's messages); on
SQLite the one writer orders them already.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from llm.types import Message
from storage.dialect import Dialect, Statement
from storage.records import StoredMessage
from storage.sql import Plan, SqlEngine, Tx, run_plan

CLAIM_SQL = "INSERT INTO conversations(user_id, id) VALUES (?, ?) ON CONFLICT (user_id, id) DO NOTHING"
EXISTS_SQL = "SELECT 1 FROM conversations WHERE user_id = ? AND id = ?"
APPEND_SQL = (
    "INSERT INTO messages(user_id, conversation_id, seq, role, payload, run_id) "
    "SELECT ?, ?, COALESCE(MAX(seq), 0) + 1, ?, ?, ? FROM messages WHERE user_id = ? AND conversation_id = ?"
)


def claim_ops(dialect: Dialect, conversation_id: str, user_id: str) -> Plan[None]:
    """Create the user's conversation if it is new, inside an open transaction; on
    PostgreSQL its row stays locked until the transaction ends."""
    yield ("execute", CLAIM_SQL, (user_id, conversation_id))
    yield ("fetchone", EXISTS_SQL + dialect.for_update, (user_id, conversation_id))


async def claim_in(tx: Tx, conversation_id: str, user_id: str) -> None:
    await run_plan(tx, claim_ops(tx.dialect, conversation_id, user_id))


def append_statements(
    dialect: Dialect, conversation_id: str, user_id: str, messages: Sequence[Message], run_id: str | None = None
) -> list[Statement]:
    """The statements appending ``messages``, in portable SQL (render them before they
    go to an engine's own connection or writer queue)."""
    if not messages:
        return []
    touch = f"UPDATE conversations SET updated_at = {dialect.now} WHERE user_id = ? AND id = ?"
    out: list[Statement] = [(touch, (user_id, conversation_id))]  # the row lock first: it orders the appends
    out += [
        (APPEND_SQL, (user_id, conversation_id, m.role, orjson.dumps(m.to_dict()), run_id, user_id, conversation_id))
        for m in messages
    ]
    return out


class SqlConversationStore:
    def __init__(self, sql: SqlEngine) -> None:
        self.sql = sql

    async def exists(self, conversation_id: str, user_id: str) -> bool:
        return await self.sql.fetchone(EXISTS_SQL, (user_id, conversation_id)) is not None

    async def claim(self, conversation_id: str, user_id: str) -> None:
        await self.sql.transact(lambda tx: claim_in(tx, conversation_id, user_id))

    async def load(self, conversation_id: str, user_id: str, *, limit: int = 400) -> list[Message]:
        rows = await self.sql.fetchall(
            "SELECT payload FROM (SELECT seq, payload FROM messages WHERE user_id = ? AND conversation_id = ? "
            "ORDER BY seq DESC LIMIT ?) m ORDER BY seq",
            (user_id, conversation_id, limit),
        )
        return [Message.from_dict(orjson.loads(r[0])) for r in rows]

    async def messages(self, conversation_id: str, user_id: str) -> list[StoredMessage]:
        rows = await self.sql.fetchall(
            "SELECT seq, payload, created_at FROM messages WHERE user_id = ? AND conversation_id = ? ORDER BY seq",
            (user_id, conversation_id),
        )
        out: list[StoredMessage] = []
        for seq, payload, created in rows:
            d: dict[str, Any] = orjson.loads(payload)
            out.append(StoredMessage(int(seq), float(created), d))
        return out

    async def append(
        self, conversation_id: str, user_id: str, messages: Sequence[Message], *, deadline: float | None = None
    ) -> None:
        """``deadline``: a request not yet acknowledged (a client's transcript imported
        before its run) waits no longer (``SqlEngine.transact``)."""
        if not messages:
            return

        async def run(tx: Tx) -> None:
            await claim_in(tx, conversation_id, user_id)
            for sql, params in append_statements(tx.dialect, conversation_id, user_id, messages):
                await tx.execute(sql, params)

        await self.sql.transact(run, deadline=deadline)
