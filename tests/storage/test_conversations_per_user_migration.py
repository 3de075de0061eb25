"""Migration 16 on both engines: conversations and messages keyed by user and id.

A database from before keeps every conversation with its owner and every message in
its conversation (now carrying the owner); afterwards another user may have a
conversation of the same id, and the messages' foreign key still acts (SQLite rebuilds
both tables, foreign keys off and checked).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiosqlite
import psycopg
import pytest

from tests.support.legacy_db import Sql, migrated_legacy

BEFORE = 15  # the last step with one global namespace of conversation ids

LEGACY = (
    "INSERT INTO conversations (id, user_id, created_at, updated_at) VALUES"
    " ('c1', 'alice', 1, 2), ('c2', 'bob', 3, 4)",
    "INSERT INTO messages (conversation_id, seq, role, payload, created_at, run_id) VALUES"
    " ('c1', 1, 'user', 'a1', 1, 'r1'), ('c1', 2, 'assistant', 'a2', 2, 'r1'), ('c2', 1, 'user', 'b1', 3, NULL)",
    "INSERT INTO runs (id, conversation_id, user_id, context_type, status) VALUES"
    " ('r1', 'c1', 'alice', 'knowledge', 'completed')",
)



@pytest.fixture(params=["sqlite", "postgres"])
async def legacy(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Sql]:
    """A database at step ``BEFORE`` holding the legacy rows, then migrated to the last step."""
    async with migrated_legacy(request, tmp_path, BEFORE, LEGACY) as sql:
        yield sql


async def test_existing_conversations_and_messages_keep_their_owner(legacy: Sql) -> None:
    assert sorted(await legacy("SELECT user_id, id, created_at, updated_at FROM conversations")) == [
        ("alice", "c1", 1, 2), ("bob", "c2", 3, 4)
    ]
    rows = await legacy("SELECT user_id, conversation_id, seq, role, created_at, run_id FROM messages")
    assert sorted(rows) == [
        ("alice", "c1", 1, "user", 1, "r1"), ("alice", "c1", 2, "assistant", 2, "r1"), ("bob", "c2", 1, "user", 3, None)
    ]


async def test_another_user_may_have_the_same_id_and_the_foreign_key_still_acts(legacy: Sql) -> None:
    await legacy("INSERT INTO conversations (user_id, id) VALUES ('bob', 'c1')")
    await legacy("INSERT INTO messages (user_id, conversation_id, seq, role, payload) VALUES ('bob', 'c1', 1, 'user', 'x')")
    with pytest.raises((aiosqlite.IntegrityError, psycopg.errors.UniqueViolation)):
        await legacy("INSERT INTO conversations (user_id, id) VALUES ('alice', 'c1')")
    with pytest.raises((aiosqlite.IntegrityError, psycopg.errors.ForeignKeyViolation)):
        await legacy("INSERT INTO messages (user_id, conversation_id, seq, role, payload)"
                     " VALUES ('carol', 'c1', 1, 'user', 'x')")
    await legacy("DELETE FROM conversations WHERE user_id = 'alice' AND id = 'c1'")
    assert await legacy("SELECT user_id, seq FROM messages WHERE conversation_id = 'c1'") == [("bob", 1)]
