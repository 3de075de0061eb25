"""The keyword index in the shared SQLite file (tables ``keywords``,
``keyword_associations`` and ``keyword_terms``).

Keywords are per owner (``UNIQUE (owner, key)``): reads take ``owner`` (a user id, or
None for every owner's rows). A merge is ``INSERT … ON CONFLICT(owner, key) DO UPDATE
SET usage_count = usage_count + 1`` in one ``BEGIN IMMEDIATE`` transaction on the
shared writer, so concurrent calls — from this process or another one on the same
file — never lose an update.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

import aiosqlite

from storage.keyword_records import KeywordAssociation, KeywordHit, KeywordRecord, KeywordTermHit
from storage.sqlite.database import SqliteDatabase, Statement

#: Keys per ``IN (…)`` list / per multi-row ``VALUES`` (SQLite caps bound parameters).
_CHUNK = 500
_RECORD_COLUMNS = "keyword_id, key, display, usage_count, created_at, updated_at, last_used_at, owner"


class SqliteKeywordStore:
    def __init__(self, db: SqliteDatabase) -> None:
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
        new_ids = {key: uuid.uuid4().hex for key, _ in items}
        association_ids = [uuid.uuid4().hex for _ in range(len(items) * len(result_ids))]

        async def run(conn: aiosqlite.Connection) -> dict[str, tuple[Any, ...]]:
            stored: dict[str, tuple[Any, ...]] = {}
            for chunk in _chunks(items, _CHUNK):
                params: list[object] = []
                for key, display in chunk:
                    params.extend((new_ids[key], key, display, now, now, owner))
                rows = await conn.execute_fetchall(
                    f"INSERT INTO keywords ({_RECORD_COLUMNS})"
                    f" VALUES {','.join('(?, ?, ?, 1, ?, ?, NULL, ?)' for _ in chunk)}"
                    " ON CONFLICT(owner, key) DO UPDATE SET usage_count = usage_count + 1,"
                    " updated_at = excluded.updated_at, last_used_at = excluded.updated_at"
                    f" RETURNING {_RECORD_COLUMNS}",
                    params,
                )
                stored.update((row[1], tuple(row)) for row in rows)
            pairs = [(key, rid) for key, _ in items for rid in result_ids]
            await conn.executemany(
                "INSERT OR IGNORE INTO keyword_associations (association_id, keyword_id,"
                " keyword_key, query_id, external_result_id, conversation_id, created_at, owner)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (aid, stored[key][0], key, query_id, rid, conversation_id, now, owner)
                    for aid, (key, rid) in zip(association_ids, pairs, strict=True)
                ],
            )
            if terms:
                await _write_terms(conn, {stored[k][0]: terms[k] for k, _ in items if k in terms})
            return stored

        stored = await self._db.transact(run)
        return [_record(stored[key]) for key, _ in items]

    async def hits(self, keys: Collection[str], *, owner: str | None) -> list[KeywordHit]:
        wanted = sorted(set(keys))
        out: list[KeywordHit] = []
        if not wanted:
            return out
        mine, mine_args = _owned("k", owner)
        async with self._db.reading() as conn:
            for chunk in _chunks(wanted, _CHUNK):
                rows = await conn.execute_fetchall(
                    "SELECT DISTINCT a.external_result_id, k.key, k.display FROM keywords k"
                    " JOIN keyword_associations a ON a.keyword_id = k.keyword_id"
                    f" WHERE k.key IN ({','.join('?' * len(chunk))}) AND a.external_result_id IS NOT NULL{mine}",
                    [*chunk, *mine_args],
                )
                out.extend(KeywordHit(r[0], r[1], r[2]) for r in rows)
        return out

    async def term_hits(self, terms: Collection[str], *, owner: str | None) -> list[KeywordTermHit]:
        wanted = sorted(set(terms))
        if not wanted:
            return []
        mine, mine_args = _owned("k", owner)
        # One statement (a query has a few hundred terms at most; SQLite binds 32,766),
        # so a keyword's matched terms are counted together. DISTINCT: a keyword
        # associated with one result from several queries counts each term once.
        rows = await self._db.fetchall(
            "SELECT a.external_result_id, k.key, k.display, COUNT(DISTINCT t.term), k.term_count"
            " FROM keyword_terms t JOIN keywords k ON k.keyword_id = t.keyword_id"
            " JOIN keyword_associations a ON a.keyword_id = k.keyword_id"
            f" WHERE t.term IN ({','.join('?' * len(wanted))}) AND a.external_result_id IS NOT NULL{mine}"
            " GROUP BY a.external_result_id, k.keyword_id",
            [*wanted, *mine_args],
        )
        return [KeywordTermHit(r[0], r[1], r[2], int(r[3]), max(int(r[4] or 0), int(r[3]))) for r in rows]

    async def set_terms(self, terms: Mapping[str, Sequence[str]]) -> None:
        keys = sorted(terms)
        if not keys:
            return

        async def run(conn: aiosqlite.Connection) -> None:
            ids: dict[str, Sequence[str]] = {}
            for chunk in _chunks(keys, _CHUNK):
                rows = await conn.execute_fetchall(
                    f"SELECT keyword_id, key FROM keywords WHERE key IN ({','.join('?' * len(chunk))})", chunk
                )
                ids.update((row[0], terms[row[1]]) for row in rows)
            await _write_terms(conn, ids)

        await self._db.transact(run)

    async def without_terms(self, limit: int) -> dict[str, str]:
        rows = await self._db.fetchall(
            "SELECT key, display FROM keywords WHERE term_count IS NULL ORDER BY created_at LIMIT ?", (limit,)
        )
        return {r[0]: r[1] for r in rows}

    async def touch(self, keys: Collection[str], *, owner: str | None, now: float) -> None:
        wanted = sorted(set(keys))
        if not wanted:
            return
        mine, mine_args = _owned("keywords", owner)
        statements: list[Statement] = [
            (
                f"UPDATE keywords SET last_used_at = ? WHERE key IN ({','.join('?' * len(chunk))}){mine}",
                (now, *chunk, *mine_args),
            )
            for chunk in _chunks(wanted, _CHUNK)
        ]
        await self._db.execute(statements)

    async def prune(self, *, usage_below: int, idle_before: float, now: float) -> int:
        where = "usage_count < ? AND COALESCE(last_used_at, updated_at) < ?"

        async def run(conn: aiosqlite.Connection) -> int:
            await conn.execute(
                "UPDATE keyword_associations SET archived_at = ?, keyword_id = NULL"
                f" WHERE keyword_id IN (SELECT keyword_id FROM keywords WHERE {where})",
                (now, usage_below, idle_before),
            )
            rows = await conn.execute_fetchall(
                f"DELETE FROM keywords WHERE {where} RETURNING keyword_id", (usage_below, idle_before)
            )
            return len(list(rows))

        return await self._db.transact(run)

    async def get(self, key: str, *, owner: str) -> KeywordRecord | None:
        row = await self._db.fetchone(
            f"SELECT {_RECORD_COLUMNS} FROM keywords WHERE key = ? AND owner = ?", (key, owner)
        )
        return _record(row) if row is not None else None

    async def associations(self, key: str, *, owner: str | None) -> list[KeywordAssociation]:
        mine, mine_args = _owned("keyword_associations", owner)
        rows = await self._db.fetchall(
            "SELECT keyword_key, query_id, external_result_id, conversation_id, archived_at"
            f" FROM keyword_associations WHERE keyword_key = ?{mine} ORDER BY created_at, rowid",
            (key, *mine_args),
        )
        return [KeywordAssociation(r[0], r[1], r[2], r[3], r[4] is not None) for r in rows]

    async def count(self) -> int:
        row = await self._db.fetchone("SELECT COUNT(*) FROM keywords")
        return int(row[0]) if row is not None else 0


async def _write_terms(conn: aiosqlite.Connection, terms_by_id: Mapping[str, Sequence[str]]) -> None:
    """Replace the terms of these keyword ids (inside the caller's transaction)."""
    for keyword_id, raw_terms in terms_by_id.items():
        unique = list(dict.fromkeys(t for t in raw_terms if t))
        await conn.execute("DELETE FROM keyword_terms WHERE keyword_id = ?", (keyword_id,))
        await conn.executemany(
            "INSERT OR IGNORE INTO keyword_terms (term, keyword_id) VALUES (?, ?)", [(t, keyword_id) for t in unique]
        )
        await conn.execute("UPDATE keywords SET term_count = ? WHERE keyword_id = ?", (len(unique), keyword_id))


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


def _owned(table: str, owner: str | None) -> tuple[str, tuple[str, ...]]:
    """The ``AND <table>.owner = ?`` clause and its argument; nothing for every owner."""
    return ("", ()) if owner is None else (f" AND {table}.owner = ?", (owner,))


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
