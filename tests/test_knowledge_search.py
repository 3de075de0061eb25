"""Search: FTS robustness, vectors, fusion, caps, scores, snippets, scope, signals, concurrency."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio

from app.cli.kb_file import open_kb_file
from knowledge import KBConfig, KnowledgeBase, OverloadRule, UnknownBucketError
from knowledge.textnorm import content_terms
from knowledge.vectors import VectorIndex, normalise_rows
from storage.kb_records import KBScope, KBVectorRows
from storage.kb_terms import selective_terms
from tests.test_knowledge_chunking import NASTY
from toolindex.hashing import HashingEmbedder

ANIMALS = {
    "otter": "Sea otters float on their backs and crack shellfish with stones.",
    "beaver": "Beavers build dams from branches and mud across small rivers.",
    "heron": "Grey herons stand still in shallow water waiting for fish.",
    "cafe": "Le café sert une crème brûlée délicieuse près de la façade.",
}


async def _animals(path: Path) -> KnowledgeBase:
    base = await open_kb_file(path, HashingEmbedder(dim=256))
    await base.ingest_documents([{"id": k, "title": k.capitalize(), "text": v} for k, v in ANIMALS.items()])
    return base


@pytest.fixture
async def kb(tmp_path: Path) -> AsyncIterator[KnowledgeBase]:
    """The animals on a database of the test's own: for a test that ingests more."""
    base = await _animals(tmp_path / "kb.db")
    try:
        yield base
    finally:
        await base.aclose()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def read_kb(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[KnowledgeBase]:
    """The animals once for the module's tests that only search them (a database opened
    and ingested for each of the 78 hostile queries was most of this module's time)."""
    base = await _animals(tmp_path_factory.mktemp("animals") / "kb.db")
    try:
        yield base
    finally:
        await base.aclose()


#: The tests that only read ``read_kb`` run on its event loop (its connection lives there).
module_loop = pytest.mark.asyncio(loop_scope="module")


@module_loop
async def test_fts_folds_diacritics_both_ways(read_kb: KnowledgeBase) -> None:
    for query in ("creme brulee", "CRÈME BRÛLÉE", "facade"):
        res = await read_kb.search(query, mode="text")
        assert [h.doc_id for h in res.hits] == ["cafe"], query


@module_loop
@pytest.mark.parametrize("query", NASTY)
@pytest.mark.parametrize("mode", ["text", "hybrid", "semantic"])
async def test_punctuation_and_syntax_laden_queries_never_fail(read_kb: KnowledgeBase, query: str, mode: str) -> None:
    res = await read_kb.search(query, mode=mode)  # type: ignore[arg-type]
    assert all(0.0 <= h.score <= 1.0 for h in res.hits)


@module_loop
async def test_fts_operators_in_queries_are_plain_words(read_kb: KnowledgeBase) -> None:
    res = await read_kb.search('otters NOT "shellfish', mode="text")
    assert res.hits and res.hits[0].doc_id == "otter"


@module_loop
async def test_semantic_finds_related_wording_without_shared_words(read_kb: KnowledgeBase) -> None:
    # Misspelt words share no token with the otter text, but the hashing embedder's
    # character n-grams still connect them.
    text = await read_kb.search("shelfish craking", mode="text")
    sem = await read_kb.search("shelfish craking", mode="semantic")
    assert text.hits == []
    assert sem.hits[0].doc_id == "otter" and sem.mode == "semantic"


@module_loop
async def test_hybrid_fuses_both_sides_and_scores_are_unit(read_kb: KnowledgeBase) -> None:
    res = await read_kb.search("herons waiting for fish in water", top_k=4)
    assert res.mode == "hybrid" and res.hits[0].doc_id == "heron"
    scores = [h.score for h in res.hits]
    assert scores == sorted(scores, reverse=True)
    assert all(0.0 <= s <= 1.0 for s in scores)
    # the best match beats an unrelated document clearly
    assert scores[0] - scores[-1] > 0.2


@module_loop
async def test_weak_best_match_does_not_score_like_a_perfect_one(read_kb: KnowledgeBase) -> None:
    strong = await read_kb.search("sea otters crack shellfish with stones", mode="semantic")
    weak = await read_kb.search("quantum chromodynamics lattice", mode="semantic")
    assert strong.hits[0].score > weak.hits[0].score + 0.3


async def test_at_most_three_chunks_per_document(tmp_path: Path) -> None:
    kb = await open_kb_file(tmp_path / "kb.db", HashingEmbedder(dim=128), config=KBConfig(chunk_target=200, chunk_overlap=20))
    try:
        long_text = "\n\n".join(f"Paragraph {i} mentions the lighthouse keeper and the lamp." for i in range(30))
        await kb.ingest_documents(
            [
                {"id": "long", "title": "Lighthouse", "text": long_text},
                {"id": "short", "title": "Other", "text": "A short note about a lighthouse."},
            ]
        )
        assert (await kb.get_document("long"))["chunks"] > 5  # type: ignore[index]
        res = await kb.search("lighthouse keeper lamp", top_k=10)
        per_doc = [h.doc_id for h in res.hits]
        assert per_doc.count("long") == 3 and "short" in per_doc
        assert len({h.chunk_id for h in res.hits}) == len(res.hits)
    finally:
        await kb.aclose()


@pytest.mark.parametrize("mode", ["hybrid", "text", "semantic"])
async def test_a_search_inside_one_document_is_not_capped_at_three_chunks(tmp_path: Path, mode: str) -> None:
    """The cap spreads answers over pages; inside one page (``doc_id``) a reader asking for
    eight passages of it gets eight, not the three the cap would leave."""
    config = KBConfig(chunk_target=200, chunk_overlap=20)
    kb = await open_kb_file(tmp_path / "kb.db", HashingEmbedder(dim=128), config=config)
    try:
        long_text = "\n\n".join(f"Paragraph {i} mentions the lighthouse keeper and the lamp." for i in range(30))
        await kb.ingest_documents([{"id": "long", "title": "Lighthouse", "text": long_text}])
        res = await kb.search("lighthouse keeper lamp", doc_id="long", top_k=8, mode=mode)
        assert len(res.hits) == 8 and {h.doc_id for h in res.hits} == {"long"}
        assert len({h.chunk_id for h in res.hits}) == 8
    finally:
        await kb.aclose()


async def test_snippet_context_chars_and_hit_fields(kb: KnowledgeBase) -> None:
    long = "Intro words here. " * 40 + "The secret ingredient is saffron from the valley. " + "Outro words. " * 40
    await kb.ingest_documents([{"id": "recipe", "title": "Recipe", "text": long, "url": "https://x.test/r", "metadata": {"cuisine": "persian"}}])
    res = await kb.search("saffron valley", context_chars=120)
    hit = res.hits[0]
    assert hit.doc_id == "recipe" and "saffron" in hit.text and len(hit.text) <= 122
    assert (hit.chunk_id, hit.bucket, hit.url, hit.metadata) == (f"recipe#{hit.position}", "default", "https://x.test/r", {"cuisine": "persian"})
    full = await kb.search("saffron valley")
    assert len(full.hits[0].text) > 200


async def test_bucket_and_doc_scope(kb: KnowledgeBase) -> None:
    await kb.create_bucket("birds", {})
    await kb.ingest_documents([{"id": "owl", "text": "Owls hunt fish at night? No, mice."}], bucket="birds")
    res = await kb.search("fish", bucket="birds", mode="hybrid", top_k=10)
    assert {h.doc_id for h in res.hits} == {"owl"} and all(h.bucket == "birds" for h in res.hits)
    res = await kb.search("fish", doc_id="heron", top_k=10)
    assert {h.doc_id for h in res.hits} == {"heron"}
    with pytest.raises(UnknownBucketError, match="available buckets: birds, default"):
        await kb.search("fish", bucket="nope")
    with pytest.raises(ValueError):
        await kb.search("fish", mode="fuzzy")  # type: ignore[arg-type]


async def test_no_embedder_means_text_only(tmp_path: Path) -> None:
    kb = await open_kb_file(tmp_path / "kb.db", None)
    try:
        await kb.ingest_documents([{"id": "a", "text": "walrus tusks"}])
        res = await kb.search("walrus", mode="semantic")
        assert res.mode == "text" and res.hits[0].doc_id == "a" and res.warnings
        assert (await kb.search("walrus")).mode == "text"
    finally:
        await kb.aclose()


async def test_overload_is_one_rule_kept_from_a_search_within_one_document(tmp_path: Path) -> None:
    """``SearchResponse.overloaded`` is ``OverloadRule``'s decision, the one the corpus
    tools act on: at least the threshold (not more than it), the caller's rule when it
    passes one, and never for a search kept to one document (a page read again)."""
    kb = await open_kb_file(tmp_path / "kb.db", HashingEmbedder(dim=64), config=KBConfig(overload_threshold=80))
    try:
        docs = [{"id": f"inv-{i}", "title": "Invoice", "text": f"Invoice number {i} for services."} for i in range(80)]
        clause = "The renewal of this schedule follows the general terms. " + "Filler words for the clause. " * 22
        clauses = "\n\n".join(f"Clause {i}. {clause}" for i in range(10, 50))
        docs.append({"id": "ctr-long", "title": "Framework agreement", "text": clauses})
        await kb.ingest_documents(docs)
        broad = await kb.search("invoice", mode="text", top_k=10)
        assert broad.total_matches == 80 and broad.score_spread < 0.05 and broad.overloaded  # 80 >= 80
        assert not (await kb.search("invoice", mode="text", top_k=10, overload=OverloadRule(81, 0.05))).overloaded
        flat = OverloadRule(threshold=20, flat_spread=0.1)
        whole = await kb.search("renewal schedule", mode="text", overload=flat)
        assert whole.total_matches >= 20 and whole.score_spread < 0.1 and whole.overloaded, whole
        page = await kb.search("renewal schedule", mode="text", doc_id="ctr-long", overload=flat)
        assert page.total_matches >= 20 and page.score_spread < 0.1, page
        assert not page.overloaded and {h.doc_id for h in page.hits} == {"ctr-long"}
    finally:
        await kb.aclose()


async def test_overload_signal_on_many_flat_matches(tmp_path: Path) -> None:
    kb = await open_kb_file(tmp_path / "kb.db", HashingEmbedder(dim=64), config=KBConfig(overload_threshold=50))
    try:
        docs = [{"id": f"inv-{i}", "title": "Invoice", "text": f"Invoice number {i} for services rendered."} for i in range(80)]
        await kb.ingest_documents(docs)
        broad = await kb.search("invoice", mode="text", top_k=10)
        assert broad.total_matches == 80 and broad.score_spread < 0.05 and broad.overloaded
        narrow = await kb.search("invoice 17", mode="text", top_k=10)
        assert narrow.hits[0].doc_id == "inv-17" and not narrow.overloaded
    finally:
        await kb.aclose()


async def test_two_best_passages_alike_are_no_overload(tmp_path: Path) -> None:
    """Flatness is read at a fixed depth (the 10th score), not at the asked-for count: a
    search for two passages whose two best score alike, far above the rest, is answered,
    not sent back as too broad (``top_k`` 2 compared the 1st and 2nd alone; an ordinary
    ``search_semantic`` on the sample KB ended its run with an overload clarification)."""
    kb = await open_kb_file(tmp_path / "kb.db", HashingEmbedder(dim=64), config=KBConfig(overload_threshold=50))
    try:
        docs = [{"id": f"inv-{i}", "title": "Invoice", "text": f"Invoice number {i} for the payment schedule."}
                for i in range(80)]
        docs += [{"id": "rota-pager", "title": "Pager rota",
                  "text": "The zebra rotation schedule hands the pager to Alice every Tuesday."},
                 {"id": "rota-phone", "title": "Phone rota",
                  "text": "The zebra rotation schedule gives the phone to Bob each Friday."}]
        await kb.ingest_documents(docs)
        twins = await kb.search("zebra rotation schedule", mode="text", top_k=2)
        assert {h.doc_id for h in twins.hits} == {"rota-pager", "rota-phone"}, twins.hits
        assert twins.total_matches >= 50 and not twins.overloaded, twins
        broad = await kb.search("payment schedule", mode="text", top_k=2)
        assert broad.total_matches >= 50 and broad.overloaded, broad  # still an overload when flat deep down
    finally:
        await kb.aclose()


async def test_fewer_flat_matches_than_the_spread_depth_still_overload(tmp_path: Path) -> None:
    """A search matching fewer passages than the spread depth (10) is read at its last
    score, not called never flat: with ``AGENT_CLARIFY_OVERLOAD_HITS`` 5, seven invoices
    that score alike are an overload (as the setting's doc says), and a matched set with
    one passage far above the rest is not."""
    rule = OverloadRule(threshold=5, flat_spread=0.05)
    kb = await open_kb_file(tmp_path / "kb.db", HashingEmbedder(dim=64), config=KBConfig(overload_threshold=5))
    try:
        docs = [{"id": f"inv-{i}", "title": "Invoice", "text": f"Invoice number {i} for services rendered."}
                for i in range(7)]
        await kb.ingest_documents(docs)
        flat = await kb.search("invoice", mode="text", top_k=5, overload=rule)
        assert flat.total_matches == 7 and flat.score_spread < 0.05 and flat.overloaded, flat
        narrow = await kb.search("invoice 3", mode="text", top_k=5, overload=rule)
        assert narrow.hits[0].doc_id == "inv-3" and not narrow.overloaded, narrow
    finally:
        await kb.aclose()


async def test_concurrent_searches_while_ingesting(tmp_path: Path) -> None:
    kb = await open_kb_file(tmp_path / "kb.db", HashingEmbedder(dim=64), config=KBConfig(executor_rows=10, batch_documents=20))
    try:
        await kb.ingest_documents([{"id": "seed", "text": "kestrel hovering over the field"}])

        async def ingest() -> None:
            for round_ in range(5):
                docs = [{"id": f"d{round_}-{i}", "text": f"kestrel note {round_} {i} about hovering"} for i in range(40)]
                report = await kb.ingest_documents(docs)
                assert report.added == 40
                await kb.delete_documents([f"d{round_}-{i}" for i in range(0, 40, 2)])

        async def search_loop() -> int:
            n = 0
            for _ in range(30):
                res = await kb.search("kestrel hovering", top_k=5)
                assert res.hits and all(0 <= h.score <= 1 for h in res.hits)
                n += 1
                await asyncio.sleep(0)
            return n

        results = await asyncio.gather(ingest(), *(search_loop() for _ in range(4)))
        assert results[1:] == [30, 30, 30, 30]
        stats = await kb.status.stats()
        assert stats["documents"] == 1 + 5 * 20 and stats["vectors"] == stats["chunks"]
    finally:
        await kb.aclose()


# --------------------------------------------------------------------------- common terms, scoped BM25, span scans


def test_selective_terms_drops_common_terms_but_keeps_something() -> None:
    df = {"invoice": 600, "the": 900, "widget": 12, "gizmo": 0}
    args = {"common_fraction": 0.2, "common_min_df": 100}
    assert selective_terms(["invoice", "widget", "gizmo"], df, 1000, **args) == ["widget"]
    # every present term common: the rarest one stays; absent terms never match
    assert selective_terms(["the", "invoice", "gizmo"], df, 1000, **args) == ["invoice"]
    assert selective_terms(["gizmo"], df, 1000, **args) == []
    # too few matches left to fill the candidate list: nothing is dropped
    assert selective_terms(["invoice", "widget"], df, 1000, min_matches=50, **args) == ["invoice", "widget"]
    # frequent in share but not in absolute numbers: kept (cheap to score)
    assert selective_terms(["invoice", "widget"], df, 1000, common_fraction=0.2, common_min_df=700) == ["invoice", "widget"]


async def test_common_terms_are_skipped_and_refreshed_after_ingest(tmp_path: Path) -> None:
    cfg = KBConfig(common_term_min_df=50, candidates=10)
    kb = await open_kb_file(tmp_path / "kb.db", None, config=cfg)
    try:
        docs = [{"id": f"inv-{i}", "text": f"Invoice {i} for services" + (" with widget parts" if i % 20 == 0 else "")} for i in range(200)]
        await kb.ingest_documents(docs)
        res = await kb.search("invoice widget", mode="text", top_k=10)
        # "invoice" is in every chunk: only the widget chunks match, best first
        assert {h.doc_id for h in res.hits} == {f"inv-{i}" for i in range(0, 200, 20)} and res.total_matches == 10
        res = await kb.search("invoice gizmo", mode="text", top_k=3)
        assert len(res.hits) == 3 and res.total_matches == 200  # nothing has "gizmo": the common term is kept
        await kb.ingest_documents([{"id": "g", "text": "A gizmo, finally."}])
        res = await kb.search("invoice gizmo", mode="text", top_k=3)
        assert res.hits[0].doc_id == "g"  # the cached document frequency of "gizmo" was refreshed
    finally:
        await kb.aclose()


async def test_small_bucket_among_many_matches_is_ranked_exactly(tmp_path: Path) -> None:
    kb = await open_kb_file(tmp_path / "kb.db", HashingEmbedder(dim=64), config=KBConfig(text_probe=50))
    try:
        await kb.create_bucket("small", {"level": "TEXT"})
        await kb.ingest_documents([{"id": f"big-{i}", "text": f"disk warning number {i} disk"} for i in range(300)])
        small = [{"id": f"s{i}", "text": f"a disk warning {i}", "level": "hi" if i else "lo"} for i in range(3)]
        await kb.ingest_documents(small, bucket="small")
        for mode in ("text", "hybrid"):
            res = await kb.search("disk warning", bucket="small", mode=mode, top_k=10)
            assert {h.doc_id for h in res.hits} == {"s0", "s1", "s2"}, mode
        res = await kb.search("disk warning", bucket="small", mode="text", top_k=10)
        assert res.total_matches == 3
        res = await kb.search("disk warning", bucket="small", filters={"level": "hi"}, mode="text", top_k=10)
        assert {h.doc_id for h in res.hits} == {"s1", "s2"} and res.total_matches == 2
    finally:
        await kb.aclose()


@pytest.mark.parametrize("layout", ["contiguous", "interleaved", "sparse"])
def test_masked_vector_scan_matches_brute_force(layout: str) -> None:
    rng = np.random.default_rng(3)
    index = VectorIndex(16)
    for d in range(40):
        bucket = ("a" if d < 20 else "b") if layout == "contiguous" else ("a" if d % 2 else "b")
        if layout == "sparse":
            bucket = "a" if d == 5 else "b"
        index.add(range(d * 10, d * 10 + 10), f"doc{d}", bucket, rng.standard_normal((10, 16)).astype(np.float32))
    index.remove_document("doc7")
    snap = index.snapshot()
    q = normalise_rows(rng.standard_normal(16))[0]
    mask = snap.bucket_codes[: snap.n] == index.bucket_code("a")
    ids, scores, positive = VectorIndex.scan(snap, q, 7, mask)
    eligible = mask & snap.alive[: snap.n]
    all_scores = snap.matrix[: snap.n] @ q
    order = [int(i) for i in np.argsort(-np.where(eligible, all_scores, -np.inf), kind="stable")[: min(7, int(eligible.sum()))]]
    assert ids.tolist() == [int(snap.chunk_ids[i]) for i in order]
    assert np.allclose(scores, all_scores[order])
    assert positive == int(((all_scores > 0) & eligible).sum())


def test_adding_a_batch_of_documents_is_adding_them_one_by_one() -> None:
    """``add_many`` (ingest's batches) leaves the matrix exactly as ``add`` per
    document would: rows, ids, codes, which rows a document and a chunk own, scans,
    removal; a one-chunk document may come as a single vector; a wrong shape is refused."""
    rng = np.random.default_rng(5)
    docs = [
        KBVectorRows(f"doc{d}", "ab"[d % 2], list(range(d * 10, d * 10 + 1 + d % 3)), np.zeros(0, np.float32))
        for d in range(30)
    ]
    docs = [dataclasses.replace(d, vectors=rng.standard_normal((len(d.chunk_ids), 8)).astype(np.float32)) for d in docs]
    docs[4] = dataclasses.replace(docs[4], chunk_ids=[40], vectors=docs[4].vectors[0])  # one chunk, a 1-D vector
    one, many = VectorIndex(8, capacity=4), VectorIndex(8, capacity=4)
    one.add([1], "first", "a", rng.standard_normal((1, 8)).astype(np.float32))
    many.add([1], "first", "a", one.snapshot().matrix[:1])
    for d in docs:
        one.add(d.chunk_ids, d.doc_id, d.bucket, d.vectors)
    many.add_many(docs)
    a, b = one.snapshot(), many.snapshot()
    assert a.n == b.n == 1 + sum(len(d.chunk_ids) for d in docs)
    for field in ("matrix", "chunk_ids", "doc_codes", "bucket_codes", "alive"):
        assert np.array_equal(getattr(a, field)[: a.n], getattr(b, field)[: b.n]), field
    q = normalise_rows(rng.standard_normal(8))[0]
    assert one.cosines([11, 40, 290], q) == many.cosines([11, 40, 290], q)
    assert one.remove_document("doc7") == many.remove_document("doc7") == 2
    scans = [VectorIndex.scan(x.snapshot(), q, 12) for x in (one, many)]
    assert scans[0][0].tolist() == scans[1][0].tolist() and scans[0][2] == scans[1][2]
    with pytest.raises(ValueError, match="expected 2x8"):
        many.add_many([KBVectorRows("bad", "a", [900, 901], np.zeros((3, 8), np.float32))])
    assert many.snapshot().n == b.n  # nothing of a refused batch was added


async def test_filtered_bm25_is_the_whole_ranking_restricted_to_the_scope(tmp_path: Path) -> None:
    """The scoped FTS query scores only in-scope matches; its order, scores and match
    count must be exactly those of the whole-index ranking with out-of-scope rows removed."""
    kb = await open_kb_file(tmp_path / "kb.db", None)
    try:
        await kb.create_bucket("inv", {"year": "INTEGER"})
        words = ["disk", "warning", "fan", "power", "cable", "rack"]
        docs = [
            {
                "id": f"d{i}",
                "title": f"note {i} {words[i % 6]}",
                "text": " ".join(words[(i * j) % 6] for j in range(1, 2 + i % 7)),
                "year": 2020 + i % 3,
            }
            for i in range(240)
        ]
        await kb.ingest_documents(docs, bucket="inv")
        await kb.ingest_documents([{"id": f"o{i}", "text": "disk warning elsewhere"} for i in range(40)])
        terms, tuning = content_terms("disk warning fan"), kb.config.text_tuning
        whole = await kb.index.text_candidates(terms, KBScope(), 1000, tuning)
        res = await kb.search("disk warning fan", bucket="inv", filters={"year": 2021}, mode="text", top_k=5)
        scope = {f"d{i}" for i in range(240) if i % 3 == 1}
        hit_docs = {h.doc_id for h in res.hits}
        assert hit_docs and hit_docs <= scope
        with sqlite3.connect(kb.index.location) as db:
            doc_of = dict(db.execute("SELECT id, doc_id FROM kb_chunks").fetchall())
        expected = [(c, s) for c, s in zip(whole.ids, whole.scores, strict=True) if doc_of[c] in scope]
        scoped = await kb.index.text_candidates(terms, KBScope(bucket="inv", doc_ids=sorted(scope)), 30, tuning)
        assert list(zip(scoped.ids, scoped.scores, strict=True)) == expected[:30]
        assert scoped.total == len(expected) == res.total_matches
    finally:
        await kb.aclose()


@pytest.mark.parametrize("probe", [1000, 60])
async def test_bucket_probe_is_the_whole_ranking_restricted_to_the_bucket(tmp_path: Path, probe: int) -> None:
    """A bucket without filters is ranked from a probe of the whole index whose rows'
    buckets are looked up only as far down as needed: the same ids and scores as the
    whole ranking with the other buckets' rows removed, however the buckets interleave
    (here the first rows are mostly the other bucket's, so the lookup goes past its
    first step), and an exact match count when the probe saw every match."""
    kb = await open_kb_file(tmp_path / "kb.db", None)
    try:
        # Bucket b's short passages lead the ranking; a's longer ones come in between.
        a = [{"id": f"a{i}", "text": "disk warning fan " + "spare " * (2 + i % 40)} for i in range(150)]
        b = [{"id": f"b{i}", "text": "disk warning fan " + "spare " * (i % 30)} for i in range(150)]
        await kb.ingest_documents(a, bucket="a")
        await kb.ingest_documents(b, bucket="b")
        terms = content_terms("disk warning fan")
        tuning = dataclasses.replace(kb.config.text_tuning, text_probe=probe)
        whole = await kb.index.text_candidates(terms, KBScope(), 1000, tuning)
        with sqlite3.connect(kb.index.location) as db:
            rows = db.execute("SELECT c.id, d.bucket FROM kb_chunks c JOIN kb_documents d ON d.id = c.doc_id")
            bucket_of = dict(rows.fetchall())
        expected = [(c, s) for c, s in zip(whole.ids, whole.scores, strict=True) if bucket_of[c] == "a"]
        assert [bucket_of[c] for c in whole.ids[:10]].count("a") < 5  # bucket b leads: the lookup must go on
        for limit in (3, 10, 40):
            probed = await kb.index.text_candidates(terms, KBScope(bucket="a"), limit, tuning)
            assert list(zip(probed.ids, probed.scores, strict=True)) == expected[:limit], (probe, limit)
            if probe >= whole.total:
                assert probed.total == len(expected)
    finally:
        await kb.aclose()


async def test_a_word_written_clipped_or_in_full_finds_the_other_form(tmp_path: Path) -> None:
    # Documentation writes "config" where a question says "configuration" (and the
    # reverse); the page that says it first in the other form is found by it, in BM25
    # alone too, and a name holding the word ("npm_config_cache") is no such word.
    base = await open_kb_file(tmp_path / "kb.db", HashingEmbedder(dim=256))
    try:
        await base.ingest_documents([
            {"id": "npmrc", "title": "npmrc", "text": "npm gets its config settings from the command line and files."},
            {"id": "colours", "title": "colours", "text": "npm settings: the colours npm writes its settings in."},
            {"id": "repository", "title": "source", "text": "The repository field says where the code lives."},
            {"id": "fields", "title": "fields", "text": "Which field is which: every field of the manifest."},
        ])
        for mode in ("text", "hybrid"):
            res = await base.search("Where does npm get its configuration settings from?", mode=mode)  # type: ignore[arg-type]
            assert res.hits[0].doc_id == "npmrc", (mode, [(h.doc_id, h.score) for h in res.hits])
            res = await base.search("which repo field", mode=mode)  # type: ignore[arg-type]
            assert res.hits[0].doc_id == "repository", (mode, [(h.doc_id, h.score) for h in res.hits])
    finally:
        await base.aclose()


async def test_a_readers_see_finds_what_documentation_shows_lists_displays_or_prints(tmp_path: Path) -> None:
    # A reader asks to "see" what a command shows or lists, while documentation writes
    # "see" for pointers to other pages ("See also", "see `npm help config`"): searched
    # alone, the reader's word found the pointers, never the page that does it (round 29,
    # "how do I see all the npm settings that are currently in effect?").
    base = await open_kb_file(tmp_path / "kb.db", HashingEmbedder(dim=256))
    try:
        await base.ingest_documents([
            {"id": "config", "title": "config", "text": "list: Show all the config settings in effect."},
            {"id": "pointer", "title": "pointer", "text": "See also: see the settings page and see the folders page."},
            {"id": "folders", "title": "folders", "text": "npm puts the settings file in your home folder."},
        ])
        for mode in ("text", "hybrid"):
            res = await base.search("How do I see all the settings in effect?", mode=mode)  # type: ignore[arg-type]
            assert res.hits[0].doc_id == "config", (mode, [(h.doc_id, h.score) for h in res.hits])
    finally:
        await base.aclose()


def test_reader_terms_offer_the_words_documentation_writes_for_see() -> None:
    from knowledge.query_terms import related_terms
    from knowledge.word_forms import reader_terms

    assert reader_terms("How can I see which tokens I have?") == {
        "show": "see",
        "list": "see",
        "display": "see",
        "print": "see",
    }
    # A word inside a name is part of the name; other verbs are searched as written.
    assert reader_terms("open see-also.md and npm_see_all; remove a key") == {}
    # A form the query says itself stays its own term.
    related = related_terms("How do I list and see packages?")
    assert "list" not in related
    assert related["show"] == "see"


def test_reader_terms_read_see_only_as_the_english_verb_in_plain_text() -> None:
    # A capitalised "See" inside a sentence is a noun (German "der See", the lake), and a
    # backticked `see` is a code identifier: neither is the reader's verb, so neither is
    # searched as "show", "list", "display", "print" (review of 781dc28).
    from knowledge.query_terms import related_terms
    from knowledge.word_forms import reader_terms

    assert reader_terms("Wie tief ist der See?") == {}
    assert reader_terms("Wo liegt der See Genezareth?") == {}
    assert reader_terms("What does the `see` option of the linter do?") == {}
    assert "show" not in related_terms("Wie tief ist der See im Winter?")
    # The verb still counts: in lower case, first in a sentence, or after a code span.
    verb = {"show": "see", "list": "see", "display": "see", "print": "see"}
    assert reader_terms("See which tokens my account has?") == verb
    assert reader_terms("I ran `npm token`. See which tokens it has?") == verb
    assert reader_terms("After `npm login`, how do I see my tokens?") == verb


def test_reader_terms_read_see_as_the_verb_where_a_sentence_opens_with_marks() -> None:
    # A list item, a quote, a parenthesis, a block quote or emphasis opens a sentence
    # with marks before its first word: "- See my tokens" is the verb as much as "See
    # my tokens" (review of e03d371, which read only a bare sentence start). A capital
    # after such a mark inside a sentence is still the noun.
    from knowledge.word_forms import reader_terms

    verb = {"show": "see", "list": "see", "display": "see", "print": "see"}
    assert reader_terms("How do I:\n- See the installed packages?") == verb
    assert reader_terms("Two things:\n* See my tokens\n* remove one") == verb
    assert reader_terms("2) See my tokens") == verb
    assert reader_terms('"See my tokens" is what I ask.') == verb
    assert reader_terms("(See my tokens.)") == verb
    assert reader_terms("> See my tokens") == verb
    assert reader_terms("**See** my tokens") == verb
    assert reader_terms("¿See?") == verb
    assert reader_terms("Wo liegt der „See“?") == {}
    assert reader_terms("Wie tief ist der (See)?") == {}
