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

from agenttools.external_results import ExternalResult
from agenttools.rag.deps import ChunkHitLike
from agenttools.registry import EvidenceSource, RunToolState

_REF_KEYS = ("source_id", "id", "chunk_id", "url", "doc_id")
_MAX_META_VALUE_CHARS = 200


def chunk_source_id(hit: ChunkHitLike) -> str:
    return str(hit.chunk_id)


def chunk_source(hit: ChunkHitLike) -> EvidenceSource:
    meta = small_metadata(hit.metadata)
    meta.update(doc_id=hit.doc_id, chunk_id=hit.chunk_id, score=round(float(hit.score), 4))
    if hit.bucket:
        meta["bucket"] = hit.bucket
    if hit.position is not None:
        meta["position"] = hit.position
    return EvidenceSource(
        id=chunk_source_id(hit),
        title=hit.title or hit.doc_id,
        url=hit.url,
        kind="internal",
        location=hit.source,
        metadata=meta,
    )


def external_sources(result: ExternalResult, origin: str) -> list[EvidenceSource]:
    """The answer itself plus one source per web citation."""
    base = {
        "origin": origin,
        "provider": result.provider,
        "question": result.query,
        "retrieved_at": iso_time(result.created_at),
    }
    out = [
        EvidenceSource(
            id=result.id,
            title=f"{result.provider.capitalize()} answer: {result.query[:80]}",
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
    for source in state.sources.values():
        if source.url and source.url == ref:
            return source
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
