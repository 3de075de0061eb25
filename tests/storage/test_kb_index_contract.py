"""The ``KBIndex`` contract: documents, chunks, full text, vectors, buckets and filters
behave alike on every engine.

Filters are compiled by the real filter language (``knowledge.filters``), so the tree
each engine receives is the one a search sends. Full-text scores are each engine's
BM25; the contract is what any search relies on: which chunks match, the best one
first, scores higher-is-better, the match count.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import pytest_asyncio

from knowledge.buckets import typed_values
from knowledge.filters import compile_filters, parse_filters
from storage.interfaces import KBIndex
from storage.kb_records import (
    KBChunkWrite,
    KBDocumentWrite,
    KBSchemaConflict,
    KBScope,
    KBTextTuning,
    KBVectorWrite,
)
from tests.storage.conftest import ENGINES
from tests.support.postgres import TestPostgres
from tests.support.storage import opened_storage

TUNING = KBTextTuning()
DIM = 8
INVOICE_FIELDS = {"customer": "TEXT", "total": "REAL", "items": "INTEGER", "paid": "BOOLEAN", "due": "DATE"}


@pytest.fixture
def kb(store_engine: Any) -> KBIndex:
    return store_engine.kb_index


def vec(i: int) -> np.ndarray:
    v = np.zeros(DIM, np.float32)
    v[i % DIM] = 1.0
    v[(i + 1) % DIM] = 0.25
    return v / np.linalg.norm(v)


def doc(
    doc_id: str,
    chunks: list[str],
    *,
    title: str = "",
    source: str = "",
    origin: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    fields: Mapping[str, str] | None = None,
    vectors: bool = True,
    seed: int = 0,
) -> KBDocumentWrite:
    meta = dict(metadata or {})
    return KBDocumentWrite(
        id=doc_id,
        title=title or doc_id,
        source=source or f"{doc_id}.md",
        url=None,
        content_hash=f"h-{doc_id}-{len(chunks)}",
        metadata=meta,
        chars=sum(len(c) for c in chunks),
        chunks=[KBChunkWrite(i, f"Section {i}", text) for i, text in enumerate(chunks)],
        vectors=np.stack([vec(seed + i) for i in range(len(chunks))]) if vectors else None,
        embed_model="test-embed" if vectors else None,
        embed_dim=DIM if vectors else None,
        typed=typed_values(fields, meta) if fields else (),
        origin=origin,
    )


async def invoices(kb: KBIndex) -> None:
    await kb.create_bucket("invoices", INVOICE_FIELDS, typed_row=typed_values)
    rows = [
        ("inv-1", "ACME Corp", 1500.0, 3, True, "2025-01-10"),
        ("inv-2", "acme corp", 250.5, 1, False, "2025-02-01"),
        ("inv-3", "Globex", 9000.0, 12, False, "2025-03-15"),
        ("inv-4", "Initech", None, None, None, None),
    ]
    docs = []
    for i, (did, customer, total, items, paid, due) in enumerate(rows):
        meta = {"customer": customer, "total": total, "items": items, "paid": paid, "due": due}
        docs.append(doc(did, [f"Invoice for {customer}: widgets and gadgets, reverse charge applies."],
                        metadata={k: v for k, v in meta.items() if v is not None}, fields=INVOICE_FIELDS, seed=i))
    await kb.write_documents("invoices", INVOICE_FIELDS, docs)


async def scoped(kb: KBIndex, bucket: str | None, filters: Any) -> list[str]:
    schema = (await kb.bucket_schemas()).get(bucket or "", {}) if bucket else None
    compiled = compile_filters(parse_filters(filters), schema, bucket=bucket)
    return sorted(await kb.scoped_doc_ids(KBScope(bucket, compiled)))


async def test_written_documents_read_back(kb: KBIndex) -> None:
    await kb.create_bucket("docs", {}, typed_row=typed_values)
    ids = await kb.write_documents(
        "docs", {}, [doc("a", ["alpha text", "beta text"], title="Alpha", metadata={"lang": "en"}),
                     doc("b", ["gamma"], vectors=False)]
    )
    assert [len(x) for x in ids] == [2, 1] and len({i for x in ids for i in x}) == 3
    states = await kb.document_states(["a", "b", "missing"])
    assert set(states) == {"a", "b"}
    assert (states["a"].embed_model, states["a"].embed_dim, states["a"].bucket) == ("test-embed", DIM, "docs")
    assert states["b"].embed_model is None
    record = await kb.get_document("a")
    assert record is not None
    assert (record.title, record.bucket, record.chunks, record.metadata) == ("Alpha", "docs", 2, {"lang": "en"})
    assert await kb.get_document("missing") is None
    rows = {r.chunk_id: r for r in await kb.hydrate([*ids[0], *ids[1], 999_999])}
    assert set(rows) == {*ids[0], *ids[1]}
    first = rows[ids[0][0]]
    assert (first.doc_id, first.position, first.title, first.heading, first.text, first.bucket) == (
        "a", 0, "Alpha", "Section 0", "alpha text", "docs")
    assert first.metadata == {"lang": "en"}
    counts = await kb.counts("test-embed", DIM)
    assert (counts.documents, counts.chunks, counts.without_vectors) == (2, 3, 1)
    [bucket] = await kb.list_buckets()
    assert (bucket.name, bucket.documents, bucket.chunks) == ("docs", 2, 3)


async def test_chunk_pages_read_back(kb: KBIndex) -> None:
    await kb.create_bucket("docs", {}, typed_row=typed_values)
    paged = KBDocumentWrite(
        id="manual", title="Manual", source="manual.pdf", url=None, content_hash="h-manual",
        metadata={"format": "pdf", "pages": 3}, chars=30,
        chunks=[KBChunkWrite(0, "", "install", 1, 1), KBChunkWrite(1, "", "calibrate", 2, 3)],
    )
    [ids] = await kb.write_documents("docs", {}, [paged])
    [plain_ids] = await kb.write_documents("docs", {}, [doc("plain", ["no pages"], vectors=False)])
    rows = {r.text: r for r in await kb.hydrate([*ids, *plain_ids])}
    assert (rows["install"].page, rows["install"].page_end) == (1, 1)
    assert (rows["calibrate"].page, rows["calibrate"].page_end) == (2, 3)
    assert (rows["no pages"].page, rows["no pages"].page_end) == (None, None)


async def test_rewriting_a_document_replaces_its_chunks(kb: KBIndex) -> None:
    await kb.create_bucket("docs", {}, typed_row=typed_values)
    [old] = await kb.write_documents("docs", {}, [doc("a", ["one", "two", "three"])])
    [new] = await kb.write_documents("docs", {}, [doc("a", ["only zebra"])])
    assert len(old) == 3 and len(new) == 1 and not set(old) & set(new)
    assert [r.text for r in await kb.hydrate([*old, *new])] == ["only zebra"]
    assert (await kb.counts("test-embed", DIM)).chunks == 1
    hits = await kb.text_candidates(["zebra"], KBScope(), 10, TUNING)
    assert hits.ids == new


async def test_chunk_ids_are_never_issued_twice(kb: KBIndex) -> None:
    # The newest document's ids, freed by its delete, went to the next ingest (SQLite took
    # max(id)+1): a search holding its scope as chunk ids, or a process whose vectors were
    # not reloaded yet, then named another bucket's (another owner's) chunk by a stale id.
    await kb.create_bucket("parts", {}, typed_row=typed_values)
    await kb.create_bucket("att_b", {}, typed_row=typed_values)
    [older] = await kb.write_documents("parts", {}, [doc("bolt-1", ["bolt one"])])
    [newest] = await kb.write_documents("parts", {}, [doc("bolt-2", ["bolt two", "bolt three"])])
    assert await kb.delete_documents(["bolt-2"]) == ["bolt-2"]
    [other] = await kb.write_documents("att_b", {}, [doc("b-secret", ["B earns 123456", "more"])])
    assert not set(other) & set(newest) and not set(other) & set(older)
    assert min(other) > max(newest)
    assert [r.text for r in await kb.hydrate(newest)] == []


async def test_delete_removes_documents_everywhere(kb: KBIndex) -> None:
    await invoices(kb)
    assert sorted(await kb.delete_documents(["inv-1", "inv-3", "nope"])) == ["inv-1", "inv-3"]
    assert await kb.delete_documents(["inv-1"]) == []
    assert await kb.get_document("inv-1") is None
    assert await scoped(kb, "invoices", {"items": {">": 0}}) == ["inv-2"]
    assert (await kb.text_candidates(["globex"], KBScope(), 10, TUNING)).ids == []
    remaining = {r.doc_id async for r in kb.iter_vectors("test-embed", DIM)}
    assert remaining == {"inv-2", "inv-4"}


async def test_full_text_ranks_matches_best_first(kb: KBIndex) -> None:
    await kb.create_bucket("docs", {}, typed_row=typed_values)
    await kb.write_documents("docs", {}, [
        doc("cats", ["Cats purr. A cat sleeps all day; cats hunt mice."], title="Cats"),
        doc("dogs", ["Dogs bark at the mailman.", "A dog may chase a cat."], title="Dogs"),
        doc("fish", ["Fish swim in water."], title="Fish"),
    ])
    ranked = await kb.text_candidates(["cats"], KBScope(), 10, TUNING)
    rows = {r.chunk_id: r for r in await kb.hydrate(ranked.ids)}
    assert [rows[i].doc_id for i in ranked.ids] == ["cats", "dogs"]  # stemming: "cat" matches "cats"
    assert ranked.total == 2 and ranked.scores[0] > ranked.scores[1] > 0
    both = await kb.text_candidates(["dog", "cat"], KBScope(), 10, TUNING)
    assert both.total == 3
    assert rows.get(both.ids[0]) is None or rows[both.ids[0]].doc_id != "fish"
    assert (await kb.text_candidates(["unicorn"], KBScope(), 10, TUNING)).ids == []
    assert (await kb.text_candidates([], KBScope(), 10, TUNING)).ids == []
    limited = await kb.text_candidates(["cat", "dog"], KBScope(), 1, TUNING)
    assert len(limited.ids) == 1 and limited.total == 3


async def test_full_text_is_safe_and_folds_diacritics(kb: KBIndex) -> None:
    await kb.create_bucket("docs", {}, typed_row=typed_values)
    await kb.write_documents("docs", {}, [doc("cafe", ["Le café de la gare sert un crème brûlée."])])
    for nasty in ['"', "'", "a:b", "(x", "NOT", "OR", "*", "\\", "-z", "^q", "a&b|c!"]:
        await kb.text_candidates([nasty], KBScope(), 5, TUNING)  # never a syntax error
    hit = await kb.text_candidates(["cafe"], KBScope(), 5, TUNING)
    assert len(hit.ids) == 1
    assert len((await kb.text_candidates(["brulee"], KBScope(), 5, TUNING)).ids) == 1


async def test_text_candidates_stay_within_the_scope(kb: KBIndex) -> None:
    await invoices(kb)
    await kb.create_bucket("notes", {}, typed_row=typed_values)
    await kb.write_documents("notes", {}, [doc("note-1", ["widgets are cheaper in bulk"])])
    everything = await kb.text_candidates(["widgets"], KBScope(), 10, TUNING)
    assert everything.total == 5
    in_bucket = await kb.text_candidates(["widgets"], KBScope(bucket="notes"), 10, TUNING)
    assert in_bucket.total == 1
    by_ids = await kb.text_candidates(["widgets"], KBScope(doc_ids=["inv-1", "note-1"]), 10, TUNING)
    docs = {r.doc_id for r in await kb.hydrate(by_ids.ids)}
    assert docs == {"inv-1", "note-1"} and by_ids.total == 2
    schema = (await kb.bucket_schemas())["invoices"]
    f = compile_filters(parse_filters({"total": {">": 1000}}), schema, bucket="invoices")
    filtered = await kb.text_candidates(["widgets"], KBScope("invoices", f), 10, TUNING)
    assert {r.doc_id for r in await kb.hydrate(filtered.ids)} == {"inv-1", "inv-3"}
    one = await kb.text_candidates(["widgets"], KBScope(doc_id="inv-2"), 10, TUNING)
    assert {r.doc_id for r in await kb.hydrate(one.ids)} == {"inv-2"}


async def test_scoped_chunk_ids_are_the_chunks_of_the_documents_in_scope(kb: KBIndex) -> None:
    """The scope as chunk ids (what the in-memory matrix masks by), ascending, for each
    way a scope is given; and handed back in ``KBScope.chunk_ids`` it ranks the text as
    the scope it was resolved from does."""
    fields = {"kind": "TEXT"}
    await kb.create_bucket("parts", fields, typed_row=typed_values)
    docs = [
        doc(f"p-{i}", [f"widget {i} housing", f"widget {i} mounting bracket", "spare"][: 1 + i % 3],
            metadata={"kind": "bolt" if i % 2 else "nut"}, fields=fields, seed=i)
        for i in range(7)
    ]
    written = dict(zip([d.id for d in docs], await kb.write_documents("parts", fields, docs), strict=True))
    schema = (await kb.bucket_schemas())["parts"]
    bolts = compile_filters(parse_filters({"kind": "bolt"}), schema, bucket="parts")

    def chunks_of(*ids: str) -> list[int]:
        return sorted(c for d in ids for c in written[d])

    by_filter = await kb.scoped_chunk_ids(KBScope("parts", bolts))
    assert by_filter.dtype == np.int64 and by_filter.tolist() == chunks_of("p-1", "p-3", "p-5")
    assert (await kb.scoped_chunk_ids(KBScope(doc_id="p-2"))).tolist() == chunks_of("p-2")
    listed = await kb.scoped_chunk_ids(KBScope(doc_ids=["p-6", "p-0", "missing"]))
    assert listed.tolist() == chunks_of("p-0", "p-6")
    given = await kb.scoped_chunk_ids(KBScope("parts", bolts, chunk_ids=by_filter[::-1]))
    assert given.tolist() == by_filter.tolist()
    nothing = compile_filters(parse_filters({"kind": "washer"}), schema, bucket="parts")
    assert len(await kb.scoped_chunk_ids(KBScope("parts", nothing))) == 0
    plain = await kb.text_candidates(["widget", "bracket"], KBScope("parts", bolts), 20, TUNING)
    resolved = await kb.text_candidates(["widget", "bracket"], KBScope("parts", bolts, chunk_ids=by_filter), 20, TUNING)
    assert plain.ids and (resolved.ids, resolved.scores, resolved.total) == (plain.ids, plain.scores, plain.total)
    assert set(plain.ids) <= set(by_filter.tolist())


async def test_selective_terms_keep_every_present_term_on_a_small_index(kb: KBIndex) -> None:
    await kb.create_bucket("docs", {}, typed_row=typed_values)
    await kb.write_documents("docs", {}, [doc("a", ["solar panels on the roof"])])
    assert await kb.selective_terms(["solar", "roof"], 10, TUNING) == ["solar", "roof"]


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=ENGINES)
async def invoices_kb(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[KBIndex]:
    """``invoices`` written once per engine for the filter cases, which only read it (a
    fresh database and the same four invoices per case were most of this module's time
    on PostgreSQL: a database copied and opened, and a storage opened, for each of 17)."""
    if request.param == "sqlite":
        async with opened_storage(tmp_path_factory.mktemp("filters") / "contract.db") as lite:
            await invoices(lite.kb_index)
            yield lite.kb_index
        return
    from storage.postgres import open_postgres_storage

    server: TestPostgres = request.getfixturevalue("pg_server")
    with server.database() as url:
        storage = await open_postgres_storage(url)
        try:
            await invoices(storage.kb_index)
            yield storage.kb_index
        finally:
            await storage.close()


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({"customer": "acme corp"}, ["inv-1", "inv-2"]),  # TEXT fields ignore case
        ({"customer": {"in": ["GLOBEX", "initech"]}}, ["inv-3", "inv-4"]),
        ({"customer": {"nin": ["globex"]}}, ["inv-1", "inv-2", "inv-4"]),
        ({"customer": {"like": "ac%"}}, ["inv-1", "inv-2"]),
        ({"customer": {"!=": "Acme Corp"}}, ["inv-3", "inv-4"]),
        ({"total": {">": 1000}}, ["inv-1", "inv-3"]),
        ({"total": {">=": 250.5, "<": 1500}}, ["inv-2"]),
        ({"items": {"in": [1, 12]}}, ["inv-2", "inv-3"]),
        ({"paid": True}, ["inv-1"]),
        ({"due": {">=": "2025-02-01"}}, ["inv-2", "inv-3"]),
        ({"total": None}, ["inv-4"]),
        ({"$or": [{"customer": "globex"}, {"paid": True}]}, ["inv-1", "inv-3"]),
        ({"$and": [{"customer": {"like": "%corp"}}, {"paid": False}]}, ["inv-2"]),
        ({"title": "inv-3"}, ["inv-3"]),
        ({"source": {"like": "inv-1%"}}, ["inv-1"]),
        ({"doc_id": {"in": ["inv-2", "inv-4", "zzz"]}}, ["inv-2", "inv-4"]),
        ({"created_at": {">=": "2000-01-01"}, "total": {">": 5000}}, ["inv-3"]),
    ],
)
async def test_filters_mean_the_same_on_every_engine(invoices_kb: KBIndex, filters: Any, expected: list[str]) -> None:
    kb = invoices_kb
    assert await scoped(kb, "invoices", filters) == expected
    schema = (await kb.bucket_schemas())["invoices"]
    compiled = compile_filters(parse_filters(filters), schema, bucket="invoices")
    assert await kb.count_documents(KBScope("invoices", compiled)) == len(expected)


async def test_like_treats_backslash_as_an_ordinary_character(kb: KBIndex) -> None:
    await kb.create_bucket("paths", {"path": "TEXT"}, typed_row=typed_values)
    await kb.write_documents("paths", {"path": "TEXT"}, [
        doc("w", ["windows"], metadata={"path": "C:\\temp\\x"}, fields={"path": "TEXT"}),
        doc("u", ["unix"], metadata={"path": "/tmp/x"}, fields={"path": "TEXT"}),
    ])
    assert await scoped(kb, "paths", {"path": {"like": "c:\\temp%"}}) == ["w"]


async def test_buckets_grow_fields_and_refuse_type_changes(kb: KBIndex) -> None:
    assert await kb.create_bucket("crm", {"region": "TEXT"}, typed_row=typed_values) == {"region": "TEXT"}
    await kb.write_documents("crm", {"region": "TEXT"}, [
        doc("c1", ["deal one"], metadata={"region": "EMEA", "size": 10}, fields={"region": "TEXT"}),
    ])
    merged = await kb.create_bucket("crm", {"size": "INTEGER"}, typed_row=typed_values)
    assert merged == {"region": "TEXT", "size": "INTEGER"}
    assert await scoped(kb, "crm", {"size": {">=": 10}}) == ["c1"]  # existing documents were backfilled
    record = await kb.get_document("c1")
    assert record is not None and record.fields == {"region": "EMEA", "size": 10}
    with pytest.raises(KBSchemaConflict):
        await kb.create_bucket("crm", {"size": "TEXT"}, typed_row=typed_values)
    assert (await kb.bucket_schemas())["crm"] == merged


async def test_moving_a_document_to_another_bucket(kb: KBIndex) -> None:
    await invoices(kb)
    await kb.create_bucket("archive", {}, typed_row=typed_values)
    await kb.write_documents("archive", {}, [doc("inv-1", ["archived invoice"])])
    assert await scoped(kb, "invoices", {"total": {">": 0}}) == ["inv-2", "inv-3"]
    state = await kb.document_states(["inv-1"])
    assert state["inv-1"].bucket == "archive"
    assert await kb.count_documents(KBScope(bucket="archive")) == 1


async def test_source_documents_by_exact_origin_or_prefix(kb: KBIndex) -> None:
    await kb.create_bucket("docs", {}, typed_row=typed_values)
    await kb.write_documents("docs", {}, [
        doc("a", ["x"], source="guides/a.md", origin="/srv/guides/a.md"),
        doc("b", ["x"], source="guides/b.md", origin="/srv/guides/b.md"),
        doc("c", ["x"], source="guidesX/c.md", origin="/srv/guidesX/c.md"),
        doc("d", ["x"], source="other/d.md", origin="/srv/other/d.md"),
        doc("e", ["x"], source="api"),
    ])
    assert sorted(await kb.source_documents("docs", "/srv/guides/", prefix=True)) == [
        ("a", "/srv/guides/a.md"), ("b", "/srv/guides/b.md")]
    assert await kb.source_documents("docs", "/srv/other/d.md", prefix=False) == [("d", "/srv/other/d.md")]
    assert await kb.source_documents("docs", "guides/", prefix=True) == []  # the shown source is not the origin
    assert await kb.source_documents("nope", "/srv/other/d.md", prefix=False) == []
    assert (await kb.get_document("a")).source == "guides/a.md"  # type: ignore[union-attr]


async def test_documents_are_listed_by_id_page_by_page(kb: KBIndex) -> None:
    await invoices(kb)
    await kb.create_bucket("docs", {}, typed_row=typed_values)
    await kb.write_documents("docs", {}, [doc("a", ["one", "two"], title="Alpha", source="guides/a.md")])
    everything = await kb.list_documents(None, limit=100)
    assert [d.id for d in everything] == ["a", "inv-1", "inv-2", "inv-3", "inv-4"]
    first = everything[0]
    assert (first.bucket, first.title, first.source) == ("docs", "Alpha", "guides/a.md")
    assert (first.chunks, first.chars) == (2, 6)
    page1 = await kb.list_documents("invoices", limit=2)
    page2 = await kb.list_documents("invoices", limit=2, after=page1[-1].id)
    assert [d.id for d in page1 + page2] == ["inv-1", "inv-2", "inv-3", "inv-4"]
    assert await kb.list_documents("invoices", limit=2, after="inv-4") == []
    assert await kb.list_documents("nope", limit=10) == []


async def test_deleting_a_bucket_removes_its_documents_and_fields(kb: KBIndex) -> None:
    await invoices(kb)
    await kb.create_bucket("docs", {}, typed_row=typed_values)
    await kb.write_documents("docs", {}, [doc("a", ["widgets elsewhere"])])
    gone = await kb.delete_bucket("invoices")
    assert sorted(gone or []) == ["inv-1", "inv-2", "inv-3", "inv-4"]
    assert await kb.delete_bucket("invoices") is None
    assert "invoices" not in await kb.bucket_schemas()
    assert [b.name for b in await kb.list_buckets()] == ["docs"]
    assert await kb.get_document("inv-1") is None
    hits = await kb.text_candidates(["widgets"], KBScope(), 10, TUNING)
    assert [r.doc_id for r in await kb.hydrate(hits.ids)] == ["a"]
    # The bucket can be made again, with other field types.
    await kb.create_bucket("invoices", {"total": "TEXT"}, typed_row=typed_values)
    assert (await kb.bucket_schemas())["invoices"] == {"total": "TEXT"}


async def test_iter_vectors_yields_each_documents_vectors_in_order(kb: KBIndex) -> None:
    await kb.create_bucket("docs", {}, typed_row=typed_values)
    ids = await kb.write_documents("docs", {}, [
        doc("a", ["one", "two"], seed=0), doc("b", ["three"], seed=5), doc("c", ["text only"], vectors=False),
    ])
    rows = [r async for r in kb.iter_vectors("test-embed", DIM)]
    assert [(r.doc_id, r.bucket, r.chunk_ids) for r in rows] == [("a", "docs", ids[0]), ("b", "docs", ids[1])]
    assert rows[0].vectors.dtype == np.float32 and rows[0].vectors.shape == (2, DIM)
    np.testing.assert_allclose(rows[0].vectors[1], vec(1), rtol=1e-6)
    np.testing.assert_allclose(rows[1].vectors[0], vec(5), rtol=1e-6)
    assert [r async for r in kb.iter_vectors("other-model", DIM)] == []
    assert [r async for r in kb.iter_vectors("test-embed", DIM * 2)] == []


async def test_many_documents_in_one_write(kb: KBIndex) -> None:
    await kb.create_bucket("bulk", {}, typed_row=typed_values)
    docs = [doc(f"d{i:04d}", [f"chunk {i} about topic{i % 7}", "shared words"], seed=i) for i in range(700)]
    ids = await kb.write_documents("bulk", {}, docs)
    assert sum(len(x) for x in ids) == 1400
    assert len(await kb.document_states([d.id for d in docs])) == 700
    assert (await kb.text_candidates(["topic3"], KBScope(bucket="bulk"), 1000, TUNING)).total == 100
    assert len(await kb.delete_documents([d.id for d in docs[:600]])) == 600
    assert (await kb.counts("test-embed", DIM)).documents == 100


async def test_counts_without_an_embedder(kb: KBIndex) -> None:
    await kb.create_bucket("docs", {}, typed_row=typed_values)
    await kb.write_documents("docs", {}, [doc("a", ["one"], vectors=False), doc("b", ["two"])])
    counts = await kb.counts(None, None)
    assert (counts.documents, counts.chunks, counts.without_vectors) == (2, 2, 1)


async def test_documents_without_vectors_of_an_embedder_are_listed_with_their_chunks(kb: KBIndex) -> None:
    await kb.create_bucket("docs", {}, typed_row=typed_values)
    await kb.write_documents("docs", {}, [
        doc("a", ["one", "two"], vectors=False), doc("b", ["three"]), doc("c", ["four"], vectors=False),
        doc("d", ["five", "six", "seven"], vectors=False),
    ])
    pending = await kb.documents_without_vectors("test-embed", DIM, limit=10)
    assert [d.id for d in pending] == ["a", "c", "d"]
    first = pending[0]
    assert (first.bucket, first.title, first.content_hash) == ("docs", "a", "h-a-2")
    assert [(c.heading, c.text) for c in first.chunks] == [("Section 0", "one"), ("Section 1", "two")]
    assert [d.id for d in await kb.documents_without_vectors("test-embed", DIM, limit=1, after="a")] == ["c"]
    assert await kb.documents_without_vectors("test-embed", DIM, limit=10, after="d") == []
    # Another embedder (or another dimension of the same one) needs every document.
    assert [d.id for d in await kb.documents_without_vectors("other-model", DIM, limit=10)] == ["a", "b", "c", "d"]
    assert len(await kb.documents_without_vectors("test-embed", DIM * 2, limit=10)) == 4


async def test_stored_vectors_are_searchable_and_the_document_counts_as_embedded(kb: KBIndex) -> None:
    await kb.create_bucket("docs", {}, typed_row=typed_values)
    await kb.write_documents("docs", {}, [doc("a", ["one", "two"], vectors=False), doc("b", ["three"])])
    (pending,) = await kb.documents_without_vectors("test-embed", DIM, limit=10)
    vectors = np.stack([vec(3), vec(4)])
    write = KBVectorWrite(pending.id, pending.content_hash, [c.id for c in pending.chunks], vectors)
    assert await kb.store_vectors("test-embed", DIM, [write]) == ["a"]
    assert await kb.documents_without_vectors("test-embed", DIM, limit=10) == []
    assert (await kb.counts("test-embed", DIM)).without_vectors == 0
    state = (await kb.document_states(["a"]))["a"]
    assert (state.embed_model, state.embed_dim, state.content_hash) == ("test-embed", DIM, "h-a-2")
    rows = {r.doc_id: r async for r in kb.iter_vectors("test-embed", DIM)}
    assert rows["a"].chunk_ids == [c.id for c in pending.chunks]
    np.testing.assert_allclose(rows["a"].vectors, vectors, rtol=1e-6)
    # The full text is untouched.
    assert (await kb.text_candidates(["two"], KBScope(), 10, TUNING)).ids == [pending.chunks[1].id]


async def test_vectors_for_a_document_changed_since_it_was_read_are_not_stored(kb: KBIndex) -> None:
    await kb.create_bucket("docs", {}, typed_row=typed_values)
    await kb.write_documents("docs", {}, [
        doc("a", ["one"], vectors=False), doc("b", ["two"], vectors=False), doc("c", ["three"], vectors=False),
    ])
    read = {d.id: d for d in await kb.documents_without_vectors("test-embed", DIM, limit=10)}
    # Re-ingested meanwhile: "a" with new content, "b" with the same content (new chunk ids); "c" deleted.
    await kb.write_documents("docs", {}, [doc("a", ["one", "more"], vectors=False), doc("b", ["two"], vectors=False)])
    await kb.delete_documents(["c"])
    writes = [
        KBVectorWrite(d.id, d.content_hash, [c.id for c in d.chunks], np.stack([vec(1)] * len(d.chunks)))
        for d in read.values()
    ]
    assert await kb.store_vectors("test-embed", DIM, writes) == []
    assert [d.id for d in await kb.documents_without_vectors("test-embed", DIM, limit=10)] == ["a", "b"]
    assert [r async for r in kb.iter_vectors("test-embed", DIM)] == []


async def test_documents_with_unreadable_vectors_are_listed_by_what_is_stored(kb: KBIndex) -> None:
    await kb.create_bucket("docs", {}, typed_row=typed_values)
    torn = replace(doc("a", ["one", "two"]), vectors=np.ones((2, DIM // 2), np.float32))  # another width than it says
    await kb.write_documents("docs", {}, [torn, doc("b", ["two"]), doc("c", ["three"], vectors=False)])
    # Only documents still of that embedder whose vectors cannot be read now: "b"'s all
    # can (re-embedded or re-ingested since the caller's read), "c" has none, "zz" does not exist.
    (found,) = await kb.documents_with_unreadable_vectors("test-embed", DIM, ["a", "b", "c", "zz"])
    assert (found.id, found.bucket, [c.text for c in found.chunks]) == ("a", "docs", ["one", "two"])
    assert await kb.documents_with_unreadable_vectors("other-model", DIM, ["a"]) == []
    assert [r.doc_id async for r in kb.iter_vectors("test-embed", DIM)] == ["a", "b"]
    # The repair is an ordinary store of its vectors: all of them readable after it.
    write = KBVectorWrite("a", found.content_hash, [c.id for c in found.chunks], np.stack([vec(1), vec(2)]))
    assert await kb.store_vectors("test-embed", DIM, [write]) == ["a"]
    assert await kb.documents_with_unreadable_vectors("test-embed", DIM, ["a"]) == []
    rows = {r.doc_id: r async for r in kb.iter_vectors("test-embed", DIM)}
    assert (len(rows["a"].chunk_ids), rows["a"].unreadable) == (2, 0)
