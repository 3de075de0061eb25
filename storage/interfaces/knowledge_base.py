"""The knowledge base's index: documents, chunks, full-text index and stored vectors
(``KBIndex``), and the vector search an engine may answer itself (``KBVectorSearch``).

Why apart: the largest interface, implemented by each engine's KB index and used by
``knowledge`` alone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from storage.kb_records import (
    KBBucketRecord,
    KBChunkRow,
    KBCounts,
    KBDocState,
    KBDocumentListing,
    KBDocumentRecord,
    KBDocumentWrite,
    KBFileDocument,
    KBRanked,
    KBScope,
    KBStoredVectors,
    KBTextTuning,
    KBUnembedded,
    KBVectorRows,
    KBVectorWrite,
    TypedRow,
)


class KBIndex(Protocol):
    """The knowledge base's documents, chunks, full-text index and stored vectors.

    ``knowledge`` does the chunking, embedding, ranking and fusion; an engine keeps the
    rows and answers the questions below. Writes are atomic per call; reads see every
    write that returned. On an engine without ``KBVectorSearch`` the dense side is an
    in-memory matrix filled from ``iter_vectors``.
    """

    @property
    def location(self) -> str:
        """Where the data lives, for humans (a file path, a database URL without secrets)."""
        ...

    @property
    def chunks_per_write(self) -> int | None:
        """The most chunks an ingest puts in one ``write_documents`` (whole documents: a
        larger one is a write of its own); ``None``: no bound. SQLite's one writer
        commits every live run's events too, and none while a write runs."""
        ...

    @property
    def writes_in_flight(self) -> int:
        """How many of an ingest's batch writes may run at once while the next batch is
        prepared (``knowledge.ingest_stages.BatchWrites``): PostgreSQL writes each on a
        connection of its own, SQLite's one writer takes them in turn."""
        ...

    # buckets
    async def bucket_schemas(self) -> dict[str, dict[str, str]]: ...

    async def list_buckets(self) -> list[KBBucketRecord]: ...

    async def create_bucket(self, name: str, fields: Mapping[str, str], *, typed_row: TypedRow) -> dict[str, str]:
        """Create ``name`` with ``fields`` (already validated), or add the new ones to it,
        filling them for existing documents with ``typed_row(schema, metadata)``.
        Returns the bucket's whole schema; ``KBSchemaConflict`` if a field changes type."""
        ...

    # writes
    async def document_states(self, doc_ids: Sequence[str]) -> dict[str, KBDocState]: ...

    async def write_documents(
        self, bucket: str, fields: Mapping[str, str], docs: Sequence[KBDocumentWrite]
    ) -> list[list[int]]:
        """Replace these documents (moving them into ``bucket``); returns the new chunk
        ids of each document, in order."""
        ...

    async def delete_documents(self, doc_ids: Sequence[str]) -> list[str]:
        """Delete them everywhere; returns the ids that existed."""
        ...

    def bulk_load(self) -> AbstractAsyncContextManager[None]:
        """Writes inside this block may leave index structures that are far cheaper to
        build once than to maintain row by row (PostgreSQL's HNSW graph) to be built when
        the block ends — but only ones that did not exist when it began, so searches of a
        live corpus never lose an index. Searches stay correct meanwhile (exact)."""
        ...

    async def source_documents(self, bucket: str, origin: str, *, prefix: bool) -> list[tuple[str, str]]:
        """``(doc_id, origin)`` of the bucket's documents whose origin (the absolute path
        of the file they were read from) is ``origin``, or starts with it when ``prefix``."""
        ...

    async def file_documents(self, bucket: str, origin: str, *, prefix: bool) -> list[KBFileDocument]:
        """Like ``source_documents``, with each document's file stamp and embedder: what
        a re-ingest compares before opening a file."""
        ...

    async def set_file_stamps(
        self, stamps: Sequence[tuple[str, str | None]], *, origins: Mapping[str, str] | None = None
    ) -> None:
        """Set the file stamp of each ``(doc_id, stamp)`` (``None`` clears it), and the
        origin ``origins`` gives a document (an unchanged file read from a tree that
        moved), nothing else."""
        ...

    async def delete_bucket(self, name: str) -> list[str] | None:
        """Delete the bucket, its documents and its typed fields; returns the ids of the
        documents deleted, or ``None`` when there is no such bucket."""
        ...

    # reads
    def iter_vectors(self, embed_model: str, dim: int) -> AsyncIterator[KBVectorRows]:
        """Every stored vector of that embedder, one document at a time."""
        ...

    async def scoped_doc_ids(self, scope: KBScope) -> list[str]: ...

    async def docs_in_scope(self, scope: KBScope, doc_ids: Sequence[str]) -> list[str]:
        """Those of ``doc_ids`` that ``scope`` covers (its ``chunk_ids`` aside: the same
        scope). What a search says about a few documents - its unreadable vectors - must
        speak of what it searched only, never of another user's private bucket."""
        ...

    async def count_without_vectors(self, scope: KBScope, embed_model: str, embed_dim: int) -> int:
        """How many of the documents ``scope`` covers have no vectors of this embedder
        (``KBCounts.without_vectors``' condition, within the scope; its ``chunk_ids``
        aside). A search's "no vectors yet" warning speaks of what it searched, never of
        another user's attachment waiting for vectors nor of a bucket it did not search."""
        ...

    async def scoped_chunk_ids(self, scope: KBScope) -> npt.NDArray[np.int64]:
        """The ids of the chunks of the documents in scope, ascending (``KBScope.chunk_ids``):
        what the in-memory matrix masks its rows by, with no walk over document ids."""
        ...

    async def count_documents(self, scope: KBScope) -> int: ...

    async def selective_terms(self, terms: Sequence[str], min_matches: int, tuning: KBTextTuning) -> list[str]:
        """The query terms worth ranking by: without terms that match nothing, and
        without very common ones when the engine's ranking pays for them."""
        ...

    async def term_splits(
        self, candidates: Mapping[str, Sequence[Sequence[str]]], tuning: KBTextTuning
    ) -> dict[str, tuple[str, ...]]:
        """For the terms of ``candidates`` the index barely knows (``kb_terms.may_split``),
        the cut of each into words it does know (``kb_terms.choose_split``; the cuts
        offered are the caller's, ``knowledge.query_terms.split_candidates``); terms with
        none are left out. One lookup of a term's parts, cached until the index changes;
        a term the index knows well costs only its own count."""
        ...

    async def text_candidates(self, terms: Sequence[str], scope: KBScope, limit: int, tuning: KBTextTuning) -> KBRanked:
        """Full-text (BM25) top ``limit`` chunks matching any of ``terms`` within ``scope``.
        A term holding a space is a split's phrase (``kb_terms.split_phrase``): it matches
        a chunk holding its words in sequence."""
        ...

    async def hydrate(self, chunk_ids: Sequence[int]) -> list[KBChunkRow]:
        """The chunks that still exist, with their document's fields, in any order."""
        ...

    async def get_document(self, doc_id: str) -> KBDocumentRecord | None: ...

    async def list_documents(
        self, bucket: str | None, *, limit: int, after: str | None = None
    ) -> list[KBDocumentListing]:
        """Documents by id (of ``bucket``, or all), those with an id greater than ``after``."""
        ...

    async def counts(
        self,
        embed_model: str | None,
        embed_dim: int | None,
        *,
        hidden_prefix: str | None = None,
        chunk_rules: int | None = None,
    ) -> KBCounts:
        """Every document's counts, and (``hidden_*``) those of buckets named ``hidden_prefix…``;
        with ``chunk_rules``, the documents of the other buckets cut by older rules (or
        none recorded) and, apart, by newer ones."""
        ...

    async def vector_embedders(self) -> list[tuple[str, int, int]]:
        """``(embed_model, embed_dim, documents)`` for each embedder whose vectors some
        documents hold, most documents first: whose vectors an ingest would meet."""
        ...

    # re-embedding (``knowledge.backfill``)
    async def documents_without_vectors(
        self, embed_model: str, embed_dim: int, *, limit: int, after: str | None = None
    ) -> list[KBUnembedded]:
        """Up to ``limit`` documents, by id after ``after``, whose vectors are not of
        ``embed_model`` at ``embed_dim`` dimensions (missing, or another embedder's), each
        with its chunks' text in position order."""
        ...

    async def documents_with_unreadable_vectors(
        self, embed_model: str, embed_dim: int, doc_ids: Sequence[str]
    ) -> list[KBUnembedded]:
        """Those of these documents, by id, still marked as embedded by ``embed_model``
        at ``embed_dim`` some of whose chunks' stored vectors cannot be read now (none,
        or another width: ``KBVectorRows.unreadable``), each with its chunks' text in
        position order: what ``store_vectors`` repairs once they are embedded again.
        One whose vectors are all readable by now (re-ingested or re-embedded since the
        caller's read) is left out."""
        ...

    async def stored_vectors(
        self, bucket: str, embed_model: str, embed_dim: int, doc_ids: Sequence[str]
    ) -> dict[str, KBStoredVectors]:
        """Of these documents, those in ``bucket`` whose vectors are of ``embed_model`` at
        ``embed_dim``, each with its title and its chunks' readable vectors (heading, text,
        vector; in position order): what a re-made document reuses for its unchanged
        chunk texts. One statement per part of ``doc_ids``, never one per chunk."""
        ...

    async def store_vectors(self, embed_model: str, embed_dim: int, docs: Sequence[KBVectorWrite]) -> list[str]:
        """In one transaction, give these documents' chunks their vectors and mark the
        documents as embedded by ``embed_model`` — only those still as they were read
        (same content hash, same chunk ids): a document re-ingested meanwhile is left to
        that ingest. Returns the ids written."""
        ...


