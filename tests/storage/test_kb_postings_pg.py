"""PostgreSQL full-text top-k from impact-ordered postings (``kb_postings``, issue 24):
the same top lists as exhaustive BM25 on the labelled sets of ``bench/corpus_quality.py``
(the standard library's docstrings and the language reference), kept in step by ingest,
replace and delete in the writing transaction, and exact when the first read of the
postings cannot prove its top-k (deeper reads) or the bucket is too small a share of
them (exhaustive scoring)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest
import pytest_asyncio

from bench.corpus_quality import QUERIES
from knowledge.filters import compile_filters
from knowledge.kb import KnowledgeBase
from knowledge.textnorm import content_terms
from storage.kb_records import KBRanked, KBScope, KBTextTuning
from storage.postgres import kb_postings, kb_text
from tests.support.corpus import stdlib_documents
from tests.support.postgres import TestPostgres

pytestmark = pytest.mark.postgres
# The corpus loads (the whole labelled set, per row and in bulk) are most of this module's
# time: a loaded knowledge base is built once per module for the tests that only read
# it, on the module's event loop (its pool lives there); a test that writes gets its own.
module_loop = pytest.mark.asyncio(loop_scope="module")

LIMIT = 100  # the candidate depth search asks for (KBConfig.candidates)
TUNING = KBTextTuning()


@asynccontextmanager
async def _loaded_per_row(pg_server: TestPostgres) -> AsyncIterator[tuple[KnowledgeBase, Any]]:
    """The labelled corpus ingested row by row (the postings written by the trigger), in
    two buckets, on a database of its own."""
    from storage.postgres import open_postgres_storage

    with pg_server.database() as url:
        storage = await open_postgres_storage(url)
        kb = await KnowledgeBase.create(storage.kb_index, None, on_close=storage.close)
        try:
            docs = stdlib_documents()
            await kb.ingest_documents(docs[: len(docs) // 2], bucket="pydocs")
            await kb.ingest_documents(docs[len(docs) // 2 :], bucket="other")
            yield kb, storage
        finally:
            await kb.aclose()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pg_kb(pg_server: TestPostgres) -> AsyncIterator[tuple[KnowledgeBase, Any]]:
    """Shared by the module's tests: they read it (and may type a bucket's metadata), never
    change a document."""
    async with _loaded_per_row(pg_server) as loaded:
        yield loaded


@pytest_asyncio.fixture(loop_scope="module")
async def own_pg_kb(pg_server: TestPostgres) -> AsyncIterator[tuple[KnowledgeBase, Any]]:
    """For a test that ingests, replaces and deletes: a corpus nobody else reads."""
    async with _loaded_per_row(pg_server) as loaded:
        yield loaded


def _queries() -> list[str]:
    return [q["query"] for q in orjson.loads(QUERIES.read_bytes())["queries"]]


async def _on_rows(index: Any, terms: list[str], scope: KBScope, limit: int = LIMIT) -> KBRanked:
    """BM25 over every match of ``scope`` scored on its chunk rows (``kb_text._RANK``):
    a scope of documents or a filter, with the postings' answer for a scope turned off
    (a row costing nothing, ``top_in_scope`` always leaves the scope to the rows)."""
    assert not scope.everything and (scope.filter is not None or scope.doc_ids is not None)
    cost, kb_postings.ROW_COST_IN_POSTINGS = kb_postings.ROW_COST_IN_POSTINGS, 0
    try:
        return await index.text_candidates(terms, scope, limit, TUNING)
    finally:
        kb_postings.ROW_COST_IN_POSTINGS = cost


async def _exhaustive(index: Any, terms: list[str], bucket: str | None, limit: int = LIMIT) -> KBRanked:
    """BM25 over every match of ``bucket`` (or of the index), on the chunk rows."""
    sql = "SELECT id FROM kb_documents" + (" WHERE bucket = %s" if bucket else "")
    ids = [r[0] for r in await index._db.fetchall(sql, (bucket,) if bucket else None)]
    return await _on_rows(index, terms, KBScope(doc_ids=ids), limit)


def _same(fast: KBRanked, slow: KBRanked) -> None:
    assert fast.ids == slow.ids
    # Bit for bit: the postings are scored in ``_RANK``'s own arithmetic and order.
    assert fast.scores == slow.scores


def _watch(index: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts of what the text searches ran: answers from the postings (and ``None``s),
    reads of the postings, completions of partly seen candidates, and exhaustive ranks
    on the chunk rows."""
    seen = {"answers": 0, "fallbacks": 0, "reads": 0, "completions": 0, "completed_ids": 0, "row_ranks": 0, "scoped": 0}
    original = kb_text.TextRanker._from_postings

    async def counted(self: Any, *args: Any, **kwargs: Any) -> KBRanked | None:
        found = await original(self, *args, **kwargs)
        seen["answers" if found is not None else "fallbacks"] += 1
        return found

    monkeypatch.setattr(kb_text.TextRanker, "_from_postings", counted)
    fetchall = index._db.fetchall

    async def watched(sql: str, params: Any = ()) -> Any:
        if sql == kb_postings._READ:
            seen["reads"] += 1
        elif "n.n * %(row_cost)s" in sql:  # ``kb_postings._SCOPED``: a scope's postings
            seen["scoped"] += 1
        elif "ts_delete" in sql:  # ``kb_text._RANK``: chunk rows scored
            seen["row_ranks"] += 1
        return await fetchall(sql, params)

    monkeypatch.setattr(index._db, "fetchall", watched)
    unprepared = kb_postings._fetch_unprepared

    async def completing(db: Any, sql: str, params: Any) -> Any:
        assert sql == kb_postings._COMPLETE
        seen["completions"] += 1
        seen["completed_ids"] += len(params["ids"])
        return await unprepared(db, sql, params)

    monkeypatch.setattr(kb_postings, "_fetch_unprepared", completing)
    return seen


