"""The filter language: every operator against real typed columns, validation, injection, relax."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from app.cli.kb_file import open_kb_file
from knowledge import FilterError, KnowledgeBase, compile_filters
from storage.sqlite.kb_filters_sql import filter_sql
from tests.support.sqlite_templates import copy_database
from toolindex.hashing import HashingEmbedder

SCHEMA = {"vendor": "TEXT", "amount": "REAL", "year": "INTEGER", "issued": "DATE", "paid": "BOOLEAN"}
INVOICES: list[dict[str, Any]] = [
    {"id": "a", "vendor": "ACME Corp", "amount": 500.0, "year": 2022, "issued": "2022-03-01", "paid": True},
    {"id": "b", "vendor": "Globex", "amount": 1500.0, "year": 2023, "issued": "2023-06-15", "paid": False},
    {"id": "c", "vendor": "ACME Corp", "amount": 2500.0, "year": 2023, "issued": "2023-11-30", "paid": True},
    {"id": "d", "vendor": "Initech", "amount": 1000.0, "year": 2024, "issued": "2024-01-10"},
]


async def _build_invoices(path: Path) -> None:
    base = await open_kb_file(path, HashingEmbedder(dim=64))
    try:
        await base.create_bucket("invoices", SCHEMA)
        docs = [
            {**inv, "title": f"Invoice {inv['id']}", "text": f"Invoice from {inv['vendor']} for widgets."}
            for inv in INVOICES
        ]
        report = await base.ingest_documents(docs, bucket="invoices")
        assert report.added == 4
    finally:
        await base.aclose()


@pytest.fixture(scope="module")
def invoices_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The invoices bucket built once for the module, the file closed: each test opens a
    copy of its own (``kb``), so what one writes never reaches another. A build per test
    (a fresh file's migrations, the bucket, the ingest) was ~90 % of this file's time."""
    path = tmp_path_factory.mktemp("invoices") / "kb.db"
    asyncio.run(_build_invoices(path))
    return path


@pytest.fixture
async def kb(tmp_path: Path, invoices_file: Path) -> AsyncIterator[KnowledgeBase]:
    base = await open_kb_file(copy_database(invoices_file, tmp_path / "kb.db"), HashingEmbedder(dim=64))
    try:
        yield base
    finally:
        await base.aclose()


async def ids(kb: KnowledgeBase, filters: Any, mode: str = "text") -> set[str]:
    res = await kb.search("invoice widgets", bucket="invoices", filters=filters, top_k=10, mode=mode)  # type: ignore[arg-type]
    return {h.doc_id for h in res.hits}


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({"vendor": "ACME Corp"}, {"a", "c"}),
        ({"vendor": "acme corp"}, {"a", "c"}),  # TEXT compares case-insensitively
        ({"vendor": {"=": "Globex"}}, {"b"}),
        ({"vendor": {"!=": "ACME Corp"}}, {"b", "d"}),
        ({"amount": {">": 1000}}, {"b", "c"}),
        ({"amount": {">=": 1000}}, {"b", "c", "d"}),
        ({"amount": {"<": 1000}}, {"a"}),
        ({"amount": {"<=": 1000}}, {"a", "d"}),
        ({"amount": {">": 600, "<": 2000}}, {"b", "d"}),
        ({"year": {"in": [2022, 2024]}}, {"a", "d"}),
        ({"year": [2022, 2024]}, {"a", "d"}),
        ({"year": {"nin": [2023]}}, {"a", "d"}),
        ({"vendor": {"like": "%corp"}}, {"a", "c"}),
        ({"vendor": {"like": "glob"}}, {"b"}),  # no wildcard: "contains"
        ({"issued": {">=": "2023-01-01", "<": "2024-01-01"}}, {"b", "c"}),
        ({"paid": True}, {"a", "c"}),
        ({"paid": None}, {"d"}),
        ({"paid": {"!=": None}}, {"a", "b", "c"}),
        ({"$or": [{"vendor": "Globex"}, {"year": 2024}]}, {"b", "d"}),
        ({"$and": [{"vendor": "ACME Corp"}, {"year": {"$gte": 2023}}]}, {"c"}),
        ({"amount": {"operator": ">", "value": 1000}, "vendor": {"operator": "LIKE", "value": "%ACME%"}}, {"c"}),
        ({"doc_id": "b"}, {"b"}),
        ({"year": "2023"}, {"b", "c"}),  # numeric strings are coerced
        ('{"year": 2022}', {"a"}),  # a JSON string is accepted
    ],
)
async def test_every_operator_on_both_search_sides(kb: KnowledgeBase, filters: Any, expected: set[str]) -> None:
    assert await ids(kb, filters, "text") == expected
    assert await ids(kb, filters, "semantic") == expected


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        ({"colour": "red"}, "unknown filter field 'colour'"),
        ({"amount": "lots"}, "expected a number"),
        ({"year": 20.5}, "expected an integer"),
        ({"issued": "last tuesday"}, "YYYY-MM-DD"),
        ({"paid": "maybe"}, "true or false"),
        ({"amount": {"~": 3}}, "unknown operator"),
        ({"amount": {"like": "5%"}}, "only works on TEXT"),
        ({"year": {"in": []}}, "non-empty list"),
        ({"year": {"in": list(range(101))}}, "too many values"),
        ({"amount": {">": None}}, "needs a value"),
        ({"$or": []}, "non-empty list"),
        ({"$or": "x"}, "non-empty list"),
        ([1, 2], "must be an object"),
        ("{not json", "JSON object"),
    ],
)
async def test_bad_filters_are_explained(kb: KnowledgeBase, filters: Any, message: str) -> None:
    with pytest.raises(FilterError, match=message):
        await kb.search("invoice", bucket="invoices", filters=filters)


