"""Plain data types of the knowledge base: what goes in, what comes out.

They are dataclasses (not dicts) so the tool layer and the HTTP routes get typed fields,
and each has a ``to_dict`` for JSON so callers never hand-build wire shapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, TypeAlias

from storage.kb_records import KB_FIELD_TYPES, KBTextTuning

FieldType: TypeAlias = Literal["TEXT", "INTEGER", "REAL", "DATE", "BOOLEAN"]
SearchMode: TypeAlias = Literal["hybrid", "text", "semantic"]

FIELD_TYPES: frozenset[str] = KB_FIELD_TYPES


@dataclass(slots=True)
class DocumentIn:
    """A document handed over directly (HTTP ``POST /v1/kb/documents`` or a parsed file).

    ``id`` is optional: without one a stable id is derived from the title and text, so
    posting the same document twice is a skip, not a duplicate.
    """

    text: str
    title: str = ""
    id: str | None = None
    source: str = "api"
    url: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    #: ``text`` is pages separated by ``knowledge.chunking.PAGE_BREAK`` (a PDF): chunks
    #: then record the pages they come from, and citations can name them.
    paged: bool = False
    #: The absolute path of the file it was read from (``source`` is what readers see:
    #: a path relative to the ingested folder). Internal: never shown or returned.
    origin: str | None = None

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> DocumentIn:
        """Build from a JSON object; ``content``/``body`` are accepted as ``text``.

        Raises ``ValueError`` with a readable reason when the object cannot be a document.
        """
        if not isinstance(data, Mapping):
            raise ValueError("a document must be a JSON object")
        text = next((data[k] for k in ("text", "content", "body") if isinstance(data.get(k), str)), None)
        if text is None or not text.strip():
            raise ValueError("missing text: give a non-empty 'text', 'content' or 'body' string")
        meta = data.get("metadata") or {}
        if not isinstance(meta, Mapping):
            raise ValueError("'metadata' must be an object")
        doc_id = data.get("id", data.get("doc_id"))
        if doc_id is not None and not isinstance(doc_id, str):
            doc_id = str(doc_id) if isinstance(doc_id, int) and not isinstance(doc_id, bool) else None
            if doc_id is None:
                raise ValueError("'id' must be a string")
        title = data.get("title")
        url = data.get("url")
        return cls(
            text=text,
            title=title if isinstance(title, str) else "",
            id=doc_id,
            source=str(data.get("source") or "api"),
            url=url if isinstance(url, str) and url else None,
            metadata=dict(meta),
        )


@dataclass(frozen=True, slots=True)
class Rejection:
    """A record or file that was not ingested, and why (``line`` is 1-based when known)."""

    source: str
    reason: str
    line: int | None = None
    #: A short category for counting (``binary``, ``not UTF-8``, ``invalid JSON`` …).
    kind: str = "rejected"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class IngestReport:
    """Counts of one ingestion; ``embed_seconds`` is the share spent in the embedder."""

    added: int = 0
    updated: int = 0
    skipped: int = 0
    deleted: int = 0
    chunks: int = 0
    files: int = 0
    #: Of ``files``, those skipped unopened: size and modification time as stored with
    #: their documents (counted in ``skipped`` by their documents).
    unread_files: int = 0
    rejected: list[Rejection] = field(default_factory=list)
    elapsed_seconds: float = 0.0
    embed_seconds: float = 0.0
    #: Files not read at all, by reason (``unsupported file type .png``, ``symbolic
    #: link``, ``hidden``, ``larger than the size limit`` …), and a few of each.
    skipped_files: dict[str, int] = field(default_factory=dict)
    skipped_examples: list[Rejection] = field(default_factory=list)
    #: Documents stored without vectors because the embedder failed: found by text
    #: search now, queued for re-embedding in the background (``knowledge.backfill``).
    queued_for_embedding: int = 0
    #: Why the embedder failed (when ``queued_for_embedding``).
    embedding_error: str | None = None
    #: Of ``updated``, the documents whose content was unchanged but whose stored chunks
    #: were cut by other chunking rules than today's (``knowledge.chunking.CHUNK_RULES``):
    #: cut again and replaced.
    rechunked: int = 0
    #: Chunks of updated documents that kept the vector their document stored (the same
    #: text, embedder and width: ``knowledge.ingest_reuse``), not embedded again.
    reused_vectors: int = 0

    #: How many files of each skip reason ``skipped_examples`` keeps.
    EXAMPLES_PER_REASON = 20

    def skip_file(self, path: str, reason: str, detail: str = "") -> None:
        seen = self.skipped_files.get(reason, 0)
        self.skipped_files[reason] = seen + 1
        if seen < self.EXAMPLES_PER_REASON:
            self.skipped_examples.append(Rejection(path, detail or reason, kind=reason))

    def rejected_by_kind(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self.rejected:
            counts[r.kind] = counts.get(r.kind, 0) + 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["rejected"] = [r.to_dict() for r in self.rejected]
        d["skipped_examples"] = [r.to_dict() for r in self.skipped_examples]
        return d


@dataclass(slots=True)
class ChunkHit:
    """One retrieved passage. ``score`` is in 0..1; ``text`` is a snippet when asked for."""

    doc_id: str
    chunk_id: str
    title: str
    text: str
    score: float
    metadata: dict[str, Any]
    source: str
    url: str | None
    bucket: str
    position: int
    heading: str = ""
    #: First and last page of the passage in a paged document (a PDF), else ``None``.
    page: int | None = None
    page_end: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class SearchResponse:
    """Hits plus the signals the tool layer needs to ask for clarification.

    ``total_matches`` counts matching chunks (text side: FTS matches; semantic side:
    eligible chunks with a positive similarity; hybrid: the larger). ``overloaded`` is
    ``OverloadRule.overloaded`` of this search (the rule the caller passed, else the
    knowledge base's ``KBConfig.overload_rule``): at least the threshold's matches with
    a flat relevance signal, and never for a search kept to one document.
    ``relaxed`` is true when filters were dropped to find anything; ``dropped_filter``
    names what was dropped.
    """

    hits: list[ChunkHit]
    total_matches: int
    relaxed: bool
    elapsed_ms: float
    mode: str = "hybrid"
    score_spread: float = 0.0
    overloaded: bool = False
    dropped_filter: str | None = None
    warnings: list[str] = field(default_factory=list)
    #: Hits left out as copies of a better one (the same page as .md and .html, or the
    #: same text in two documents: ``knowledge.duplicates``).
    duplicates: int = 0
    #: Hybrid mode: the sides the fused ranking rests on ("text", "semantic"), and why a
    #: side did not count (``knowledge.fusion.weigh``'s reasons: no_candidates,
    #: not_confident, heads_disagree, ...). ``None`` and empty in text or semantic mode.
    fused_sides: list[str] | None = None
    dropped_sides: dict[str, str] = field(default_factory=dict)
    #: Names of the search's bucket list (``buckets``) that are no bucket, left out of it:
    #: a search of those only searched nothing, and says so instead of "no passages"
    #: (a typo in ``AGENT_KB_DEFAULT_BUCKETS``). Shared names only (``KnowledgeBase.search``).
    missing_buckets: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["hits"] = [h.to_dict() for h in self.hits]
        return d


@dataclass(frozen=True, slots=True)
class OverloadRule:
    """When a search is an *overload*: too broad to answer from a few passages, so the
    corpus tools ask the user to narrow it (``clarification`` ``overload``) instead.

    The one decision, made by the search itself (``SearchResponse.overloaded``) so the
    search and the tools that act on it can never disagree. A search is overloaded when
    it matched at least ``threshold`` passages *and* its relevance signal is flat
    (``score_spread`` below ``flat_spread``, the best score's relative drop to the 10th,
    or to the ``top_k``-th when more are asked for, or to the last of fewer scored:
    ``knowledge.ranking.spread_depth``): the query does not tell the passages apart. A
    search kept to one document (``doc_id``: a page read again) never is: there is
    nothing narrower to ask for, and the clarification would end the run without an
    answer. ``threshold`` is ``AGENT_CLARIFY_OVERLOAD_HITS`` in the service.
    """

    threshold: int = 100
    flat_spread: float = 0.05

    def overloaded(self, total_matches: int, score_spread: float, *, doc_id: str | None) -> bool:
        return doc_id is None and total_matches >= self.threshold and score_spread < self.flat_spread


@dataclass(frozen=True, slots=True)
class ConstraintCount:
    """One top-level constraint of a filter, its label, and the documents it alone matches."""

    constraint: dict[str, Any]
    label: str
    documents: int


@dataclass(frozen=True, slots=True)
class DocumentCount:
    """How many documents a request covers; ``exact`` is false for a lower bound."""

    documents: int
    exact: bool


@dataclass(frozen=True, slots=True)
class BucketInfo:
    """A bucket, its typed metadata schema, and how much it holds."""

    name: str
    fields: dict[str, str]
    documents: int
    chunks: int
    created_at: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


DEFAULT_BUCKET = "default"


@dataclass(frozen=True, slots=True)
class KBConfig:
    """Tuning knobs; the defaults are the documented behaviour."""

    chunk_target: int = 800
    chunk_overlap: int = 120
    embed_batch: int = 64
    batch_documents: int = 256
    candidates: int = 100
    per_doc: int = 3
    max_top_k: int = 50
    #: ``overload_rule``'s two numbers (``OverloadRule``).
    overload_threshold: int = 100
    flat_spread: float = 0.05
    executor_rows: int = 2_000
    query_cache: int = 256
    #: BM25 skips terms in more than this share of all chunks (FTS5 idf ≤ log 4) …
    common_term_fraction: float = 0.2
    #: … once they are in at least this many chunks (below, scoring them is cheap).
    common_term_min_df: int = 5_000
    #: Text search in a bucket without filters first ranks this many best matches of
    #: the whole index and keeps the bucket's; only when too few are, it ranks within
    #: the bucket exactly.
    text_probe: int = 1_000
    term_stats_cache: int = 20_000
    #: Re-embedding in the background (``knowledge.backfill``): documents per batch,
    #: the slow timer between passes, and the backoff while the embedder keeps failing.
    reembed_batch_documents: int = 32
    reembed_interval_s: float = 300.0
    reembed_backoff_min_s: float = 1.0
    reembed_backoff_max_s: float = 30.0
    #: How long the loop's ``aclose`` waits for it once told to stop (a pass under way
    #: ends at its next batch; one that does not is named in the log and left behind
    #: rather than holding the process's shutdown). A served app passes its close
    #: budget's step (``app/ops/close_budget.py``).
    reembed_stop_s: float = 15.0
    #: How long the dense side's ``aclose`` waits for the start's count of unreadable
    #: vectors once cancelled (``knowledge.dense.DatabaseDense``: a scan in PostgreSQL,
    #: whose cancel a frozen server may not answer for many seconds); one still running
    #: then is named in the log and left behind. A served app passes its close budget's step.
    unreadable_count_stop_s: float = 5.0
    #: How long the close waits for ``/readyz``'s background count once cancelled
    #: (``knowledge.kb_counts_memo.CountsAtGeneration``: a sum over the documents, whose
    #: cancel a hanging PostgreSQL may not answer); one still running then is named in
    #: the log and left behind. A served app passes its close budget's step.
    readyz_count_stop_s: float = 5.0

    @property
    def overload_rule(self) -> OverloadRule:
        """The rule a search applies when its caller passes none."""
        return OverloadRule(self.overload_threshold, self.flat_spread)

    @property
    def text_tuning(self) -> KBTextTuning:
        return KBTextTuning(
            common_term_fraction=self.common_term_fraction,
            common_term_min_df=self.common_term_min_df,
            text_probe=self.text_probe,
            term_stats_cache=self.term_stats_cache,
        )
