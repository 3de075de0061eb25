"""Saved external answers found by meaning: the vectors of their questions, answers and keywords.

An answer fetched from Perplexity once should be found by the next related question
without a second paid call (seed 002, SC-006). Keyword terms catch rewordings that keep
the words ("applications of quantum computing" vs the keyword "quantum computing
applications"); this module catches the ones that change them ("what are quantum
computers used for", "removing the global interpreter lock" vs "GIL removal"). Each
saved result contributes two vectors, the query it was fetched with (``question``) and
its answer text (``answer``), and each keyword one (``keyword``), all embedded with the
knowledge base's embedder and kept by the storage engine (``ExternalVectorStore``).

Here they live in one float32 matrix, scanned with the query vector beside the KB's own
chunk scan (the query vector comes from the KB's cache, so the query is embedded once).
Rows are loaded by id: at start-up everything, later only what is new (other processes
write too), at most once per ``refresh_interval_s``; this process's own writes are added
at once. A cosine becomes evidence on 0..1 through the embedder's ``SimilarityScale``:
below ``floor`` unrelated texts live, at ``full`` and above the same topic is certain.
Their values were read off the labelled paraphrases of ``bench/keyword_reuse.py``.

A pruned keyword's vector stays: it leads nowhere (the keyword half maps keyword
matches to answers through live keywords only) and is reused if the keyword returns.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from storage.interfaces import ExternalVectorStore
from storage.keyword_records import ExternalResult, ExternalVectorKind, NewExternalVector
from toolindex.embedder import Embedder, EmbeddingError, EmbedTask

log = logging.getLogger(__name__)

F32 = npt.NDArray[np.float32]
QueryEmbedder = Callable[[str], Awaitable[npt.NDArray[np.floating]]]

#: Rows scanned inline on the event loop; a bigger matrix is scanned in a worker thread.
_INLINE_ROWS = 50_000
_LOAD_BATCH = 2_000
_QUERY_CACHE = 256


@dataclass(frozen=True, slots=True)
class SimilarityScale:
    """Cosine → evidence on 0..1 for one embedder: 0 at or below ``floor`` (where
    unrelated texts score), 1 at or above ``full`` (a paraphrase of the same question),
    linear between."""

    floor: float
    full: float

    def evidence(self, cosines: F32) -> F32:
        span = max(self.full - self.floor, 1e-6)
        return np.clip((cosines - self.floor) / span, 0.0, 1.0).astype(np.float32, copy=False)


#: Per embedder kind (``Embedder.name``). hashing: paraphrases that share words score
#: 0.3-0.9, unrelated questions up to ~0.35; MiniLM: paraphrases 0.45-0.95, unrelated up
#: to ~0.45 (bench/keyword_reuse.py). Gemini and nomic place unrelated text higher.
SIMILARITY_SCALES: Mapping[str, SimilarityScale] = MappingProxyType(
    {"hashing": SimilarityScale(0.3, 0.7), "minilm": SimilarityScale(0.35, 0.75)}
)
DEFAULT_SCALE = SimilarityScale(0.5, 0.85)


@dataclass(frozen=True, slots=True)
class SemanticMatches:
    """Evidence on 0..1 that a query asks what a saved result answers (``results``, by
    result id) or what a keyword names (``keywords``, by keyword key). Only positive
    evidence is listed."""

    results: dict[str, float] = field(default_factory=dict)
    keywords: dict[str, float] = field(default_factory=dict)


class _Rows:
    """A growable float32 matrix of unit rows, each labelled (kind, ref). Mutated on the
    event loop only; a scan works on a view of the first ``n`` rows, which appends and
    growth never change."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.matrix = np.zeros((64, dim), np.float32)
        self.n = 0
        self.kinds: list[ExternalVectorKind] = []
        self.refs: list[str] = []
        self._row_of: dict[tuple[str, str], int] = {}

    def __contains__(self, label: tuple[str, str]) -> bool:
        return label in self._row_of

    def add(self, kind: ExternalVectorKind, ref: str, vector: npt.ArrayLike) -> bool:
        vec = np.asarray(vector, dtype=np.float32).reshape(-1)
        if vec.shape[0] != self.dim or (kind, ref) in self._row_of:
            return False
        norm = float(np.linalg.norm(vec))
        if not np.isfinite(norm) or norm == 0.0:
            return False
        if self.n == len(self.matrix):
            grown = np.zeros((len(self.matrix) * 2, self.dim), np.float32)
            grown[: self.n] = self.matrix[: self.n]
            self.matrix = grown
        self.matrix[self.n] = vec / norm
        self._row_of[(kind, ref)] = self.n
        self.kinds.append(kind)
        self.refs.append(ref)
        self.n += 1
        return True