async def test_unknown_field_error_names_the_allowed_fields(kb: KnowledgeBase) -> None:
    with pytest.raises(FilterError) as err:
        await kb.search("invoice", bucket="invoices", filters={"total": 1})
    for name in ("vendor (TEXT)", "amount (REAL)", "year (INTEGER)", "issued (DATE)", "paid (BOOLEAN)", "doc_id"):
        assert name in str(err.value)
    with pytest.raises(FilterError, match="without a bucket"):
        await kb.search("invoice", filters={"vendor": "ACME Corp"})


INJECTIONS: list[Any] = [
    {'vendor" = vendor OR "1': "x"},
    {"vendor; DROP TABLE kb_documents; --": "x"},
    {"vendor)": "x"},
    {"m.vendor": "x"},
    {"amount": {"> 0 OR 1=1 --": 1}},
]


@pytest.mark.parametrize("filters", INJECTIONS)
async def test_injection_attempts_are_rejected(kb: KnowledgeBase, filters: Any) -> None:
    with pytest.raises(FilterError):
        await kb.search("invoice", bucket="invoices", filters=filters)
    assert (await kb.status.stats())["documents"] == 4


async def test_values_are_bound_never_interpolated(kb: KnowledgeBase) -> None:
    evil = "x' OR '1'='1"
    compiled = compile_filters({"vendor": evil, "$or": [{"vendor": {"like": "%'; --"}}]}, SCHEMA, bucket="invoices")
    assert compiled is not None
    sql, params = filter_sql(compiled)
    assert evil not in sql and "--" not in sql
    assert evil in params
    assert await ids(kb, {"vendor": evil}) == set()


async def test_absurd_depth_and_size_are_rejected() -> None:
    deep: dict[str, Any] = {"year": 2023}
    for _ in range(6):
        deep = {"$and": [deep]}
    with pytest.raises(FilterError, match="nested too deeply"):
        compile_filters(deep, SCHEMA)
    many = {"$or": [{"year": i} for i in range(33)]}
    with pytest.raises(FilterError, match="too many"):
        compile_filters(many, SCHEMA)


async def test_relax_drops_the_most_restrictive_constraint(kb: KnowledgeBase) -> None:
    filters = {"vendor": "ACME Corp", "year": 2024}  # each matches something, together nothing
    plain = await kb.search("invoice widgets", bucket="invoices", filters=filters)
    assert plain.hits == [] and not plain.relaxed
    res = await kb.search("invoice widgets", bucket="invoices", filters=filters, relax=True, top_k=10)
    assert res.relaxed and res.dropped_filter == '{"year":2024}'
    assert {h.doc_id for h in res.hits} == {"a", "c"}
    one = await kb.search("invoice widgets", bucket="invoices", filters={"year": 1999}, relax=True, top_k=10)
    assert one.relaxed and len(one.hits) == 4
    found = await kb.search("invoice widgets", bucket="invoices", filters={"year": 2022}, relax=True)
    assert not found.relaxed and [h.doc_id for h in found.hits] == ["a"]


