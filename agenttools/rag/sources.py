"""Evidence sources: what a run retrieved, under the ids the model is told to cite.

Id scheme (the model sees each as ``source_id`` in the tool results):

* knowledge-base chunk → its ``chunk_id`` (as a string). Chunks are what was actually
  read, and one document can yield several; ``doc_id`` is kept in the metadata.
* external answer → its stored result id (``px_…``); each web source behind it →
  ``"<result id>#<n>"``, where ``n`` is the answer's own ``[n]`` marker.

``resolve_citations`` is deliberately lenient about *how* a retrieved source is named
(exact id, a chunk's ``doc_id``, a URL, or an object carrying one of those) and strict
about *which* sources: only ones this run retrieved.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from agenttools.core.registry import EvidenceSource, RunToolState
from agenttools.core.untrusted import safe_url
from agenttools.rag.deps import ChunkHitLike
from agenttools.rag.external_results import ExternalResult

_REF_KEYS = ("source_id", "id", "chunk_id", "url", "doc_id")
_MAX_META_VALUE_CHARS = 200


def chunk_source_id(hit: ChunkHitLike) -> str:
    return str(hit.chunk_id)


def page_label(page: int | None, page_end: int | None = None) -> str | None:
    """``"page 5"``, ``"pages 5–6"``, or ``None`` for a passage without pages."""
    if page is None:
        return None
    if page_end is None or page_end == page:
        return f"page {page}"
    return f"pages {page}\u2013{page_end}"


def hit_pages(hit: object) -> tuple[int | None, int | None]:
    """A hit's ``(page, page_end)``; hits of engines without pages give ``(None, None)``."""
    page = getattr(hit, "page", None)
    end = getattr(hit, "page_end", None)
    return (page if isinstance(page, int) else None, end if isinstance(end, int) else None)


def shown_source(source: str | None) -> str | None:
    """A document's source as readers may see it: ingestion stores a path relative to
    the ingested folder; an absolute server path (a document stored before that) is cut
    to its file name, so no source ever shows where the server keeps its files."""
    if not source:
        return source
    if source.startswith("/") or source.startswith("\\") or (len(source) > 2 and source[1:3] in (":\\", ":/")):
        return source.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1] or None
    return source


def chunk_source(hit: ChunkHitLike) -> EvidenceSource:
    meta = small_metadata(hit.metadata)
    meta.update(doc_id=hit.doc_id, chunk_id=hit.chunk_id, score=round(float(hit.score), 4))
    if hit.bucket:
        meta["bucket"] = hit.bucket
    if hit.position is not None:
        meta["position"] = hit.position
    page, page_end = hit_pages(hit)
    location = shown_source(hit.source)
    if page is not None:
        meta["page"] = page
        if page_end is not None and page_end != page:
            meta["page_end"] = page_end
        label = page_label(page, page_end)
        location = f"{location}, {label}" if location else label
    return EvidenceSource(
        id=chunk_source_id(hit),
        title=hit.title or hit.doc_id,
        url=hit.url,
        kind="internal",
        location=location,
        metadata=meta,
    )


def external_sources(result: ExternalResult, origin: str) -> list[EvidenceSource]:
    """The answer itself plus one source per web citation.

    The answer's own source carries its web citations (FR-014): ``url`` is the first
    one's and ``metadata.citations`` lists them all (``source_id``, ``url``, ``title``),
    so a ``response`` that cites only the answer still says where it came from.
    """
    base: dict[str, Any] = {
        "origin": origin,
        "provider": result.provider,
        "question": result.query,
        "retrieved_at": iso_time(result.created_at),
    }
    cited = [(c, safe_url(c.url)) for c in result.citations]  # only http(s) links travel
    web = [
        {"source_id": result.citation_source_id(c), "url": url, **({"title": c.title[:200]} if c.title else {})}
        for c, url in cited
        if url is not None
    ]
    if web:
        base["citations"] = web
        base["urls"] = [w["url"] for w in web]
    out = [
        EvidenceSource(
            id=result.id,
            title=f"{result.provider.capitalize()} answer: {result.query[:80]}",
            url=web[0]["url"] if web else None,
            kind="external",
            metadata=base,
        )
    ]
    for c in result.citations:
        meta: dict[str, Any] = {"origin": origin, "result_id": result.id, "index": c.index}
        if c.date:
            meta["date"] = c.date
        out.append(
            EvidenceSource(
                id=result.citation_source_id(c),
                title=c.title or c.url,
                url=c.url,
                kind="external",
                metadata=meta,
            )
        )
    return out


def resolve_citations(refs: Sequence[object], state: RunToolState) -> tuple[list[EvidenceSource], list[str]]:
    """Map what the model cited to this run's sources: ``(resolved, unknown refs)``."""
    resolved: dict[str, EvidenceSource] = {}
    unknown: list[str] = []
    for ref in refs:
        source = _resolve_one(ref, state)
        if source is None:
            unknown.append(_describe(ref))
        else:
            resolved.setdefault(source.id, source)
    return list(resolved.values()), unknown


def _resolve_one(ref: object, state: RunToolState) -> EvidenceSource | None:
    if isinstance(ref, Mapping):
        for key in _REF_KEYS:
            value = ref.get(key)
            if value is not None and not isinstance(value, Mapping | list):
                found = _resolve_scalar(str(value).strip(), state)
                if found is not None:
                    return found
        return None
    if isinstance(ref, str | int) and not isinstance(ref, bool):
        return _resolve_scalar(str(ref).strip(), state)
    return None


def _resolve_scalar(ref: str, state: RunToolState) -> EvidenceSource | None:
    if not ref:
        return None
    exact = state.sources.get(ref)
    if exact is not None:
        return exact
    # A web citation is named by its URL; the answer that cites it carries the same URL
    # and comes second, so the citation's own source wins.
    by_url = [s for s in state.sources.values() if s.url and s.url == ref]
    if by_url:
        return min(by_url, key=lambda s: "urls" in s.metadata)
    for source in state.sources.values():
        if source.kind == "internal" and str(source.metadata.get("doc_id")) == ref:
            return source
    return None


def _describe(ref: object) -> str:
    text = ref if isinstance(ref, str) else repr(ref)
    return text[:120]


def small_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Scalar metadata only, strings capped: it travels in every ``response`` event."""
    out: dict[str, Any] = {}
    for key, value in metadata.items():
        if isinstance(value, bool | int | float) or value is None:
            out[str(key)] = value
        elif isinstance(value, str):
            out[str(key)] = value[:_MAX_META_VALUE_CHARS]
    return out


def iso_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")