class SavedAnswerVectors:
    """The semantic half of the saved-answer lookup (``agenttools.rag.keywords.KeywordIndex``
    does the keyword half and combines both)."""

    def __init__(
        self,
        store: ExternalVectorStore,
        embedder: Embedder,
        *,
        embed_query: QueryEmbedder | None = None,
        scale: SimilarityScale | None = None,
        refresh_interval_s: float = 1.0,
        max_answer_chars: int = 2_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._embedder = embedder
        self._embed_query = embed_query
        self.scale = scale or SIMILARITY_SCALES.get(embedder.name, DEFAULT_SCALE)
        self._refresh_interval_s = refresh_interval_s
        self._max_answer_chars = max_answer_chars
        self._clock = clock
        self._rows = _Rows(embedder.dim)
        self._last_id = 0
        self._last_refresh: float | None = None
        self._refresh_lock = asyncio.Lock()
        self._query_cache: OrderedDict[str, F32] = OrderedDict()

    @property
    def embed_key(self) -> str:
        """``name:model@dim``: the vector space the stored rows belong to (a model whose
        output size is configurable, like Gemini's, is another space at another size,
        so everything is embedded again when it changes)."""
        return f"{self._embedder.name}:{self._embedder.model}@{self._embedder.dim}"

    @property
    def size(self) -> int:
        return self._rows.n

    # ---------------------------------------------------------------- loading

    async def refresh(self, *, force: bool = False) -> int:
        """Load the rows stored since the last load (by any process); returns how many.
        Skipped within ``refresh_interval_s`` of the last one unless ``force``; a
        refresh already under way is not waited for."""
        now = self._clock()
        if not force and self._last_refresh is not None and now - self._last_refresh < self._refresh_interval_s:
            return 0
        if self._refresh_lock.locked() and not force:
            return 0
        async with self._refresh_lock:
            added = 0
            while True:
                batch = await self._store.after(self.embed_key, self._rows.dim, self._last_id, _LOAD_BATCH)
                for row in batch:
                    added += self._rows.add(row.kind, row.ref, row.vector)
                    self._last_id = max(self._last_id, row.id)
                if len(batch) < _LOAD_BATCH:
                    break
            self._last_refresh = self._clock()
            return added

    # ---------------------------------------------------------------- writing

    async def remember_result(self, result: ExternalResult) -> None:
        """Embed and store the question and the answer of a newly saved result."""
        await self._embed_and_store(
            [
                ("question", result.id, result.query, "query"),
                ("answer", result.id, self._answer_text(result), "document"),
            ]
        )

    async def remember_keywords(self, keywords: Mapping[str, str]) -> None:
        """Embed and store keywords (key -> display form) that have no vector yet."""
        new = {key: display for key, display in keywords.items() if ("keyword", key) not in self._rows}
        await self._embed_and_store([("keyword", key, display, "query") for key, display in new.items()])

    async def backfill(self, *, batch: int = 64, limit: int = 100_000) -> int:
        """Embed what was stored without a vector of this embedder: results and keywords
        saved before this feature, under another embedder, or while embedding failed.
        Returns how many texts were embedded."""
        await self.refresh(force=True)
        done = 0
        while done < limit:
            results = await self._store.unembedded_results(self.embed_key, batch)
            if not results:
                break
            for result in results:
                await self.remember_result(result)
                done += 2
        while done < limit:
            keywords = await self._store.unembedded_keywords(self.embed_key, batch)
            if not keywords:
                break
            await self._embed_and_store([("keyword", k, d, "query") for k, d in keywords.items()])
            done += len(keywords)
        return done

    def _answer_text(self, result: ExternalResult) -> str:
        return result.answer[: self._max_answer_chars]

    async def _embed_and_store(self, items: Sequence[tuple[ExternalVectorKind, str, str, EmbedTask]]) -> None:
        if not items:
            return
        rows: list[NewExternalVector] = []
        for task in ("query", "document"):
            group = [(kind, ref, text) for kind, ref, text, t in items if t == task]
            if not group:
                continue
            texts = [text[: self._embedder.max_chars] or ref for _, ref, text in group]
            matrix = await self._embedder.embed_batch(texts, task=task)
            rows.extend(
                NewExternalVector(kind, ref, np.asarray(vec, np.float32))
                for (kind, ref, _), vec in zip(group, matrix, strict=True)
            )
        await self._store.save(self.embed_key, rows)
        for row in rows:
            self._rows.add(row.kind, row.ref, row.vector)

    # ---------------------------------------------------------------- reading

    async def search(self, text: str) -> SemanticMatches:
        """Evidence per saved result and per keyword that ``text`` asks about them."""
        try:
            await self.refresh()
        except Exception:  # stale rows are better than no lookup
            log.warning("saved-answer vectors could not be refreshed", exc_info=True)
        rows = self._rows
        n = rows.n
        if n == 0 or not text.strip():
            return SemanticMatches()
        query = await self._query_vector(text)
        view = rows.matrix[:n]
        if n > _INLINE_ROWS:
            cosines = await asyncio.get_running_loop().run_in_executor(None, np.dot, view, query)
        else:
            cosines = view @ query
        evidence = self.scale.evidence(cosines)
        out = SemanticMatches()
        for i in np.flatnonzero(evidence > 0.0).tolist():
            bucket = out.keywords if rows.kinds[i] == "keyword" else out.results
            ref = rows.refs[i]
            value = float(evidence[i])
            if value > bucket.get(ref, 0.0):
                bucket[ref] = value
        return out

    async def _query_vector(self, text: str) -> F32:
        if self._embed_query is not None:
            vec = np.asarray(await self._embed_query(text), np.float32).reshape(-1)
        else:
            cached = self._query_cache.get(text)
            if cached is not None:
                self._query_cache.move_to_end(text)
                return cached
            vec = np.asarray(await self._embedder.embed(text[: self._embedder.max_chars], task="query"), np.float32)
            vec = vec.reshape(-1)
            self._query_cache[text] = vec
            if len(self._query_cache) > _QUERY_CACHE:
                self._query_cache.popitem(last=False)
        if vec.shape[0] != self._rows.dim:
            raise EmbeddingError(f"query vector has {vec.shape[0]} dimensions, saved answers have {self._rows.dim}")
        norm = float(np.linalg.norm(vec))
        return vec / norm if norm > 0 else vec


__all__ = ["DEFAULT_SCALE", "SIMILARITY_SCALES", "SavedAnswerVectors", "SemanticMatches", "SimilarityScale"]
