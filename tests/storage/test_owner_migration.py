"""Migration 15 on both engines: rows stored before owners existed get one.

A saved web answer, a keyword association and a keyword become the user's whose
conversation they came from; a keyword two users shared, and anything without a known
conversation, become nobody's (``''``: found only in the shared mode). SQLite rebuilds
``keywords`` for its per-owner unique key, which must keep the rows that point at it
(terms, associations) and keep foreign keys enforced.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiosqlite
import psycopg
import pytest

from tests.support.legacy_db import Sql, migrated_legacy

BEFORE = 14  # the last step without owners

LEGACY = (
    "INSERT INTO conversations (id, user_id) VALUES ('c_alice', 'alice'), ('c_bob', 'bob')",
    "INSERT INTO external_results (result_id, provider, query, answer, conversation_id, created_at) VALUES"
    " ('px_a', 'perplexity', 'my medical leave', 'a', 'c_alice', 1),"
    " ('px_b', 'perplexity', 'q', 'b', 'c_bob', 2),"
    " ('px_none', 'perplexity', 'q', 'n', NULL, 3),"
    " ('px_gone', 'perplexity', 'q', 'g', 'c_missing', 4)",
    "INSERT INTO keywords (keyword_id, key, display, usage_count, created_at, updated_at, term_count) VALUES"
    " ('k1', 'medical leave', 'Medical leave', 1, 1, 1, 2),"
    " ('k2', 'eu vat', 'EU VAT', 2, 1, 2, NULL),"
    " ('k3', 'orphan', 'orphan', 1, 1, 1, NULL)",
    "INSERT INTO keyword_terms (term, keyword_id) VALUES ('medic', 'k1'), ('leav', 'k1')",
    "INSERT INTO keyword_associations (association_id, keyword_id, keyword_key, query_id, external_result_id,"
    " conversation_id, created_at) VALUES"
    " ('a1', 'k1', 'medical leave', 'q1', 'px_a', 'c_alice', 1),"
    " ('a2', 'k2', 'eu vat', 'q1', 'px_a', 'c_alice', 1),"
    " ('a3', 'k2', 'eu vat', 'q2', 'px_b', 'c_bob', 2),"
    " ('a4', 'k3', 'orphan', 'q3', 'px_none', NULL, 3)",
)



@pytest.fixture(params=["sqlite", "postgres"])
async def legacy(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Sql]:
    """A database at step ``BEFORE`` holding the legacy rows, then migrated to the last step."""
    async with migrated_legacy(request, tmp_path, BEFORE, LEGACY) as sql:
        yield sql


async def test_legacy_rows_belong_to_their_conversations_user(legacy: Sql) -> None:
    results: dict[str, str] = dict(await legacy("SELECT result_id, owner FROM external_results"))
    assert results == {"px_a": "alice", "px_b": "bob", "px_none": "", "px_gone": ""}
    associations: dict[str, str] = dict(await legacy("SELECT association_id, owner FROM keyword_associations"))
    assert associations == {"a1": "alice", "a2": "alice", "a3": "bob", "a4": ""}
    rows = await legacy("SELECT keyword_id, owner, key, usage_count, term_count FROM keywords")
    keywords = {r[0]: r[1:] for r in rows}
    assert keywords == {
        "k1": ("alice", "medical leave", 1, 2),
        "k2": ("", "eu vat", 2, None),  # two users shared it: nobody's, not either one's
        "k3": ("", "orphan", 1, None),
    }


async def test_the_rebuilt_keywords_keep_what_points_at_them(legacy: Sql) -> None:
    assert sorted(await legacy("SELECT term, keyword_id FROM keyword_terms")) == [("leav", "k1"), ("medic", "k1")]
    # The key is unique per owner now: Bob may have his own "medical leave".
    await legacy("INSERT INTO keywords (keyword_id, owner, key, display, usage_count, created_at, updated_at)"
                 " VALUES ('k4', 'bob', 'medical leave', 'medical leave', 1, 5, 5)")
    with pytest.raises((aiosqlite.IntegrityError, psycopg.errors.UniqueViolation)):
        await legacy("INSERT INTO keywords (keyword_id, owner, key, display, usage_count, created_at, updated_at)"
                     " VALUES ('k5', 'alice', 'medical leave', 'Medical Leave', 1, 5, 5)")
    # Foreign keys still act: deleting a keyword takes its terms and detaches its associations.
    await legacy("DELETE FROM keywords WHERE keyword_id = 'k1'")
    assert await legacy("SELECT term FROM keyword_terms WHERE keyword_id = 'k1'") == []
    assert await legacy("SELECT keyword_id FROM keyword_associations WHERE association_id = 'a1'") == [(None,)]