@module_loop
async def test_postings_give_the_exhaustive_top_lists_on_the_labelled_sets(
    pg_kb: tuple[KnowledgeBase, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, storage = pg_kb
    index = storage.kb_index
    queries = _queries()
    assert len(queries) >= 30
    answers: list[tuple[KBRanked, list[str], str | None]] = []
    seen = _watch(index, monkeypatch)
    for query in queries:
        terms = content_terms(query)
        for bucket in ("pydocs", None):
            answers.append((await index.text_candidates(terms, KBScope(bucket), LIMIT, TUNING), terms, bucket))
    # Every one answered from the postings (migration 23) alone: no chunk row scored.
    assert seen["answers"] == 2 * len(queries) and seen["fallbacks"] == 0, seen
    assert seen["row_ranks"] == 0, seen
    monkeypatch.undo()
    for fast, terms, bucket in answers:
        _same(fast, await _exhaustive(index, terms, bucket))


@module_loop
async def test_deeper_reads_completions_and_the_exhaustive_fallback_stay_exact(
    pg_kb: tuple[KnowledgeBase, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first read of 5 postings per lexeme (no list read whole) rarely proves a
    top-20: rounds read deeper, the partly seen candidates that may still enter are
    completed from the rest of their lists, and a cap of 20 sends the rest to the
    exhaustive path — every answer the exhaustive top list, bit for bit (here scored on
    a worker thread, in the other tests on the event loop)."""
    _, storage = pg_kb
    index = storage.kb_index
    monkeypatch.setattr(kb_postings, "POSTINGS_MIN_DEPTH", 5)
    monkeypatch.setattr(kb_postings, "POSTINGS_DEPTH_FACTOR", 0)
    monkeypatch.setattr(kb_postings, "WHOLE_LIST_FACTOR", 0)
    monkeypatch.setattr(kb_postings, "INLINE_POSTINGS", 0)  # every read scored on a worker thread
    by_cap: dict[int, dict[str, int]] = {}
    for cap in (80, 20):
        monkeypatch.setattr(kb_postings, "POSTINGS_MAX_DEPTH", cap)
        seen = _watch(index, monkeypatch)
        answers = []
        for query in _queries()[:12]:
            terms = content_terms(query)
            for bucket in ("pydocs", None):
                answers.append((await index.text_candidates(terms, KBScope(bucket), 20, TUNING), terms, bucket))
        by_cap[cap] = dict(seen)
        monkeypatch.setattr(kb_text.TextRanker, "_from_postings", _ORIGINAL_FROM_POSTINGS)
        monkeypatch.setattr(kb_postings, "_fetch_unprepared", _ORIGINAL_UNPREPARED)
        for fast, terms, bucket in answers:
            _same(fast, await _exhaustive(index, terms, bucket, 20))
    # The paths this test is about were all taken: more reads than answers (deeper
    # rounds), completions of partly seen candidates, and fallbacks once capped at 20.
    deep = by_cap[80]
    assert deep["reads"] > deep["answers"] + deep["fallbacks"], by_cap
    assert deep["completions"] > 0 and deep["completed_ids"] > 0, by_cap
    assert by_cap[20]["fallbacks"] > 0, by_cap


_ORIGINAL_FROM_POSTINGS = kb_text.TextRanker._from_postings
_ORIGINAL_UNPREPARED = kb_postings._fetch_unprepared


async def _doc_ids(index: Any, bucket: str | None) -> list[str]:
    sql = "SELECT id FROM kb_documents" + (" WHERE bucket = %s" if bucket else "") + " ORDER BY id"
    return [r[0] for r in await index._db.fetchall(sql, (bucket,) if bucket else None)]


@module_loop
async def test_filtered_scopes_are_ranked_from_their_postings_as_on_their_rows(
    pg_kb: tuple[KnowledgeBase, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filter's scope (typed metadata, a document field) or a list of documents is
    ranked from the postings kept to its chunks (``top_in_scope``): no chunk row scored,
    and every answer the row rank's top list, bit for bit, with the exact match count."""
    kb, storage = pg_kb
    index = storage.kb_index
    await kb.create_bucket("pydocs", {"kind": "TEXT"})  # typed from the documents' metadata
    pydocs = await _doc_ids(index, "pydocs")
    titled = {"title": {"like": "%module%"}}
    scopes = [
        KBScope("pydocs", compile_filters({"kind": "topic"}, await index._schema("pydocs"), bucket="pydocs")),
        KBScope("other", compile_filters(titled, await index._schema("other"), bucket="other")),
        KBScope(doc_ids=pydocs[::3] + (await _doc_ids(index, "other"))[::5]),
        KBScope("pydocs", None, None, pydocs[1::2]),  # a hybrid search's resolved filter
    ]
    answers: list[tuple[KBRanked, list[str], KBScope, int]] = []
    seen = _watch(index, monkeypatch)
    for query in _queries()[:20]:
        terms = content_terms(query)
        for scope in scopes:
            for limit in (LIMIT, 3):
                answers.append((await index.text_candidates(terms, scope, limit, TUNING), terms, scope, limit))
    assert seen["scoped"] == len(answers) and seen["row_ranks"] == 0, seen
    monkeypatch.undo()
    found = 0
    for fast, terms, scope, limit in answers:
        slow = await _on_rows(index, terms, scope, limit)
        _same(fast, slow)
        # Every match of the scope was scored: its count is exact (the rows' too, when
        # their first pass ranked every lexeme, always so for the few lexemes here).
        assert fast.total >= len(fast.ids) and (fast.total == slow.total or slow.total > len(slow.ids)), scope
        found += bool(fast.ids)
    assert found > len(answers) // 2  # the scopes hold matches: not a comparison of empties


@module_loop
async def test_a_scope_too_small_for_its_lists_is_ranked_on_its_rows(
    pg_kb: tuple[KnowledgeBase, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two documents and the index's commonest lexemes: scoring their few matches on
    the rows costs less than reading the lists, so the scope is counted and left to
    the rows (the same answer either way); an empty scope answers empty at once."""
    _, storage = pg_kb
    index = storage.kb_index
    common = await index._db.fetchall(
        "SELECT lexeme FROM kb_postings GROUP BY lexeme ORDER BY count(*) DESC, lexeme LIMIT 3"
    )
    terms = [r[0] for r in common]
    small = KBScope(doc_ids=(await _doc_ids(index, "pydocs"))[:2])
    seen = _watch(index, monkeypatch)
    fast = await index.text_candidates(terms, small, LIMIT, TUNING)
    assert seen["scoped"] == 1 and seen["row_ranks"] >= 1, seen
    assert fast.ids
    on_rows = seen["row_ranks"]
    empty = await index.text_candidates(terms, KBScope(doc_ids=["no-such-document"]), LIMIT, TUNING)
    assert empty == KBRanked() and seen["scoped"] == 2 and seen["row_ranks"] == on_rows, seen
    monkeypatch.undo()
    forced = KBScope(doc_ids=small.doc_ids)
    monkeypatch.setattr(kb_postings, "ROW_COST_IN_POSTINGS", 10**9)  # the lists, whatever they cost
    _same(await index.text_candidates(terms, forced, LIMIT, TUNING), fast)


async def _postings_match_the_chunks(index: Any) -> None:
    row = await index._db.fetchone(
        "SELECT (SELECT count(*) FROM kb_postings),"
        " (SELECT coalesce(sum(length(tsv)), 0) FROM kb_chunks),"
        " (SELECT count(*) FROM kb_postings p LEFT JOIN kb_chunks c ON c.id = p.chunk_id"
        "  LEFT JOIN kb_documents d ON d.id = c.doc_id WHERE d.bucket IS DISTINCT FROM p.bucket)"
    )
    assert row is not None
    postings, lexemes, strays = row
    assert postings == lexemes and strays == 0


@module_loop
async def test_ingest_replace_and_delete_keep_the_postings_in_step(own_pg_kb: tuple[KnowledgeBase, Any]) -> None:
    kb, storage = own_pg_kb
    index = storage.kb_index
    await _postings_match_the_chunks(index)
    docs = stdlib_documents()
    first_half = {d["id"] for d in docs[: len(docs) // 2]}
    some = [d for d in docs if d["id"].startswith("module:json")]
    assert some
    bucket = "pydocs" if some[0]["id"] in first_half else "other"
    # Replaced with other text in the same transaction as their old chunks go.
    changed = [{**d, "text": d["text"] + " zyxwvutsrq appended words"} for d in some]
    report = await kb.ingest_documents(changed, bucket=bucket)
    assert report.updated == len(some) and not report.rejected, report
    await _postings_match_the_chunks(index)
    found = await index.text_candidates(["zyxwvutsrq"], KBScope(bucket), 10, TUNING)
    assert len(found.ids) == len(some)
    assert not (
        await index.text_candidates(["zyxwvutsrq"], KBScope("pydocs" if bucket == "other" else "other"), 10, TUNING)
    ).ids
    await kb.delete_documents([d["id"] for d in some])
    await _postings_match_the_chunks(index)
    assert not (await index.text_candidates(["zyxwvutsrq"], KBScope(None), 10, TUNING)).ids
    gone = await index._db.fetchone("SELECT count(*) FROM kb_postings WHERE lexeme = 'zyxwvutsrq'")
    assert gone == (0,)
    assert await kb.delete_bucket("other") is not None
    await _postings_match_the_chunks(index)


# ---------------------------------------------------------------- bulk loads (item 4)

#: Every posting recomputed from the chunks with migration 18's impact, written out (not
#: the function the writers call): a bulk load's rows must be exactly these.
_RECOMPUTED = """
    SELECT u.lexeme, (4.0 * cardinality(array_positions(u.weights, 'A'))
                       + 2.0 * cardinality(array_positions(u.weights, 'B'))
                       + (cardinality(u.weights) - cardinality(array_positions(u.weights, 'A'))
                          - cardinality(array_positions(u.weights, 'B')))) AS tf,
           c.ntok, c.id, d.bucket
    FROM kb_chunks c JOIN kb_documents d ON d.id = c.doc_id
    CROSS JOIN LATERAL unnest(c.tsv) AS u(lexeme, positions, weights)
"""
_EXPECTED = (
    "SELECT lexeme, (tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * ntok / 64.0)))::real, id, bucket, tf::integer, ntok"
    f" FROM ({_RECOMPUTED}) r"
)
_STORED = "SELECT lexeme, impact, chunk_id, bucket, tf, ntok FROM kb_postings"


async def _postings_are_exact(index: Any) -> None:
    """The postings are, row for row, what the chunks say (no row missing, none extra,
    no impact off by a bit, each with its term frequency and chunk length)."""
    row = await index._db.fetchone(
        f"SELECT (SELECT count(*) FROM ({_STORED} EXCEPT ALL {_EXPECTED}) a),"
        f" (SELECT count(*) FROM ({_EXPECTED} EXCEPT ALL {_STORED}) b),"
        " (SELECT count(*) FROM kb_postings)"
    )
    assert row is not None
    extra, missing, total = row
    assert (extra, missing) == (0, 0) and total > 0


async def _postings_indexed(index: Any) -> bool:
    return await index._db.fetchone("SELECT 1 FROM pg_indexes WHERE indexname = 'kb_postings_impact'") is not None


async def _tsv_indexed(index: Any) -> bool:
    return await index._db.fetchone("SELECT 1 FROM pg_indexes WHERE indexname = 'kb_chunks_tsv'") is not None


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def bulk_kb(pg_server: TestPostgres) -> AsyncIterator[tuple[KnowledgeBase, Any]]:
    """The same corpus as ``pg_kb``, loaded the way ``agentchat ingest`` loads it; shared
    by the module's tests, which only read it."""
    from storage.postgres import open_postgres_storage

    with pg_server.database() as url:
        storage = await open_postgres_storage(url)
        kb = await KnowledgeBase.create(storage.kb_index, None, on_close=storage.close)
        try:
            docs = stdlib_documents()
            async with kb.bulk_load():
                await kb.ingest_documents(docs[: len(docs) // 2], bucket="pydocs")
                # Inside a first load the postings' B-tree and the chunks' GIN index wait
                # for the end; searches read the (complete) tables meanwhile.
                assert not await _postings_indexed(storage.kb_index)
                assert not await _tsv_indexed(storage.kb_index)
                terms = content_terms(_queries()[0])
                _same(
                    await storage.kb_index.text_candidates(terms, KBScope("pydocs"), LIMIT, TUNING),
                    await _exhaustive(storage.kb_index, terms, "pydocs"),
                )
                await kb.ingest_documents(docs[len(docs) // 2 :], bucket="other")
            assert await _postings_indexed(storage.kb_index)
            assert await _tsv_indexed(storage.kb_index)
            yield kb, storage
        finally:
            await kb.aclose()


@module_loop
async def test_a_bulk_load_posts_exactly_what_the_trigger_posts(
    bulk_kb: tuple[KnowledgeBase, Any], pg_kb: tuple[KnowledgeBase, Any]
) -> None:
    _, bulk = bulk_kb
    _, per_row = pg_kb
    await _postings_are_exact(bulk.kb_index)
    await _postings_are_exact(per_row.kb_index)
    # Impacts depend on the chunk alone (fixed length, no idf): the two loads hold the
    # same postings, whatever the corpus statistics were when each row was written.
    sql = (
        "SELECT p.lexeme, p.impact, p.bucket, c.doc_id, c.position FROM kb_postings p"
        " JOIN kb_chunks c ON c.id = p.chunk_id ORDER BY 4, 5, 1"
    )
    assert await bulk.kb_index._db.fetchall(sql) == await per_row.kb_index._db.fetchall(sql)


@module_loop
async def test_a_bulk_loaded_corpus_gives_the_exhaustive_top_lists(bulk_kb: tuple[KnowledgeBase, Any]) -> None:
    _, storage = bulk_kb
    index = storage.kb_index
    for query in _queries():
        terms = content_terms(query)
        for bucket in ("pydocs", None):
            fast = await index.text_candidates(terms, KBScope(bucket), LIMIT, TUNING)
            _same(fast, await _exhaustive(index, terms, bucket))


@module_loop
async def test_a_bulk_load_leaves_the_postings_readable_from_their_index_alone(
    bulk_kb: tuple[KnowledgeBase, Any],
) -> None:
    """The load ends with a vacuum of the postings and the chunks: every page of theirs
    is marked all-visible, so a read of a list is an index-only scan that visits no
    heap page (autovacuum would mark them only once a fifth of the table was new)."""
    _, storage = bulk_kb
    db = storage.kb_index._db
    row = await db.fetchone("SELECT relpages, relallvisible FROM pg_class WHERE relname = 'kb_postings'")
    assert row is not None and row[0] > 0 and row[1] == row[0], row
    # The chunks were vacuumed too (without it no page of theirs is marked). A few of
    # their pages stay unmarked here even when vacuumed again seconds later (cause not
    # found), so this asks for the vacuum, not for every page.
    row = await db.fetchone("SELECT relpages, relallvisible FROM pg_class WHERE relname = 'kb_chunks'")
    assert row is not None and row[0] > 0 and row[1] > 0, row
    # Migration 25: the chunks' key carries their id (a scope's chunk ids, index-only).
    key = await db.fetchone("SELECT indexdef FROM pg_indexes WHERE indexname = 'kb_chunks_doc_position'")
    assert key is not None and "UNIQUE" in key[0] and '(doc_id, "position") INCLUDE (id)' in key[0], key
    lexeme = await db.fetchone("SELECT lexeme FROM kb_postings GROUP BY lexeme ORDER BY count(*) DESC LIMIT 1")
    assert lexeme is not None
    plan = "\n".join(
        r[0]
        for r in await db.fetchall(
            "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT count(*) FROM kb_postings WHERE lexeme = %s",
            (lexeme[0],),
        )
    )
    assert "Index Only Scan" in plan and "Heap Fetches: 0" in plan, plan


async def test_a_load_that_dies_mid_transaction_leaves_no_chunk_without_its_postings(
    pg_server: TestPostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second batch's connection is killed after its chunks were copied and before
    it posted them (its retry then fails for good), and the load never reaches its end
    (as if the process died): what committed is exact, the rest is gone, and the next
    open builds the postings' B-tree and the GIN index the load had dropped."""
    from storage.postgres import kb_index, open_postgres_storage

    docs = stdlib_documents()
    with pg_server.database() as url:
        storage = await open_postgres_storage(url)
        kb = await KnowledgeBase.create(storage.kb_index, None, on_close=storage.close)
        load = kb.bulk_load()
        await load.__aenter__()
        await kb.ingest_documents(docs[:40], bucket="pydocs")
        attempts: list[int] = []
        post_chunks = kb_index.POST_CHUNKS

        async def dying(self: Any, tx: Any, rows: Any) -> None:
            attempts.append(len(rows))
            if len(attempts) > 1:
                raise RuntimeError("the loader died")
            monkeypatch.setattr(
                kb_index, "POST_CHUNKS", "SELECT pg_terminate_backend(pg_backend_pid()), cardinality(%s::bigint[])"
            )
            try:
                await original(self, tx, rows)
            finally:
                monkeypatch.setattr(kb_index, "POST_CHUNKS", post_chunks)

        original = kb_index.PostgresKBIndex._write_chunks
        monkeypatch.setattr(kb_index.PostgresKBIndex, "_write_chunks", dying)
        with pytest.raises(RuntimeError, match="the loader died"):
            await kb.ingest_documents(docs[40:80], bucket="pydocs")
        assert len(attempts) == 2  # killed once (retried as a transient loss), then gone
        monkeypatch.setattr(kb_index.PostgresKBIndex, "_write_chunks", original)
        await storage.close()  # no __aexit__: the load's end never runs
        # Nor later: the suspended load would be finalized as this test's event loop
        # closes, its end then waiting ~10 s on the closed pool for nothing (teardown
        # time, no assertion). A dead process's load has no end: it stays open for good.
        storage.kb_index._loading.depth += 1

        storage = await open_postgres_storage(url)
        try:
            index = storage.kb_index
            assert await _postings_indexed(index) and await _tsv_indexed(index)
            row = await index._db.fetchone("SELECT count(DISTINCT doc_id) FROM kb_chunks")
            assert row == (40,)
            await _postings_are_exact(index)
            # And the load can go on from there, its postings exact too.
            kb2 = await KnowledgeBase.create(index, None)
            async with kb2.bulk_load():
                report = await kb2.ingest_documents(docs[40:120], bucket="pydocs")
            assert report.added == 80 and not report.rejected, report
            await _postings_are_exact(index)
            for query in _queries()[:10]:
                terms = content_terms(query)
                _same(
                    await index.text_candidates(terms, KBScope("pydocs"), LIMIT, TUNING),
                    await _exhaustive(index, terms, "pydocs"),
                )
        finally:
            await storage.close()


# ---------------------------------------------------------- migration 23 (issue 24 item 1)


async def test_migration_23_posts_existing_chunks_again_with_their_tf_and_length(pg_server: TestPostgres) -> None:
    """Chunks written under step 22 (postings without term frequency or length) get them
    from migration 23, row for row what the chunks say; the add trigger it installs posts
    later chunks alike (each chunk's bucket looked up by its document, not a join), and
    the postings alone then give the exhaustive top list."""
    import psycopg

    from storage.postgres import migrations, open_postgres_storage

    with pg_server.database(empty=True) as url:
        await migrations.migrate(url, migrations.MIGRATIONS[:22])
        docs = stdlib_documents()[:60]
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await conn.execute("INSERT INTO kb_buckets (name, created_at) VALUES ('old', 'now'), ('new', 'now')")
            for i, d in enumerate(docs[:40]):
                await conn.execute(
                    "INSERT INTO kb_documents (id, bucket, content_hash, created_at, updated_at, chunk_count)"
                    " VALUES (%s, 'old', %s, 'now', 'now', 1)",
                    (d["id"], str(i)),
                )
                await conn.execute(
                    "INSERT INTO kb_chunks (doc_id, position, title, text, ntok) VALUES (%s, 0, %s, %s, %s)",
                    (d["id"], d.get("title") or "", d["text"], len(d["text"].split())),
                )
            cur = await conn.execute("SELECT count(*) FROM kb_postings")
            assert (await cur.fetchone()) > (0,)
        storage = await open_postgres_storage(url)  # migrates to the last step
        try:
            index = storage.kb_index
            await _postings_are_exact(index)
            kb = await KnowledgeBase.create(index, None)
            report = await kb.ingest_documents(docs[40:], bucket="new")
            assert report.added == 20 and not report.rejected, report
            await _postings_are_exact(index)
            for query in _queries()[:10]:
                terms = content_terms(query)
                for bucket in ("old", "new", None):
                    _same(
                        await index.text_candidates(terms, KBScope(bucket), LIMIT, TUNING),
                        await _exhaustive(index, terms, bucket),
                    )
        finally:
            await storage.close()


def test_the_best_are_picked_as_sorting_by_score_then_id_picks_them() -> None:
    """``_best`` partitions before it sorts: ties at the cut are all kept, so the lowest
    ids win them as in ``sorted(key=(-score, id))`` (the exhaustive rank's order)."""
    import numpy as np

    rng = np.random.default_rng(3)
    for _ in range(200):
        n = int(rng.integers(0, 60))
        ids = rng.permutation(10_000)[:n].astype(np.int64)
        scores = rng.integers(0, 6, size=n).astype(np.float64) / 4  # many ties
        for limit in (1, 3, 10, 100):
            expected = sorted(zip(ids.tolist(), scores.tolist(), strict=True), key=lambda kv: (-kv[1], kv[0]))[:limit]
            got = kb_postings._best(ids, scores, limit)
            assert got == ([i for i, _ in expected], [s for _, s in expected])