async def test_metadata_value_named_in_query_boosts(kb: KnowledgeBase) -> None:
    res = await kb.search("globex widgets invoice", bucket="invoices", top_k=4)
    assert res.hits[0].doc_id == "b"


async def test_filtered_text_search_beyond_the_probe_window(tmp_path: Path) -> None:
    """More matches than the probe looks at: a broad filter is answered from the probe
    (count scaled), a narrow one falls back to the exact joined query."""
    kb = await open_kb_file(tmp_path / "kb.db", None)
    try:
        await kb.create_bucket("logs", {"level": "TEXT", "n": "INTEGER"})
        docs = [
            {
                "id": f"l{i}",
                "text": f"disk warning number {i}",
                "level": "rare" if i % 400 == 7 else ("even" if i % 2 == 0 else "odd"),
                "n": i,
            }
            for i in range(1300)
        ]
        assert (await kb.ingest_documents(docs, bucket="logs")).added == 1300
        broad = await kb.search("disk warning", bucket="logs", filters={"level": "even"}, mode="text", top_k=5)
        assert len(broad.hits) == 5 and all(int(h.doc_id[1:]) % 2 == 0 for h in broad.hits)
        assert 500 <= broad.total_matches <= 800  # scaled estimate of the true 650
        narrow = await kb.search("disk warning", bucket="logs", filters={"level": "rare"}, mode="text", top_k=10)
        assert {h.doc_id for h in narrow.hits} == {"l7", "l407", "l807", "l1207"} and narrow.total_matches == 4
        mixed = await kb.search(
            "disk warning", bucket="logs", filters={"level": "rare", "doc_id": {"!=": "l7"}}, mode="text"
        )
        assert {h.doc_id for h in mixed.hits} == {"l407", "l807", "l1207"}
    finally:
        await kb.aclose()


async def test_text_search_ranks_an_unresolved_filter_as_the_resolved_one(tmp_path: Path) -> None:
    """A text search ranks the filter's scope in one statement from the filter's table
    (no list of its documents); a hybrid search without an embedder resolves the list
    first (the vector side's way) and ranks the same text: both must find the same
    hits, scores and counts, an empty scope included."""
    kb = await open_kb_file(tmp_path / "kb.db", None)
    try:
        await kb.create_bucket("logs", {"level": "TEXT", "n": "INTEGER"})
        docs = [
            {
                "id": f"l{i}",
                "title": f"log {i}",
                "text": f"disk warning {'fan ' * (i % 5)}number {i}",
                "level": ("rare" if i % 50 == 7 else "even" if i % 2 == 0 else "odd"),
                "n": i,
            }
            for i in range(600)
        ]
        assert (await kb.ingest_documents(docs, bucket="logs")).added == 600
        cases: list[tuple[dict[str, Any], str | None]] = [
            ({"level": "even"}, None),
            ({"level": "rare", "n": {">": 100}}, None),
            ({"title": {"like": "log 1%"}}, None),
            ({"level": "odd"}, "l9"),
            ({"level": "missing"}, None),
        ]
        for filters, doc_id in cases:
            text = await kb.search(
                "disk fan warning", bucket="logs", filters=filters, doc_id=doc_id, mode="text", top_k=8
            )
            resolved = await kb.search(
                "disk fan warning", bucket="logs", filters=filters, doc_id=doc_id, mode="hybrid", top_k=8
            )
            assert [(h.chunk_id, h.score) for h in text.hits] == [(h.chunk_id, h.score) for h in resolved.hits]
            assert text.total_matches == resolved.total_matches
        assert text.hits == [] and text.total_matches == 0 and text.mode == "text"
        assert len((await kb.search("fan", bucket="logs", filters={"level": "even"}, mode="text", top_k=8)).hits) == 8
    finally:
        await kb.aclose()
