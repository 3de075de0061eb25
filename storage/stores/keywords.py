"""The keyword index (tables ``keywords``, ``keyword_associations`` and
``keyword_terms``), on either engine.

Keywords are per owner (unique on ``(owner, key)``): reads take ``owner`` (a user id,
or None for every owner's rows). A merge is ``INSERT … ON CONFLICT (owner, key) DO
UPDATE SET usage_count = usage_count + 1`` in one write transaction, so concurrent
calls — SQLite's one writer, any PostgreSQL replica — never lose an update. Keys are
written in sorted order so two merges of overlapping sets lock their rows in the same
order (no deadlock between them on PostgreSQL). ``IN (?, …)`` lists and multi-row
``VALUES`` hold at most ``_CHUNK`` keys (SQLite caps the bound parameters).
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

from storage.keyword_records import KeywordAssociation, KeywordHit, KeywordRecord, KeywordTermHit
from storage.sql import SqlEngine, Tx

_CHUNK = 500
_RECORD_COLUMNS = "keyword_id, key, display, usage_count, created_at, updated_at, last_used_at, owner"


class SqlKeywordStore:
    def __init__(self, sql: SqlEngine) -> None:
        self._db = sql
        # Associations in the order they were written: SQLite's rowid, PostgreSQL's seq.
        self._insertion_order = "rowid" if sql.dialect.name == "sqlite" else "seq"

    async def upsert(
        self, keywords: Mapping[str, str], *, query_id: str | None, external_result_ids: Sequence[str] = (),
        conversation_id: str | None = None, owner: str, now: float, terms: Mapping[str, Sequence[str]] | None = None,
    ) -> list[KeywordRecord]:
        items = list(keywords.items())
        if not items:
            return []
        result_ids: list[str | None] = list(dict.fromkeys(external_result_ids)) or [None]
        if query_id is None and result_ids == [None]:
            raise ValueError("an association needs a query id or an external result id")
        ordered = sorted(items)
        new_ids = {key: uuid.uuid4().hex for key, _ in ordered}
        pairs = [(key, rid) for key, _ in ordered for rid in result_ids]
        association_ids = [uuid.uuid4().hex for _ in pairs]

        async def run(tx: Tx) -> dict[str, tuple[Any, ...]]:
            stored: dict[str, tuple[Any, ...]] = {}
            for chunk in _chunks(ordered, _CHUNK):
                params: list[object] = []
                for key, display in chunk:
                    params.extend((new_ids[key], key, display, now, now, owner))
                rows = await tx.fetchall(
                    f"INSERT INTO keywords ({_RECORD_COLUMNS})"
                    f" VALUES {', '.join('(?, ?, ?, 1, ?, ?, NULL, ?)' for _ in chunk)}"
                    " ON CONFLICT (owner, key) DO UPDATE SET usage_count = keywords.usage_count + 1,"
                    " updated_at = excluded.updated_at, last_used_at = excluded.updated_at"
                    f" RETURNING {_RECORD_COLUMNS}",
                    params,
                )
                stored.update((row[1], tuple(row)) for row in rows)
            await tx.executemany(
                "INSERT INTO keyword_associations (association_id, keyword_id, keyword_key, query_id,"
                " external_result_id, conversation_id, created_at, owner) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT DO NOTHING",
                [
                    (aid, stored[key][0], key, query_id, rid, conversation_id, now, owner)
                    for aid, (key, rid) in zip(association_ids, pairs, strict=True)
                ],
            )
            if terms:
                await _write_terms(tx, {stored[k][0]: terms[k] for k, _ in ordered if k in terms})
            return stored

        stored = await self._db.transact(run)
        return [_record(stored[key]) for key, _ in items]

    async def hits(self, keys: Collection[str], *, owner: str | None) -> list[KeywordHit]:
        mine, mine_args = _owned("k", owner)
        out: list[KeywordHit] = []
        for chunk in _chunks(sorted(set(keys)), _CHUNK):
            rows = await self._db.fetchall(
                "SELECT DISTINCT a.external_result_id, k.key, k.display FROM keywords k"
                " JOIN keyword_associations a ON a.keyword_id = k.keyword_id"
                f" WHERE k.key IN ({self._db.dialect.marks(len(chunk))}) AND a.external_result_id IS NOT NULL{mine}",
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
            f" WHERE t.term IN ({self._db.dialect.marks(len(wanted))}) AND a.external_result_id IS NOT NULL{mine}"
            " GROUP BY a.external_result_id, k.keyword_id",
            [*wanted, *mine_args],
        )
        return [KeywordTermHit(r[0], r[1], r[2], int(r[3]), max(int(r[4] or 0), int(r[3]))) for r in rows]

    async def set_terms(self, terms: Mapping[str, Sequence[str]]) -> None:
        keys = sorted(terms)
        if not keys:
            return

        async def run(tx: Tx) -> None:
            ids: dict[str, Sequence[str]] = {}
            for chunk in _chunks(keys, _CHUNK):
                rows = await tx.fetchall(
                    f"SELECT keyword_id, key FROM keywords WHERE key IN ({tx.dialect.marks(len(chunk))})"
                    f" ORDER BY key{tx.dialect.for_update}",
                    chunk,
                )
                ids.update((row[0], terms[row[1]]) for row in rows)
            await _write_terms(tx, ids)

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
        await self._db.execute(
            [
                (
                    f"UPDATE keywords SET last_used_at = ? WHERE key IN ({self._db.dialect.marks(len(chunk))}){mine}",
                    (now, *chunk, *mine_args),
                )
                for chunk in _chunks(wanted, _CHUNK)
            ]
        )

    async def prune(self, *, usage_below: int, idle_before: float, now: float) -> int:
        where = "usage_count < ? AND COALESCE(last_used_at, updated_at) < ?"

        async def run(tx: Tx) -> int:
            await tx.execute(
                "UPDATE keyword_associations SET archived_at = ?, keyword_id = NULL"
                f" WHERE keyword_id IN (SELECT keyword_id FROM keywords WHERE {where})",
                (now, usage_below, idle_before),
            )
            rows = await tx.fetchall(
                f"DELETE FROM keywords WHERE {where} RETURNING keyword_id", (usage_below, idle_before)
            )
            return len(rows)

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
            f" FROM keyword_associations WHERE keyword_key = ?{mine} ORDER BY created_at, {self._insertion_order}",
            (key, *mine_args),
        )
        return [KeywordAssociation(r[0], r[1], r[2], r[3], r[4] is not None) for r in rows]

    async def count(self) -> int:
        row = await self._db.fetchone("SELECT COUNT(*) FROM keywords")
        return int(row[0]) if row is not None else 0


async def _write_terms(tx: Tx, terms_by_id: Mapping[str, Sequence[str]]) -> None:
    """Replace the terms of these keyword ids (inside the caller's transaction)."""
    for keyword_id, raw_terms in terms_by_id.items():
        unique = list(dict.fromkeys(t for t in raw_terms if t))
        await tx.execute("DELETE FROM keyword_terms WHERE keyword_id = ?", (keyword_id,))
        if unique:
            await tx.executemany(
                "INSERT INTO keyword_terms (term, keyword_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
                [(t, keyword_id) for t in unique],
            )
        await tx.execute("UPDATE keywords SET term_count = ? WHERE keyword_id = ?", (len(unique), keyword_id))


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
