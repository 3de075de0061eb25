"""SQLite's typed-field indexes cover the row (``storage.sqlite.kb_buckets``): a
conjunctive filter on a bucket's fields is answered from one index without reading
the side table, ingest, delete and an added field keep the indexes right, and
migration 24 rebuilds the one-column indexes of a file made by an earlier release.

Every filter's documents are compared with the same statement run with the side table
``NOT INDEXED`` (the table scan of the rows themselves), and with ``PRAGMA
integrity_check``, which reads every index entry against its row."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import aiosqlite

from knowledge.buckets import typed_values
from knowledge.filters import compile_filters
from storage.kb_records import KBChunkWrite, KBDocumentWrite, KBScope
from storage.sqlite import kb_buckets, kb_fts
from storage.sqlite.kb_filters_sql import scope_chunks_sql, scope_sql
from storage.sqlite.kb_index import SqliteKBIndex
from tests.support.storage import opened_storage

FIELDS = {"vendor": "TEXT", "amount": "REAL", "year": "INTEGER", "paid": "BOOLEAN", "due": "DATE"}
VENDORS = ["Acme", "acme", "Globex", "Initech", "Umbrella", None]

#: Conjunctions (the case the covering indexes are for) and the rest of the language.
FILTERS: list[dict[str, Any]] = [
    {"year": 2021, "amount": {">": 1000}},
    {"amount": {">": 1000}, "year": 2021},
    {"year": {">=": 2020, "<=": 2022}, "amount": {"<": 500}},
    {"vendor": "ACME", "due": {"<": "2023-06-01"}},
    {"vendor": {"in": ["Globex", "initech"]}, "paid": True, "amount": {">=": 100}},
    {"paid": False, "year": {"nin": [2019, 2020]}},
    {"vendor": {"like": "%ex"}, "year": 2023},
    {"$or": [{"year": 2019, "amount": {">": 2000}}, {"vendor": "umbrella", "paid": True}]},
    {"amount": {"<=": 50}},
    {"due": {">": "2024-01-01"}, "year": {"!=": 2024}},
]


def _metadata(rng: random.Random) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "vendor": rng.choice(VENDORS),
        "amount": round(rng.lognormvariate(6.5, 1.2), 2),
        "year": rng.randint(2018, 2025),
        "paid": rng.random() < 0.5,
        "due": f"{rng.randint(2018, 2025)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
    }
    for key in list(meta):
        if rng.random() < 0.05:  # some documents lack a field: NULL in its column
            del meta[key]
    return {k: v for k, v in meta.items() if v is not None}


def _document(i: int, meta: dict[str, Any], fields: dict[str, str], version: int = 0) -> KBDocumentWrite:
    text = f"invoice {i} version {version}"
    return KBDocumentWrite(
        id=f"inv-{i}",
        title=f"Invoice {i}",
        source=f"inv-{i}.md",
        url=None,
        content_hash=f"h{i}-{version}",
        metadata=meta,
        chars=len(text),
        chunks=[KBChunkWrite(0, "", text)],
        typed=typed_values(fields, meta),
    )


async def _write(kb: SqliteKBIndex, metas: dict[int, dict[str, Any]], version: int = 0) -> None:
    docs = [_document(i, m, FIELDS, version) for i, m in metas.items()]
    await kb.write_documents("invoices", FIELDS, docs)


def _scope(filters: dict[str, Any], fields: dict[str, str] = FIELDS) -> KBScope:
    return KBScope("invoices", compile_filters(filters, fields, bucket="invoices"))


async def _indexed_and_scanned(kb: SqliteKBIndex, filters: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The filter's documents through the product's path, and through a table scan."""
    indexed = sorted(await kb.scoped_doc_ids(_scope(filters)))
    sql, params = scope_sql(_scope(filters))
    assert " m WHERE " in sql, sql
    scanned = await kb._db.fetchall(sql.replace(" m WHERE ", " m NOT INDEXED WHERE "), params)
    return indexed, sorted(r[0] for r in scanned)


async def _check_all(kb: SqliteKBIndex) -> None:
    for filters in FILTERS:
        indexed, scanned = await _indexed_and_scanned(kb, filters)
        assert indexed == scanned, filters
    assert await kb._db.fetchall("PRAGMA integrity_check") == [("ok",)]


async def _plan(kb: SqliteKBIndex, filters: dict[str, Any], fields: dict[str, str] = FIELDS) -> str:
    sql, params = scope_sql(_scope(filters, fields))
    return " | ".join(str(r[-1]) for r in await kb._db.fetchall("EXPLAIN QUERY PLAN " + sql, params))


async def _index_columns(kb: SqliteKBIndex, index: str) -> list[str]:
    """The key columns of ``index``. Read beside ``sqlite_master``: a bare ``PRAGMA``
    answers from the connection's schema as last loaded, and a reader of the pool may
    not have seen the index yet."""
    rows = await kb._db.fetchall(
        "SELECT x.name FROM sqlite_master m, pragma_index_xinfo(m.name) x WHERE m.name = ? AND x.key ORDER BY x.seqno",
        (index,),
    )
    return [r[0] for r in rows]


