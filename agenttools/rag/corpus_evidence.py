"""Evidence of the corpus tools: where in a document a hit is, how a hit is registered as a
cited source of the run, and the compact view of a hit the model reads.

Its own module because citations (``[doc_id]``) and the search results must agree on one
location and one source per document, whatever tool found it.
"""

from __future__ import annotations

from typing import Any

from agenttools.core.registry import EvidenceSource, RunToolState
from agenttools.core.untrusted import quoted
from agenttools.rag.corpus_deps import MAX_LOCATIONS
from agenttools.rag.kb_search import chunk_section
from agenttools.rag.sources import page_label, shown_source, small_metadata
from knowledge.types import ChunkHit


def location_of(hit: ChunkHit) -> str:
    """``"chunk 3 — Payment terms"`` (``"page 5, chunk 3 — …"`` in a PDF): where in the
    document the passage is."""
    where = f"chunk {hit.position}"
    if hit.heading and hit.heading != hit.title:
        where += f" \u2014 {hit.heading[:80]}"
    pages = page_label(getattr(hit, "page", None), getattr(hit, "page_end", None))
    return f"{pages}, {where}" if pages else where


def register_hit(state: RunToolState, hit: ChunkHit) -> EvidenceSource:
    """Record ``hit``'s document as evidence under its ``doc_id``; a document found again
    (another chunk, a later search) gains the new location instead of a second source."""
    source = state.sources.get(hit.doc_id)
    if source is None:
        meta = small_metadata(hit.metadata)
        meta.update(doc_id=hit.doc_id, bucket=hit.bucket, chunks=[], origin="corpus")
        if hit.source:
            meta["source"] = shown_source(hit.source)
        source = EvidenceSource(
            id=hit.doc_id, title=hit.title or hit.doc_id, url=hit.url, kind="internal", metadata=meta
        )
        state.add_source(source)
    chunks = source.metadata.setdefault("chunks", [])
    if isinstance(chunks, list) and hit.chunk_id not in chunks:
        chunks.append(hit.chunk_id)
        page = getattr(hit, "page", None)
        if page is not None:
            end = getattr(hit, "page_end", None) or page
            # ``pages`` is the document's page count (PDF metadata); these are the pages read.
            cited = source.metadata.setdefault("cited_pages", [])
            if isinstance(cited, list):
                cited[:] = sorted(set(cited) | set(range(page, end + 1)))
            source.metadata.setdefault("page", page)  # the first cited passage's page
        locations = [loc for loc in (source.location or "").split("; ") if loc]
        loc = location_of(hit)
        if loc not in locations and len(locations) < MAX_LOCATIONS:
            locations.append(loc)
            source.location = "; ".join(locations)
    return source


def hit_view(hit: ChunkHit, max_meta: int) -> dict[str, Any]:
    meta = {k: (v[:max_meta] if isinstance(v, str) else v) for k, v in small_metadata(hit.metadata).items()}
    section = chunk_section(hit)  # the heading the passage sits under, as knowledge_base_search shows it
    return {
        "source_id": hit.doc_id,
        "doc_id": hit.doc_id,
        "chunk_id": hit.chunk_id,
        "title": hit.title,
        **({"section": section} if section else {}),
        "location": location_of(hit),
        **quoted(hit.text, source=f"corpus document {hit.doc_id!r}, {location_of(hit)}", field="snippet"),
        "score": round(float(hit.score), 4),
        "metadata": meta,
        **_page_view(hit),
    }


def _page_view(hit: ChunkHit) -> dict[str, Any]:
    page = getattr(hit, "page", None)
    if page is None:
        return {}
    end = getattr(hit, "page_end", None)
    return {"page": page, **({"page_end": end} if end is not None and end != page else {})}