@runtime_checkable
class KBVectorSearch(Protocol):
    """What an engine with its own vector index (PostgreSQL: pgvector HNSW, cosine) adds
    to ``KBIndex``: the dense side answered inside the database, so no replica needs the
    whole matrix in memory and every replica sees every other's writes at once."""

    async def vector_candidates(
        self, query: npt.NDArray[np.float32], embed_model: str, scope: KBScope, limit: int
    ) -> KBRanked:
        """The ``limit`` chunks nearest to ``query`` (cosine; scores are similarities,
        best first) among the vectors of ``embed_model`` within ``scope``."""
        ...

    async def cosines(
        self, chunk_ids: Sequence[int], query: npt.NDArray[np.float32], embed_model: str
    ) -> dict[int, float]:
        """Cosine similarity of each of these chunks' vectors of ``embed_model`` to ``query``
        (a chunk whose document holds another embedder's vectors has none)."""
        ...

    async def has_vectors(self, embed_model: str, dim: int) -> bool:
        """Whether any chunk has a vector of ``embed_model`` at ``dim`` dimensions."""
        ...

    async def count_vectors(self, embed_model: str, dim: int) -> int:
        """How many chunks have a vector of ``embed_model`` at ``dim`` dimensions."""
        ...

    async def unreadable_vectors(
        self, embed_model: str, dim: int, doc_ids: Sequence[str] | None = None
    ) -> dict[str, int]:
        """Per document of ``embed_model`` at ``dim`` (only ``doc_ids``' when given), how
        many of its chunks have a stored vector that is none or of another width: out of
        every search by meaning until re-embedded (what ``KBVectorRows.unreadable``
        counts where the vectors are loaded into memory)."""
        ...

    async def vector_index_status(self, *, kept_counts: bool = False) -> dict[str, Any]:
        """How scoped searches run on this server (``/readyz``): on PostgreSQL, which
        pgvector and whether its HNSW scans are iterative (recall differs a lot).
        ``kept_counts``: what needs the vectors' counts per bucket reads those kept,
        whatever their generation (``null`` before any) - ``/readyz`` never waits for a
        count (``knowledge.kb_counts_memo``, which counts them again in the background)."""
        ...

    @property
    def graph_serial_builds(self) -> int:
        """Graph builds here since start that found too little shared memory for a
        parallel build and ran serially, more slowly (``/metrics``)."""
        ...


@runtime_checkable
class KBGenerations(Protocol):
    """What lets a process holding knowledge-base state in memory see another process's
    changes (``knowledge.freshness``): every write of the knowledge base, by any process
    on the database, counts a stored generation up in its own transaction."""

    async def kb_generation(self) -> int:
        """The committed generation (one indexed read)."""
        ...

    def written_here(self, seen: int, current: int) -> bool | None:
        """Whether every generation after ``seen`` up to ``current`` was written by this
        process: ``True``; ``False``: another process wrote one; ``None``: none is
        certainly another's, but a write here that counted one of them up has not
        finished committing (ask again after it)."""
        ...

    def seen_upto(self, generation: int) -> None:
        """Everything up to ``generation`` was taken in (what is kept for it may go)."""
        ...

    def changed_elsewhere(self) -> None:
        """Another process changed the knowledge base: forget what the index caches of
        it (text statistics, bucket schemas)."""
        ...
