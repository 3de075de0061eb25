"""ToolIndex: ranking rules, build failures, the on-disk vector cache and the query LRU."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from toolindex import (
    EmbeddingError,
    EmbeddingSpace,
    HashingEmbedder,
    IndexBuildError,
    QueryCache,
    ToolIndex,
    ToolMatch,
    VectorCache,
)
from toolindex.embedder import Embedder, EmbedTask, Matrix, Vector


class ScriptedEmbedder:
    """An Embedder test double: vectors from a function, every call recorded.

    ``rows_fn(texts) -> raw rows`` lets a test return anything (short, NaN, ragged)
    to check that the index, not the double, enforces the contract.
    """

    name = "scripted"
    max_chars = 1_000

    def __init__(
        self,
        dim: int = 8,
        *,
        model: str = "scripted-v1",
        rows_fn: Callable[[list[str]], object] | None = None,
        raises: BaseException | None = None,
    ) -> None:
        self.dim = dim
        self.model = model
        self._rows_fn = rows_fn
        self._raises = raises
        self.batch_calls: list[list[str]] = []
        self.query_calls: list[str] = []
        self._inner = HashingEmbedder(dim=dim)

    async def embed(self, text: str, *, task: EmbedTask = "query") -> Vector:
        self.query_calls.append(text)
        if self._raises is not None:
            raise self._raises
        if self._rows_fn is not None:
            return np.asarray(self._rows_fn([text]), dtype=np.float32)[0]
        return await self._inner.embed(text, task=task)

    async def embed_batch(self, texts: list[str], *, task: EmbedTask = "document") -> Matrix:
        self.batch_calls.append(list(texts))
        if self._raises is not None:
            raise self._raises
        if self._rows_fn is not None:
            return self._rows_fn(texts)  # type: ignore[return-value]
        return await self._inner.embed_batch(texts, task=task)

    async def aclose(self) -> None:
        return None


def unit(*values: float) -> np.ndarray:
    v = np.asarray(values, dtype=np.float32)
    return v / np.linalg.norm(v)


def names_of(matches: Sequence[ToolMatch]) -> list[str]:
    return [m.name for m in matches]


ITEMS = [
    ("list_workflow_rules", "list_workflow_rules — List the automation rules | which rules are active"),
    ("create_alert", "create_alert — Create an alert that notifies people | alert me when stock is low"),
    ("list_my_alerts", "list_my_alerts — Show the alerts assigned to me | what alerts do I have"),
    ("get_table_config", "get_table_config — Read a saved table configuration | open the orders table config"),
]


# --- ranking ------------------------------------------------------------------------


def test_rank_orders_by_descending_cosine() -> None:
    index = ToolIndex.from_vectors(["a", "b", "c"], [[1, 0, 0], [0.8, 0.6, 0], [0, 0, 1]])
    matches = index.rank([1, 0, 0], top_k=10)
    assert names_of(matches) == ["a", "b", "c"]
    assert [m.score for m in matches] == pytest.approx([1.0, 0.8, 0.0], abs=1e-6)


def test_both_sides_are_normalised() -> None:
    raw = np.array([[3.0, 4.0, 0.0], [0.0, 10.0, 0.0], [-2.0, 0.0, 0.0]], dtype=np.float32)
    index = ToolIndex.from_vectors(["x", "y", "z"], raw)
    assert np.allclose(np.linalg.norm(index.matrix, axis=1), 1.0, atol=1e-6)
    query = np.array([0.2, 0.1, 0.0], dtype=np.float32)
    plain = index.rank(query, top_k=0)
    scaled = index.rank(query * 10, top_k=0)
    assert plain == scaled
    # Cosine, not raw dot product: every score lies in [-1, 1] whatever the scale.
    assert all(-1.0 <= m.score <= 1.0 for m in scaled)
    assert scaled[0] == ToolMatch("x", pytest.approx(float(unit(3, 4, 0) @ unit(0.2, 0.1, 0)), abs=1e-6))


def test_allowlist_restricts_and_ignores_unknown_names() -> None:
    index = ToolIndex.from_vectors(["a", "b", "c"], [[1, 0], [0.9, 0.1], [0.5, 0.5]])
    assert names_of(index.rank([1, 0], allowlist={"b", "c", "not_a_tool"})) == ["b", "c"]
    assert names_of(index.rank([1, 0], allowlist=["c"])) == ["c"]
    # A list, a set and a frozenset of the same names behave the same (and are cached).
    assert index.rank([1, 0], allowlist=["c", "b"]) == index.rank([1, 0], allowlist=frozenset({"b", "c"}))


def test_empty_allowlist_matches_nothing_and_none_matches_everything() -> None:
    index = ToolIndex.from_vectors(["a", "b"], [[1, 0], [0, 1]])
    assert index.rank([1, 0], allowlist=[]) == []
    assert names_of(index.rank([1, 0], allowlist=None)) == ["a", "b"]


def test_min_score_keeps_only_scores_at_or_above_it() -> None:
    index = ToolIndex.from_vectors(["a", "b", "c"], [[1, 0], [0.6, 0.8], [-1, 0]])
    assert names_of(index.rank([1, 0], min_score=0.6, top_k=0)) == ["a", "b"]
    assert names_of(index.rank([1, 0], min_score=0.99, top_k=0)) == ["a"]
    assert index.rank([1, 0], min_score=1.5) == []


def test_zero_or_negative_min_score_disables_the_threshold() -> None:
    index = ToolIndex.from_vectors(["a", "b"], [[1, 0], [-1, 0]])
    for threshold in (0.0, -0.5):
        matches = index.rank([1, 0], min_score=threshold, top_k=0)
        assert names_of(matches) == ["a", "b"]
        assert matches[1].score == pytest.approx(-1.0)


def test_ties_are_broken_by_name_ascending() -> None:
    vec = [0.3, 0.4, 0.5]
    index = ToolIndex.from_vectors(["delta", "alpha", "charlie", "bravo"], [vec, vec, vec, [-1, 0, 0]])
    assert names_of(index.rank(vec, top_k=0)) == ["alpha", "charlie", "delta", "bravo"]
    assert names_of(index.rank(vec, top_k=2)) == ["alpha", "charlie"]


def test_ties_at_the_top_k_cut_follow_names_on_the_partition_path() -> None:
    # Enough rows for argpartition; the best score is shared by many rows at random positions.
    rng = np.random.default_rng(7)
    n = 500
    names = [f"tool_{i:03d}" for i in rng.permutation(n)]
    vectors = rng.standard_normal((n, 16)).astype(np.float32)
    best = rng.standard_normal(16).astype(np.float32)
    tied = rng.choice(n, size=40, replace=False)
    vectors[tied] = best * rng.uniform(0.5, 3.0, size=(40, 1)).astype(np.float32)  # scale must not matter
    index = ToolIndex.from_vectors(names, vectors)
    expected = sorted(names[i] for i in tied)[:6]
    assert names_of(index.rank(best, top_k=6)) == expected
    assert all(m.score == pytest.approx(1.0, abs=1e-6) for m in index.rank(best, top_k=6))


def test_partition_path_agrees_with_a_full_sort() -> None:
    rng = np.random.default_rng(11)
    n = 2_000
    names = [f"t{i}" for i in range(n)]
    index = ToolIndex.from_vectors(names, rng.standard_normal((n, 32)))
    query = rng.standard_normal(32)
    everything = index.rank(query, top_k=0)
    assert len(everything) == n
    scores = [m.score for m in everything]
    assert scores == sorted(scores, reverse=True)
    assert index.rank(query, top_k=25) == everything[:25]
    allowed = set(names[::7])
    assert index.rank(query, top_k=9, allowlist=allowed) == [m for m in everything if m.name in allowed][:9]


def test_top_k_larger_than_n_or_not_positive_returns_all() -> None:
    index = ToolIndex.from_vectors(["a", "b", "c"], np.eye(3))
    for top_k in (3, 4, 100, 0, -1):
        assert len(index.rank([1, 1, 1], top_k=top_k)) == 3
    assert len(index.rank([1, 1, 1], top_k=2)) == 2


def test_zero_query_vector_scores_zero_everywhere() -> None:
    index = ToolIndex.from_vectors(["b", "a"], [[1, 0], [0, 1]])
    assert index.rank([0, 0]) == [ToolMatch("a", 0.0), ToolMatch("b", 0.0)]


def test_rank_rejects_a_query_of_the_wrong_length_or_nan() -> None:
    index = ToolIndex.from_vectors(["a"], [[1, 0, 0]])
    with pytest.raises(ValueError):
        index.rank([1, 0])
    with pytest.raises(ValueError):
        index.rank([np.nan, 0, 0])


def test_index_rejects_duplicate_names() -> None:
    with pytest.raises(IndexBuildError, match="duplicate"):
        ToolIndex.from_vectors(["a", "a"], [[1, 0], [0, 1]])


# --- building -----------------------------------------------------------------------


async def test_empty_index_builds_without_embedding_and_searches_to_nothing() -> None:
    embedder = ScriptedEmbedder()
    index = await ToolIndex.build([], embedder)
    assert len(index) == 0 and index.names == ()
    assert index.rank(np.ones(8)) == []
    result = await index.search("anything")
    assert result.matches == []
    assert embedder.batch_calls == [] and embedder.query_calls == []


async def test_build_embeds_documents_once_and_keeps_order() -> None:
    embedder = ScriptedEmbedder(dim=64)
    index = await ToolIndex.build(ITEMS, embedder)
    assert index.names == tuple(n for n, _ in ITEMS)
    assert index.dim == 64 and len(index) == 4
    assert embedder.batch_calls == [[t for _, t in ITEMS]]


async def test_identical_texts_are_embedded_once() -> None:
    embedder = ScriptedEmbedder()
    index = await ToolIndex.build([("a", "same text"), ("b", "same text"), ("c", "other")], embedder)
    assert embedder.batch_calls == [["same text", "other"]]
    assert np.array_equal(index.matrix[0], index.matrix[1])


@pytest.mark.parametrize(
    ("rows_fn", "reason"),
    [
        (lambda texts: np.ones((len(texts) - 1, 8), dtype=np.float32), "expected 4 vectors, got 3"),
        (lambda texts: np.ones((len(texts) + 1, 8), dtype=np.float32), "expected 4 vectors, got 5"),
        (lambda texts: np.ones((len(texts), 7), dtype=np.float32), "length 8, got 7"),
        (lambda texts: np.full((len(texts), 8), np.nan, dtype=np.float32), "NaN"),
        (lambda texts: np.vstack([np.ones((len(texts) - 1, 8)), np.full((1, 8), np.inf)]), "NaN or infinite"),
        (lambda texts: np.vstack([np.ones((len(texts) - 1, 8)), np.zeros((1, 8))]), "all zeros"),
        (lambda texts: [[1.0] * 8, [1.0] * 8, [1.0] * 3, [1.0] * 8], "rectangular"),
        (lambda texts: None, "vectors"),
    ],
    ids=["short", "long", "wrong-dim", "nan", "inf", "zero", "ragged", "none"],
)
async def test_build_fails_whole_on_a_defective_result(rows_fn: Callable[[list[str]], object], reason: str) -> None:
    with pytest.raises(IndexBuildError, match=reason):
        await ToolIndex.build(ITEMS, ScriptedEmbedder(dim=8, rows_fn=rows_fn))


@pytest.mark.parametrize("error", [EmbeddingError("HTTP 429"), RuntimeError("bug"), TimeoutError()])
async def test_build_fails_when_the_embedder_raises(error: BaseException) -> None:
    with pytest.raises(IndexBuildError):
        await ToolIndex.build(ITEMS, ScriptedEmbedder(raises=error))


async def test_build_fails_on_duplicate_tool_names() -> None:
    embedder = ScriptedEmbedder()
    with pytest.raises(IndexBuildError, match="duplicate"):
        await ToolIndex.build([("a", "x"), ("a", "y")], embedder)
    assert embedder.batch_calls == []


# --- on-disk vector cache -----------------------------------------------------------


async def test_restart_with_unchanged_tools_makes_no_embedding_call(tmp_path: Path) -> None:
    first = ScriptedEmbedder(dim=32)
    built = await ToolIndex.build(ITEMS, first, cache=VectorCache(tmp_path))
    assert len(first.batch_calls) == 1

    restarted = ScriptedEmbedder(dim=32)  # a new process: new embedder, new cache object
    again = await ToolIndex.build(ITEMS, restarted, cache=VectorCache(tmp_path))
    assert restarted.batch_calls == []
    assert again.names == built.names
    assert np.array_equal(again.matrix, built.matrix)


async def test_only_changed_texts_are_re_embedded(tmp_path: Path) -> None:
    await ToolIndex.build(ITEMS, ScriptedEmbedder(dim=32), cache=VectorCache(tmp_path))
    changed = list(ITEMS)
    changed[2] = ("list_my_alerts", "list_my_alerts — a rewritten description")
    changed.append(("new_tool", "new_tool — brand new"))
    embedder = ScriptedEmbedder(dim=32)
    index = await ToolIndex.build(changed, embedder, cache=VectorCache(tmp_path))
    assert embedder.batch_calls == [[changed[2][1], changed[4][1]]]
    fresh = await ToolIndex.build(changed, ScriptedEmbedder(dim=32))
    assert np.allclose(index.matrix, fresh.matrix, atol=1e-6)

    # The rewritten cache now covers the new catalog completely.
    third = ScriptedEmbedder(dim=32)
    await ToolIndex.build(changed, third, cache=VectorCache(tmp_path))
    assert third.batch_calls == []


@pytest.mark.parametrize(("model", "dim"), [("scripted-v2", 32), ("scripted-v1", 16)])
async def test_another_model_or_dimension_misses_the_cache(tmp_path: Path, model: str, dim: int) -> None:
    await ToolIndex.build(ITEMS, ScriptedEmbedder(dim=32), cache=VectorCache(tmp_path))
    other = ScriptedEmbedder(dim=dim, model=model)
    index = await ToolIndex.build(ITEMS, other, cache=VectorCache(tmp_path))
    assert len(other.batch_calls) == 1 and index.dim == dim


async def test_a_corrupt_cache_file_is_ignored(tmp_path: Path) -> None:
    cache = VectorCache(tmp_path)
    embedder = ScriptedEmbedder(dim=32)
    await ToolIndex.build(ITEMS, embedder, cache=cache)
    cache.path_for(EmbeddingSpace.of(embedder)).write_bytes(b"not an npz file")
    again = ScriptedEmbedder(dim=32)
    index = await ToolIndex.build(ITEMS, again, cache=VectorCache(tmp_path))
    assert len(again.batch_calls) == 1 and len(index) == 4


async def test_a_failed_build_leaves_the_cache_untouched(tmp_path: Path) -> None:
    failing = ScriptedEmbedder(dim=32, raises=EmbeddingError("down"))
    with pytest.raises(IndexBuildError):
        await ToolIndex.build(ITEMS, failing, cache=VectorCache(tmp_path))
    assert list(tmp_path.iterdir()) == []


async def test_unknown_dim_embedder_reuses_cached_vectors(tmp_path: Path) -> None:
    """An Ollama embedder starts with dim 0; the cached dimension is accepted."""
    learned = ScriptedEmbedder(dim=32)
    await ToolIndex.build(ITEMS, learned, cache=VectorCache(tmp_path))
    unknown = ScriptedEmbedder(dim=32)
    unknown.dim = 0
    index = await ToolIndex.build(ITEMS, unknown, cache=VectorCache(tmp_path))
    assert unknown.batch_calls == [] and index.dim == 32


async def test_unknown_dim_embedder_that_changed_dimension_re_embeds_everything(tmp_path: Path) -> None:
    await ToolIndex.build(ITEMS, ScriptedEmbedder(dim=32), cache=VectorCache(tmp_path))
    swapped = ScriptedEmbedder(dim=16)
    swapped.dim = 0  # learns its dimension from replies, like OllamaEmbedder
    changed = [*ITEMS[:3], ("get_table_config", "get_table_config — reworded")]
    index = await ToolIndex.build(changed, swapped, cache=VectorCache(tmp_path))
    assert swapped.batch_calls == [[changed[3][1]], [t for _, t in changed]]
    assert index.dim == 16
    again = ScriptedEmbedder(dim=16)
    again.dim = 0
    await ToolIndex.build(changed, again, cache=VectorCache(tmp_path))
    assert again.batch_calls == []


# --- search and the query LRU ---------------------------------------------------------


async def test_search_with_the_hashing_embedder_finds_the_obvious_tool() -> None:
    index = await ToolIndex.build(ITEMS, HashingEmbedder())
    result = await index.search("what alerts do I have right now?", top_k=2)
    assert result.names[0] == "list_my_alerts"
    result = await index.search("open the table configuration for orders", top_k=1)
    assert result.names == ["get_table_config"]
    assert result.embed_ms >= 0 and result.rank_ms >= 0


async def test_search_honours_allowlist_top_k_and_threshold() -> None:
    index = await ToolIndex.build(ITEMS, HashingEmbedder())
    result = await index.search("alerts", allowlist={"create_alert", "get_table_config"}, top_k=6)
    assert set(result.names) <= {"create_alert", "get_table_config"}
    assert result.names[0] == "create_alert"
    strict = await index.search("alerts", min_score=0.99)
    assert strict.matches == []


async def test_repeated_queries_are_served_from_the_lru() -> None:
    embedder = ScriptedEmbedder(dim=16)
    index = await ToolIndex.build(ITEMS, embedder)
    first = await index.search("show my alerts")
    second = await index.search("show my alerts")
    assert embedder.query_calls == ["show my alerts"]
    assert (first.query_cached, second.query_cached) == (False, True)
    assert first.matches == second.matches


async def test_query_lru_evicts_the_least_recently_used() -> None:
    embedder = ScriptedEmbedder(dim=16)
    index = await ToolIndex.build(ITEMS, embedder, query_cache_size=2)
    for query in ("q1", "q2", "q1", "q3"):  # q1 refreshed, so q2 is the one evicted
        await index.search(query)
    assert embedder.query_calls == ["q1", "q2", "q3"]
    await index.search("q1")
    await index.search("q2")
    assert embedder.query_calls == ["q1", "q2", "q3", "q2"]
    assert len(index.query_cache) == 2


async def test_query_caches_belong_to_their_index() -> None:
    embedder = ScriptedEmbedder(dim=16)
    one = await ToolIndex.build(ITEMS, embedder)
    two = await ToolIndex.build(ITEMS, embedder)
    await one.search("hello")
    await two.search("hello")
    assert embedder.query_calls == ["hello", "hello"]


def test_query_cache_entries_are_read_only_copies() -> None:
    cache = QueryCache(maxsize=1)
    key = QueryCache.key(EmbeddingSpace("e", "m", 2), "query", "t")
    original = np.array([1.0, 0.0], dtype=np.float32)
    cache.put(key, original)
    original[0] = 5.0
    stored = cache.get(key)
    assert stored is not None and stored[0] == 1.0
    with pytest.raises(ValueError):
        stored[0] = 2.0


async def test_search_failures_surface_as_embedding_error_only() -> None:
    index = await ToolIndex.build(ITEMS, ScriptedEmbedder(dim=8))
    broken = ScriptedEmbedder(dim=8, raises=RuntimeError("boom"))
    failing = ToolIndex(index.names, index.matrix, broken)
    with pytest.raises(EmbeddingError, match="boom"):
        await failing.search("q")
    wrong_dim = ToolIndex(index.names, index.matrix, ScriptedEmbedder(dim=8, rows_fn=lambda t: np.ones((1, 5))))
    with pytest.raises(EmbeddingError, match="length"):
        await wrong_dim.search("q")
    nan = ToolIndex(index.names, index.matrix, ScriptedEmbedder(dim=8, rows_fn=lambda t: np.full((1, 8), np.nan)))
    with pytest.raises(EmbeddingError, match="NaN"):
        await nan.search("q")
    with pytest.raises(EmbeddingError):
        await ToolIndex(index.names, index.matrix, None).search("q")


async def test_large_matrices_rank_off_the_event_loop() -> None:
    threads: list[str] = []

    class Recording(ToolIndex):
        # search() ranks its (already unit) query vector through _rank_unit.
        def _rank_unit(self, *args: object, **kwargs: object) -> list[ToolMatch]:  # type: ignore[override]
            threads.append(threading.current_thread().name)
            return super()._rank_unit(*args, **kwargs)  # type: ignore[arg-type]

    base = await ToolIndex.build(ITEMS, HashingEmbedder(dim=64))
    embedder = HashingEmbedder(dim=64)
    inline = Recording(base.names, base.matrix, embedder)
    offloaded = Recording(base.names, base.matrix, embedder, offload_elements=1)
    a = await inline.search("alerts for me")
    b = await offloaded.search("alerts for me")
    assert a.matches == b.matches
    main = threading.current_thread().name
    assert threads[0] == main and threads[1] != main


def test_embedders_satisfy_the_protocol() -> None:
    assert isinstance(HashingEmbedder(), Embedder)
    assert isinstance(ScriptedEmbedder(), Embedder)
