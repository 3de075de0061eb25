"""The keyword index on PostgreSQL (tables ``keywords``, ``keyword_associations`` and
``keyword_terms``).

Keywords are per owner (a unique index on ``(owner, key)``): reads take ``owner`` (a
user id, or None for every owner's rows). A merge is ``INSERT … ON CONFLICT (owner,
key) DO UPDATE SET usage_count = usage_count + 1``:
concurrent calls from any replica never lose an update. Keys are written in sorted
order so two merges of overlapping sets lock their rows in the same order (no
deadlock between them).
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from storage.keyword_records import KeywordAssociation, KeywordHit, KeywordRecord, KeywordTermHit
from storage.postgres.database import Conn, PostgresDatabase

_RECORD_COLUMNS = "keyword_id, key, display, usage_count, created_at, updated_at, last_used_at, owner"
#: Every owner's rows when the owner parameter is NULL (the shared pool).
_OWNED = "(%s::text IS NULL OR {table}.owner = %s)"


class PostgresKeywordStore:
    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db

    async def upsert(
        self,
        keywords: Mapping[str, str],
        *,
        query_id: str | None,
        external_result_ids: Sequence[str] = (),
        conversation_id: str | None = None,
        owner: str,
        now: float,
        terms: Mapping[str, Sequence[str]] | None = None,
    ) -> list[KeywordRecord]:
        items = list(keywords.items())
        if not items:
            return []
        result_ids: list[str | None] = list(dict.fromkeys(external_result_ids)) or [None]
        if query_id is None and result_ids == [None]:
            raise ValueError("an association needs a query id or an external result id")
        ordered = sorted(items)
        new_ids = [uuid.uuid4().hex for _ in ordered]

        async def run(conn: Conn) -> dict[str, tuple[Any, ...]]:
            cur = await conn.execute(
                f"INSERT INTO keywords ({_RECORD_COLUMNS})"
                " SELECT i, k, d, 1, %s, %s, NULL, %s"
                " FROM unnest(%s::text[], %s::text[], %s::text[]) AS t(i, k, d)"
                " ORDER BY k"
                " ON CONFLICT (owner, key) DO UPDATE SET usage_count = keywords.usage_count + 1,"
                " updated_at = excluded.updated_at, last_used_at = excluded.updated_at"
                f" RETURNING {_RECORD_COLUMNS}",
                (now, now, owner, new_ids, [k for k, _ in ordered], [d for _, d in ordered]),
            )
            stored = {row[1]: tuple(row) for row in await cur.fetchall()}
            pairs = [(key, rid) for key, _ in ordered for rid in result_ids]
            await conn.execute(
                "INSERT INTO keyword_associations (association_id, keyword_id, keyword_key, query_id,"
                " external_result_id, conversation_id, created_at, owner)"
                " SELECT a, kw, k, %s, r, %s, %s, %s FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[])"
                " WITH ORDINALITY AS t(a, kw, k, r, n) ORDER BY n"
                " ON CONFLICT DO NOTHING",
                (
                    query_id,
                    conversation_id,
                    now,
                    owner,
                    [uuid.uuid4().hex for _ in pairs],
                    [stored[key][0] for key, _ in pairs],
                    [key for key, _ in pairs],
                    [rid for _, rid in pairs],
                ),
            )
            if terms:
                await _write_terms(conn, {stored[k][0]: terms[k] for k, _ in ordered if k in terms})
            return stored

        stored = await self._db.transact(run)
        return [_record(stored[key]) for key, _ in items]

    async def hits(self, keys: Collection[str], *, owner: str | None) -> list[KeywordHit]:
        wanted = sorted(set(keys))
        if not wanted:
            return []
        rows = await self._db.fetchall(
            "SELECT DISTINCT a.external_result_id, k.key, k.display FROM keywords k"
            " JOIN keyword_associations a ON a.keyword_id = k.keyword_id"
            " WHERE k.key = ANY(%s) AND a.external_result_id IS NOT NULL AND " + _OWNED.format(table="k"),
            (wanted, owner, owner),
        )
        return [KeywordHit(r[0], r[1], r[2]) for r in rows]

    async def term_hits(self, terms: Collection[str], *, owner: str | None) -> list[KeywordTermHit]:
        wanted = sorted(set(terms))
        if not wanted:
            return []
        # DISTINCT: a keyword associated with one result from several queries counts
        # each of its terms once.
        rows = await self._db.fetchall(
            "SELECT a.external_result_id, k.key, k.display, COUNT(DISTINCT t.term), k.term_count"
            " FROM keyword_terms t JOIN keywords k ON k.keyword_id = t.keyword_id"
            " JOIN keyword_associations a ON a.keyword_id = k.keyword_id"
            " WHERE t.term = ANY(%s) AND a.external_result_id IS NOT NULL AND " + _OWNED.format(table="k") +
            " GROUP BY a.external_result_id, k.keyword_id",
            (wanted, owner, owner),
        )
        return [KeywordTermHit(r[0], r[1], r[2], int(r[3]), max(int(r[4] or 0), int(r[3]))) for r in rows]

    async def set_terms(self, terms: Mapping[str, Sequence[str]]) -> None:
        keys = sorted(terms)
        if not keys:
            return

        async def run(conn: Conn) -> None:
            cur = await conn.execute(
                "SELECT keyword_id, key FROM keywords WHERE key = ANY(%s) ORDER BY key FOR UPDATE", (keys,)
            )
            await _write_terms(conn, {row[0]: terms[row[1]] for row in await cur.fetchall()})

        await self._db.transact(run)

    async def without_terms(self, limit: int) -> dict[str, str]:
        rows = await self._db.fetchall(
            "SELECT key, display FROM keywords WHERE term_count IS NULL ORDER BY created_at LIMIT %s", (limit,)
        )
        return {r[0]: r[1] for r in rows}

    async def touch(self, keys: Collection[str], *, owner: str | None, now: float) -> None:
        wanted = sorted(set(keys))
        if wanted:
            await self._db.execute(
                [
                    (
                        "UPDATE keywords SET last_used_at = %s WHERE key = ANY(%s) AND "
                        + _OWNED.format(table="keywords"),
                        (now, wanted, owner, owner),
                    )
                ]
            )

    async def prune(self, *, usage_below: int, idle_before: float, now: float) -> int:
        where = "usage_count < %s AND COALESCE(last_used_at, updated_at) < %s"

        async def run(conn: Conn) -> int:
            await conn.execute(
                "UPDATE keyword_associations SET archived_at = %s, keyword_id = NULL"
                f" WHERE keyword_id IN (SELECT keyword_id FROM keywords WHERE {where})",
                (now, usage_below, idle_before),
            )
            cur = await conn.execute(
                f"DELETE FROM keywords WHERE {where} RETURNING keyword_id", (usage_below, idle_before)
            )
            return len(await cur.fetchall())

        return await self._db.transact(run)

    async def get(self, key: str, *, owner: str) -> KeywordRecord | None:
        row = await self._db.fetchone(
            f"SELECT {_RECORD_COLUMNS} FROM keywords WHERE key = %s AND owner = %s", (key, owner)
        )
        return _record(row) if row is not None else None

    async def associations(self, key: str, *, owner: str | None) -> list[KeywordAssociation]:
        rows = await self._db.fetchall(
            "SELECT keyword_key, query_id, external_result_id, conversation_id, archived_at"
            " FROM keyword_associations WHERE keyword_key = %s AND "
            + _OWNED.format(table="keyword_associations")
            + " ORDER BY created_at, seq",
            (key, owner, owner),
        )
        return [KeywordAssociation(r[0], r[1], r[2], r[3], r[4] is not None) for r in rows]

    async def count(self) -> int:
        row = await self._db.fetchone("SELECT COUNT(*) FROM keywords")
        return int(row[0]) if row is not None else 0


async def _write_terms(conn: Conn, terms_by_id: Mapping[str, Sequence[str]]) -> None:
    """Replace the terms of these keyword ids (inside the caller's transaction)."""
    for keyword_id, raw_terms in terms_by_id.items():
        unique = list(dict.fromkeys(t for t in raw_terms if t))
        await conn.execute("DELETE FROM keyword_terms WHERE keyword_id = %s", (keyword_id,))
        if unique:
            await conn.execute(
                "INSERT INTO keyword_terms (term, keyword_id) SELECT t, %s FROM unnest(%s::text[]) AS t"
                " ON CONFLICT DO NOTHING",
                (keyword_id, unique),
            )
        await conn.execute("UPDATE keywords SET term_count = %s WHERE keyword_id = %s", (len(unique), keyword_id))


def _record(row: Sequence[Any]) -> KeywordRecord:
    return KeywordRecord(
        keyword_id=row[0],
        key=row[1],
        display=row[2],
        usage_count=int(row[3]),
        created_at=float(row[4]),
        updated_at=float(row[5]),
        last_used_at=float(row[6]) if row[6] is not None else None,
        owner=str(row[7]),
    )