def _expected(metas: dict[int, dict[str, Any]], year: int, above: float) -> list[str]:
    kept = [i for i, m in metas.items() if m.get("year") == year and m.get("amount") is not None]
    return sorted(f"inv-{i}" for i in kept if metas[i]["amount"] > above)


async def test_a_conjunction_of_typed_fields_is_answered_from_one_covering_index(tmp_path: Path) -> None:
    rng = random.Random(24)
    metas = {i: _metadata(rng) for i in range(400)}
    async with opened_storage(tmp_path / "kb.db") as storage:
        kb = storage.kb_index
        await kb.create_bucket("invoices", FIELDS, typed_row=typed_values)
        await _write(kb, metas)
        for name in FIELDS:
            others = [f for f in FIELDS if f != name]
            assert await _index_columns(kb, f"meta_invoices__{name}") == [name, "doc_id", *others]
        for filters in ({"year": 2021, "amount": {">": 1000}}, {"vendor": "acme", "due": {"<": "2023-06-01"}}):
            plan = await _plan(kb, filters)
            assert "USING COVERING INDEX meta_invoices__" in plan, plan
        indexed, scanned = await _indexed_and_scanned(kb, {"year": 2021, "amount": {">": 1000}})
        assert indexed == scanned == _expected(metas, 2021, 1000) and indexed
        # An equality's documents come out in id order (``doc_id`` is the index's second
        # column): the chunks are looked up by document next, in the order given.
        in_order = await kb.scoped_doc_ids(_scope({"year": 2021, "amount": {">": 1000}}))
        assert in_order == sorted(in_order)
        await _check_all(kb)


async def test_ingest_rewrite_and_delete_keep_the_indexes_right(tmp_path: Path) -> None:
    rng = random.Random(7)
    metas = {i: _metadata(rng) for i in range(300)}
    async with opened_storage(tmp_path / "kb.db") as storage:
        kb = storage.kb_index
        await kb.create_bucket("invoices", FIELDS, typed_row=typed_values)
        await _write(kb, metas)
        await _check_all(kb)
        # Rewrite a third with other values, delete a fifth, add new ones.
        changed = {i: _metadata(rng) for i in range(0, 300, 3)}
        metas.update(changed)
        await _write(kb, changed, version=1)
        gone = [f"inv-{i}" for i in range(1, 300, 5)]
        assert sorted(await kb.delete_documents(gone)) == sorted(gone)
        for i in range(1, 300, 5):
            del metas[i]
        fresh = {i: _metadata(rng) for i in range(300, 380)}
        metas.update(fresh)
        await _write(kb, fresh)
        await _check_all(kb)
        for year in (2019, 2021, 2024):
            indexed, _ = await _indexed_and_scanned(kb, {"year": year, "amount": {">": 700}})
            assert indexed == _expected(metas, year, 700)
        rows = await kb._db.fetchall('SELECT count(*) FROM "meta_invoices" INDEXED BY "meta_invoices__year"')
        assert rows == [(len(metas),)]


async def test_a_field_added_to_a_bucket_joins_every_index(tmp_path: Path) -> None:
    rng = random.Random(3)
    first = {k: FIELDS[k] for k in ("amount", "year")}
    metas = {i: _metadata(rng) for i in range(200)}
    async with opened_storage(tmp_path / "kb.db") as storage:
        kb = storage.kb_index
        await kb.create_bucket("invoices", first, typed_row=typed_values)
        await kb.write_documents("invoices", first, [_document(i, m, first) for i, m in metas.items()])
        assert await _index_columns(kb, "meta_invoices__year") == ["year", "doc_id", "amount"]
        merged = await kb.create_bucket("invoices", {"vendor": "TEXT"}, typed_row=typed_values)
        assert list(merged) == ["amount", "year", "vendor"]
        assert await _index_columns(kb, "meta_invoices__year") == ["year", "doc_id", "amount", "vendor"]
        assert await _index_columns(kb, "meta_invoices__vendor") == ["vendor", "doc_id", "amount", "year"]
        filters = {"vendor": "acme", "year": {">": 2020}}
        plan = await _plan(kb, filters, merged)
        assert "USING COVERING INDEX meta_invoices__" in plan, plan
        indexed = sorted(await kb.scoped_doc_ids(_scope(filters, merged)))
        expected = sorted(
            f"inv-{i}"
            for i, m in metas.items()
            if str(m.get("vendor", "")).lower() == "acme" and m.get("year") is not None and m["year"] > 2020
        )
        assert indexed == expected and indexed
        assert await kb._db.fetchall("PRAGMA integrity_check") == [("ok",)]


