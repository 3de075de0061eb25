"""The records the knowledge-base index (``storage.interfaces.KBIndex``) exchanges.

Plain types with no behaviour, so ``knowledge`` (ingest, search, ranking) and every
engine speak of documents, chunks, scopes and filters without importing each other.
A filter reaches the engine as a small tree (``FilterNode``) that ``knowledge.filters``
has already validated and coerced; each engine turns it into its own query language.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

import numpy as np
import numpy.typing as npt

#: The typed-field kinds a bucket may declare.
KB_FIELD_TYPES: frozenset[str] = frozenset({"TEXT", "INTEGER", "REAL", "DATE", "BOOLEAN"})

#: Fields every document has, whatever its bucket (name → type). Every engine can
#: filter on them; ``created_at``/``updated_at`` compare as dates (``YYYY-MM-DD``).
KB_DOCUMENT_FIELDS: Mapping[str, str] = {
    "doc_id": "TEXT",
    "title": "TEXT",
    "source": "TEXT",
    "url": "TEXT",
    "created_at": "DATE",
    "updated_at": "DATE",
}

# --- the engine-neutral filter tree ---------------------------------------------------

FilterOp = Literal["=", "!=", ">", ">=", "<", "<=", "in", "nin", "like", "is_null", "not_null"]


@dataclass(frozen=True, slots=True)
class FieldCondition:
    """One comparison. ``builtin`` fields are document fields (``KB_DOCUMENT_FIELDS``),
    the others typed fields of the bucket. ``value`` is already in the field's storage
    form (TEXT/DATE as ``str``, INTEGER and BOOLEAN as ``int``, REAL as ``float``): a
    tuple for ``in``/``nin``, a pattern for ``like`` (case-insensitive), nothing for
    ``is_null``/``not_null``. TEXT fields of a bucket compare case-insensitively."""

    field: str
    builtin: bool
    op: FilterOp
    value: Any = None


@dataclass(frozen=True, slots=True)
class AllOf:
    parts: tuple[FilterNode, ...]


@dataclass(frozen=True, slots=True)
class AnyOf:
    parts: tuple[FilterNode, ...]


FilterNode: TypeAlias = "FieldCondition | AllOf | AnyOf"


@dataclass(frozen=True, slots=True)
class KBFilter:
    """A validated filter: its tree, and which kinds of fields it reads."""

    root: FilterNode
    uses_typed: bool
    uses_builtin: bool


@dataclass(frozen=True, slots=True)
class KBScope:
    """Which documents a read covers: all of them, a bucket, a filter within it, one
    document, or an already resolved list of document ids (``doc_ids`` wins).

    ``hidden_prefix`` leaves out the documents of every bucket whose name starts so, in
    the read's own statement (the knowledge base's counts of "every bucket" hide the
    conversations' private buckets: a list of buckets read before would miss one made
    since). Honoured by ``count_documents``, ``scoped_doc_ids``, ``text_candidates`` and
    the vector searches (PostgreSQL's statement, SQLite's in-memory matrix by each row's
    stored bucket) of a scope without ``bucket`` and ``doc_ids``; an every-bucket search
    sets it too, so it neither ranks nor counts another user's attachments.

    ``chunk_ids`` is the same scope already resolved to the ids of its chunks (ascending,
    ``KBIndex.scoped_chunk_ids``), set beside the bucket, filter or document it was
    resolved from: a read may use it instead of running the filter again (SQLite's text
    ranking, the in-memory matrix's mask), or ignore it and read the same chunks from the
    rest of the scope. It never widens nor narrows the scope."""

    bucket: str | None = None
    filter: KBFilter | None = None
    doc_id: str | None = None
    doc_ids: Sequence[str] | None = None
    hidden_prefix: str | None = None
    chunk_ids: npt.NDArray[np.int64] | None = field(default=None, compare=False)

    @property
    def everything(self) -> bool:
        return (
            self.bucket is None
            and self.filter is None
            and self.doc_id is None
            and self.doc_ids is None
            and self.hidden_prefix is None
            and self.chunk_ids is None
        )


# --- buckets -----------------------------------------------------------------------------

#: Coerces a document's JSON metadata onto a bucket schema: values in field order.
TypedRow: TypeAlias = Callable[[Mapping[str, str], Mapping[str, Any]], Sequence[Any]]


class KBSchemaConflict(ValueError):
    """A bucket field was declared again with another type."""


@dataclass(frozen=True, slots=True)
class KBBucketRecord:
    name: str
    fields: dict[str, str]
    documents: int
    chunks: int
    created_at: str


# --- documents ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KBDocState:
    """What an ingest compares against to decide skip / update / move."""

    content_hash: str
    embed_model: str | None
    embed_dim: int | None
    bucket: str
    #: The stamp of the file it was read from (``None``: posted, or stored before stamps).
    file_stamp: str | None = None
    #: The chunking rules it was cut by (``knowledge.chunking.CHUNK_RULES``; ``None``:
    #: stored before they were recorded).
    chunk_rules: int | None = None
    #: The absolute path of the file it was read from (``None``: posted): an unchanged
    #: document read from another path (its tree moved: a new virtualenv, a Python
    #: upgrade's site-packages) is re-homed there, or its folder's re-ingest never finds it.
    origin: str | None = None


@dataclass(frozen=True, slots=True)
class KBFileDocument:
    """A stored document read from a file under a folder being re-ingested: what lets
    the ingest skip an unchanged file unread (``KBIndex.file_documents``)."""

    id: str
    origin: str
    file_stamp: str | None
    embed_model: str | None
    embed_dim: int | None
    #: The chunking rules it was cut by (``None``: stored before they were recorded).
    chunk_rules: int | None = None


@dataclass(frozen=True, slots=True)
class KBChunkWrite:
    position: int
    heading: str
    text: str
    #: First and last page of the chunk in a paged document (a PDF), else ``None``.
    page: int | None = None
    page_end: int | None = None


@dataclass(frozen=True, slots=True)
class KBDocumentWrite:
    """A document replacing whatever was stored under its id (chunks, vectors, typed
    fields). ``vectors`` has one float32 row per chunk, or is ``None`` (text search
    only); ``typed`` holds the bucket's typed field values in schema order."""

    id: str
    title: str
    source: str
    url: str | None
    content_hash: str
    metadata: Mapping[str, Any]
    chars: int
    chunks: Sequence[KBChunkWrite]
    vectors: npt.NDArray[np.float32] | None = None
    embed_model: str | None = None
    embed_dim: int | None = None
    typed: Sequence[Any] = ()
    #: The absolute path of the file it was read from (``None`` for posted documents):
    #: how a re-ingested folder finds its documents whose files are gone. Never shown.
    origin: str | None = None
    #: That file's stamp (size, modification time, chunking): an unchanged stamp lets a
    #: re-ingest skip the file unread. ``None`` for posted documents.
    file_stamp: str | None = None
    #: The version of the chunking rules that cut ``chunks`` (``knowledge.chunking.CHUNK_RULES``).
    chunk_rules: int | None = None


@dataclass(frozen=True, slots=True)
class KBDocumentRecord:
    id: str
    bucket: str
    title: str
    source: str
    url: str | None
    content_hash: str
    embed_model: str | None
    embed_dim: int | None
    metadata: dict[str, Any]
    fields: dict[str, Any]
    chars: int
    chunks: int
    created_at: str
    updated_at: str


@dataclass(frozen=True, slots=True)
class KBDocumentListing:
    """One line of a document listing (``list_documents``): no text, no metadata."""

    id: str
    bucket: str
    title: str
    source: str
    url: str | None
    chars: int
    chunks: int
    updated_at: str


@dataclass(frozen=True, slots=True)
class KBCounts:
    documents: int
    chunks: int
    #: Documents whose stored vectors are not of the given embedder (or missing).
    without_vectors: int
    #: Of those counted, the documents and chunks of the buckets named by the prefix
    #: ``counts`` was given (conversations' attachments), and their chunks whose vectors
    #: are the embedder's: what a view for everyone (``/readyz``) takes out.
    hidden_documents: int = 0
    hidden_chunks: int = 0
    hidden_current_chunks: int = 0
    #: Documents outside those buckets cut by older chunking rules than those ``counts``
    #: was given (or unknown ones: stored before the rules were recorded).
    older_chunking: int = 0
    #: Documents outside those buckets cut by newer rules (a newer release's, sharing the
    #: database during a rolling upgrade, or left by one rolled back).
    newer_chunking: int = 0


# --- re-embedding ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KBChunkText:
    """One stored chunk as the embedder sees it (``knowledge.ingest_docs.embedding_text``)."""

    id: int
    heading: str
    text: str


@dataclass(frozen=True, slots=True)
class KBUnembedded:
    """A stored document without vectors of the current embedder (never embedded, or
    by another one), with what embedding it again needs (``KBIndex.documents_without_vectors``)."""

    id: str
    bucket: str
    title: str
    content_hash: str
    #: In position order.
    chunks: tuple[KBChunkText, ...]


@dataclass(frozen=True, slots=True)
class KBStoredChunkVector:
    """One stored chunk's vector with what it was embedded from (its heading and text;
    the document's title is ``KBStoredVectors.title``)."""

    heading: str
    text: str
    vector: npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class KBStoredVectors:
    """A stored document's readable vectors of one embedder at one width
    (``KBIndex.stored_vectors``): what a re-made document reuses for its chunks whose
    text is unchanged, instead of embedding them again."""

    id: str
    title: str
    #: In position order; chunks without a readable vector are left out.
    chunks: tuple[KBStoredChunkVector, ...]


@dataclass(frozen=True, slots=True)
class KBVectorWrite:
    """Vectors for a document's chunks as read (``KBIndex.store_vectors``): written only
    if the document still has this content hash and these chunk ids."""

    doc_id: str
    content_hash: str
    chunk_ids: Sequence[int]
    #: One float32 row per chunk id, in the same order.
    vectors: npt.NDArray[np.float32]


# --- search ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KBTextTuning:
    """How the full-text side trades exactness for speed (see ``KBConfig``)."""

    common_term_fraction: float = 0.2
    common_term_min_df: int = 5_000
    text_probe: int = 1_000
    term_stats_cache: int = 20_000


@dataclass(frozen=True, slots=True)
class KBRanked:
    """A ranked candidate list: chunk ids best first, higher-is-better scores, and how
    many chunks matched in all (``total``; see there when it is exact)."""

    ids: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    #: How many chunks in scope match: exact when every match was counted, else an
    #: estimate. SQLite: exact but for a bucket answered from a probe that did not see
    #: every match (scaled from the rows looked at). PostgreSQL's postings read: exact when
    #: every lexeme's list was read to its end, else scaled (the commonest lexeme's chunks
    #: times the share of the postings read that were in the bucket). PostgreSQL's
    #: MaxScore rank on the chunk rows: exact when the pass it answers from matched on
    #: every query lexeme, an estimate when it left the commonest out (the ranked lexemes' count
    #: scaled by how much likelier a chunk is to hold any lexeme, and at least one more
    #: than the rows returned).
    total: int = 0


@dataclass(frozen=True, slots=True)
class KBChunkRow:
    chunk_id: int
    doc_id: str
    position: int
    title: str
    heading: str
    text: str
    bucket: str
    source: str
    url: str | None
    metadata: dict[str, Any]
    page: int | None = None
    page_end: int | None = None


@dataclass(frozen=True, slots=True)
class KBVectorRows:
    """The stored vectors of one document's chunks (``vectors``: float32, one row each)."""

    doc_id: str
    bucket: str
    chunk_ids: list[int]
    vectors: npt.NDArray[np.float32]
    #: The document's chunks whose stored vector could not be read (missing, or not
    #: ``dim`` wide: a partial write, a copy from another embedder): left out of
    #: ``chunk_ids``, so a search by meaning cannot find them until they are embedded
    #: again (``knowledge.backfill`` routes them there).
    unreadable: int = 0


def utc_now() -> str:
    """The time a knowledge-base row is written, as ISO-8601 UTC text (both engines)."""
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
