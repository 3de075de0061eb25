"""One document of an ingest on its way to the index: which of a batch's documents are
taken (``screen``: ids, duplicates, empty text, typed fields; each refusal reported),
what decides that a stored one is unchanged (``content_hash``), what a chunk is for the
embedder (``embedding_text``; a Markdown page's summary heads its first chunk,
``with_summary``) and what is written for it (``document_writes``).

Why apart from ``knowledge.ingest``: that module runs the ingestion - batches, files and
their stamps, the stages, deletions; these are the rules for one document, which the
re-embedding (``knowledge.backfill``) shares for its texts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np
import orjson

from knowledge.buckets import typed_row
from knowledge.chunking import CHUNK_RULES, Chunk
from knowledge.loaders import LoadedDocument
from knowledge.names import is_doc_id
from knowledge.types import DocumentIn, IngestReport, KBConfig, Rejection
from storage.kb_records import KBChunkWrite, KBDocumentWrite


@dataclass(slots=True)
class Prepared:
    """A document of a batch that will be stored: checked, hashed, then chunked and embedded."""

    doc: DocumentIn
    line: int | None
    content_hash: str
    typed: list[Any]
    chunks: list[Chunk]
    existing_bucket: str | None
    vectors: np.ndarray | None = None
    stamp: str | None = None
    #: Stored with the same content, cut by other chunking rules: stored again for its cut only.
    rechunk: bool = False


class HeadedText(Protocol):
    """A chunk as the embedder sees it: a new ``Chunk``, or a stored ``KBChunkText``."""

    @property
    def heading(self) -> str: ...

    @property
    def text(self) -> str: ...


def embedding_text(title: str, chunk: HeadedText) -> str:
    """What is embedded for a chunk: its title and heading, then its text."""
    head = title if not chunk.heading or chunk.heading == title else f"{title} — {chunk.heading}"
    return f"{head}\n{chunk.text}" if head else chunk.text


#: A page summary longer than this is no one-line summary.
MAX_SUMMARY_CHARS = 200


def with_summary(chunks: list[Chunk], metadata: Mapping[str, Any]) -> list[Chunk]:
    """The first chunk of a Markdown page whose front matter gives a ``description`` is
    headed by it ("List installed packages — Synopsis"): documentation sites summarise
    each page in one line there, in the words a question uses ("how do I list the
    installed packages?"), while the page itself may only say them in passing. The
    heading is searched (full text and re-ranking) and embedded, the text is unchanged."""
    summary = metadata.get("description") if metadata.get("format") == "markdown" else None
    if not chunks or not isinstance(summary, str) or not summary.strip() or len(summary) > MAX_SUMMARY_CHARS:
        return chunks
    first = chunks[0]
    heading = f"{summary.strip()} — {first.heading}" if first.heading else summary.strip()
    return [replace(first, heading=heading), *chunks[1:]]


def content_hash(doc: DocumentIn, cfg: KBConfig) -> str:
    """What decides whether a stored document is unchanged: its content and fields, and
    the chunking it was cut with."""
    payload = orjson.dumps(
        [doc.title, doc.text, doc.url, doc.source, doc.metadata, cfg.chunk_target, cfg.chunk_overlap]
        + (["paged"] if doc.paged else []),
        option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS,
        default=str,
    )
    return hashlib.sha256(payload).hexdigest()


def keeps_vectors(stored: tuple[str | None, int | None], ours: tuple[str | None, int | None]) -> bool:
    """Whether an unchanged document (same content hash, same chunking rules) whose
    vectors are ``stored`` (``(embed_model, embed_dim)``, ``(None, None)``: none) is left
    as it is by an ingest embedding with ``ours`` (``(None, None)``: no embedder).

    Only a document without vectors is worth re-making, and only by a process that has an
    embedder. Vectors of another embedder are kept, as vectors of ours are: the process
    that ingests may not have the embedder the service searches with (``agentchat ingest``
    while the configured Ollama is down, ``auto`` fallen back to hashing, a worker that has
    not adopted a late embedder yet), and re-making the document stripped the vectors the
    service serves, or replaced them with vectors it does not search, until its
    re-embedding put them back. When the service's embedder changes on purpose, its
    re-embedding (``knowledge.backfill``) replaces the outdated vectors: the text is the
    same, only the embedder that should embed it differs."""
    return stored[0] is not None or stored == ours or ours[0] is None


def screen(
    loaded: Sequence[LoadedDocument], schema: dict[str, str], seen: set[str], report: IngestReport, cfg: KBConfig
) -> list[tuple[LoadedDocument, str, list[Any]]]:
    """The documents of a batch worth looking up, with their content hash and typed
    fields; the others (a bad or repeated id, no text, fields the bucket's schema
    refuses) are counted in ``report`` as rejected. ``seen`` gathers this ingestion's ids."""
    candidates: list[tuple[LoadedDocument, str, list[Any]]] = []
    for item in loaded:
        doc = item.doc
        src = doc.source
        if not doc.id or not is_doc_id(doc.id):
            report.rejected.append(Rejection(src, f"invalid document id {str(doc.id)[:40]!r}", item.line))
            continue
        if doc.id in seen:
            report.rejected.append(Rejection(src, f"duplicate document id {doc.id!r} in this ingestion", item.line))
            continue
        if not doc.text.strip():
            report.rejected.append(Rejection(src, "empty text", item.line))
            continue
        typed, errors = typed_row(schema, doc.metadata)
        if errors:
            report.rejected.append(Rejection(src, "; ".join(errors), item.line))
            continue
        seen.add(doc.id)
        candidates.append((item, content_hash(doc, cfg), typed))
    return candidates


def document_writes(
    todo: Sequence[Prepared], schema: dict[str, str], embed_key: str | None, dim: int | None
) -> list[KBDocumentWrite]:
    """What the index stores for each prepared document: its row, chunks (with the version
    of the rules that cut them), vectors (with the embedder they came from) and typed fields."""
    return [
        KBDocumentWrite(
            id=p.doc.id or "",
            title=p.doc.title,
            source=p.doc.source,
            url=p.doc.url,
            content_hash=p.content_hash,
            metadata=p.doc.metadata,
            chars=len(p.doc.text),
            chunks=[KBChunkWrite(c.position, c.heading, c.text, c.page, c.page_end) for c in p.chunks],
            vectors=p.vectors,
            embed_model=embed_key if p.vectors is not None else None,
            embed_dim=dim if p.vectors is not None else None,
            typed=p.typed if schema else (),
            origin=p.doc.origin,
            file_stamp=p.stamp,
            chunk_rules=CHUNK_RULES,
        )
        for p in todo
    ]


__all__ = [
    "MAX_SUMMARY_CHARS",
    "HeadedText",
    "Prepared",
    "content_hash",
    "document_writes",
    "embedding_text",
    "keeps_vectors",
    "screen",
    "with_summary",
]