def test_a_bucket_with_many_fields_covers_a_bounded_number_per_index() -> None:
    fields = {f"f{i}": "INTEGER" for i in range(12)}
    cols = kb_buckets.index_columns(fields, "f5")
    assert cols[:2] == ["f5", "doc_id"]
    assert len(cols) == kb_buckets.MAX_INDEX_FIELDS + 1
    assert "f5" not in cols[1:]


async def test_migration_24_rebuilds_the_indexes_of_a_file_with_documents(tmp_path: Path) -> None:
    rng = random.Random(11)
    metas = {i: _metadata(rng) for i in range(250)}
    path = tmp_path / "kb.db"
    async with opened_storage(path) as storage:
        kb = storage.kb_index
        await kb.create_bucket("invoices", FIELDS, typed_row=typed_values)
        await kb.create_bucket("notes", {}, typed_row=typed_values)  # no fields: no side table
        await _write(kb, metas)
    # The file as the release before migration 24 left it: one column per index.
    async with aiosqlite.connect(path) as conn:
        for name in FIELDS:
            await conn.execute(f'DROP INDEX "meta_invoices__{name}"')
            await conn.execute(f'CREATE INDEX "meta_invoices__{name}" ON "meta_invoices"("{name}")')
        await conn.execute("DELETE FROM schema_version WHERE version = 24")
        await conn.commit()
        async with conn.execute("PRAGMA index_xinfo('meta_invoices__year')") as cur:
            assert [r[2] for r in await cur.fetchall() if r[5]] == ["year"]
    async with opened_storage(path) as storage:
        kb = storage.kb_index
        assert storage.schema_version >= 24
        versions = [r[0] for r in await kb._db.fetchall("SELECT version FROM schema_version WHERE version = 24")]
        assert versions == [24]
        for name in FIELDS:
            others = [f for f in FIELDS if f != name]
            assert await _index_columns(kb, f"meta_invoices__{name}") == [name, "doc_id", *others]
        plan = await _plan(kb, {"year": 2021, "amount": {">": 1000}})
        assert "USING COVERING INDEX meta_invoices__" in plan, plan
        indexed, _ = await _indexed_and_scanned(kb, {"year": 2022, "amount": {">": 600}})
        assert indexed == _expected(metas, 2022, 600) and indexed
        await _check_all(kb)


async def test_a_field_added_to_a_bucket_gets_its_index_on_either_engine(store_engine: Any) -> None:
    """The index of an added field now comes from ``index_statements`` (after the rows
    are rewritten), on PostgreSQL as on SQLite."""
    kb = store_engine.kb_index
    await kb.create_bucket("crm", {"region": "TEXT"}, typed_row=typed_values)
    await kb.create_bucket("crm", {"size": "INTEGER"}, typed_row=typed_values)
    if isinstance(kb, SqliteKBIndex):
        sql = "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'meta_crm' AND sql IS NOT NULL"
    else:
        sql = "SELECT indexname FROM pg_indexes WHERE tablename = 'meta_crm' AND indexname <> 'meta_crm_pkey'"
    names = {r[0] for r in await kb._db.fetchall(sql)}
    assert names == {"meta_crm__region", "meta_crm__size"}


async def test_the_filtered_ranking_builds_its_scope_index_from_the_filter_directly(tmp_path: Path) -> None:
    """The ranking's ``+rowid IN (...)`` list is built from the scope's ``SELECT`` itself,
    not from a materialised copy of it (one more copy of 31k-38k ids at 1M chunks); the
    rows are those of the whole ranking restricted to the scope."""
    rng = random.Random(5)
    metas = {i: _metadata(rng) for i in range(300)}
    async with opened_storage(tmp_path / "kb.db") as storage:
        kb = storage.kb_index
        await kb.create_bucket("invoices", FIELDS, typed_row=typed_values)
        await _write(kb, metas)
        scope = _scope({"year": 2021, "amount": {">": 500}})
        chunks, params = scope_chunks_sql(scope)
        sql = kb_fts.rank_in_scope(chunks)
        plan = " | ".join(str(r[-1]) for r in await kb._db.fetchall("EXPLAIN QUERY PLAN " + sql, [*params, "x", 5]))
        assert "LIST SUBQUERY" in plan and "MATERIALIZE sc" not in plan, plan
        whole = await kb._db.fetchall(
            f"SELECT rowid, bm25(kb_chunks_fts, {kb_fts.BM25_WEIGHTS}) AS s FROM kb_chunks_fts "
            "WHERE kb_chunks_fts MATCH ? ORDER BY s, rowid",
            ('"invoice" OR "widgets"',),
        )
        in_scope = {r[0] for r in await kb._db.fetchall(chunks, params)}
        expected = [(r[0], r[1]) for r in whole if r[0] in in_scope]
        ranked = await kb._db.fetchall(sql, [*params, '"invoice" OR "widgets"', 1000])
        assert expected and [(r[0], r[1]) for r in ranked] == expected
        assert {r[2] for r in ranked} == {len(expected)}
