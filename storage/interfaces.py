"""Every kind of data the service keeps, as small async interfaces.

A newcomer opens this file and sees what is stored; each engine (``storage/sqlite``,
later ``storage/postgres``) implements all of them and passes one contract suite
(``tests/storage``). Callers receive these from the app factory and never open a
connection themselves.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from llm.types import Message
from storage.draft_records import Draft
from storage.history_records import ConversationSummary, DeletedConversation, RunView
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
    KBTextTuning,
    KBUnembedded,
    KBVectorRows,
    KBVectorWrite,
    TypedRow,
)
from storage.keyword_records import (
    ExternalResult,
    ExternalVector,
    KeywordAssociation,
    KeywordHit,
    KeywordRecord,
    KeywordTermHit,
    NewExternalVector,
)
from storage.limit_records import RateDecision
from storage.records import (
    Admitted,
    NewRun,
    RunEvent,
    RunWrite,
    StoredMessage,
    StoredRun,
    ToolCallRecord,
)
from storage.run_feed import RunFeed


class ConversationStore(Protocol):
    """A conversation is its user's: it is keyed by ``(user_id, conversation_id)``, so
    two users naming the same id have two conversations and never see or block each
    other. Messages get their ``seq`` inside the write transaction, so concurrent
    appends never collide or get lost."""

    async def exists(self, conversation_id: str, user_id: str) -> bool: ...

    async def claim(self, conversation_id: str, user_id: str) -> None:
        """Create the user's conversation if it does not exist yet (idempotent)."""
        ...

    async def load(self, conversation_id: str, user_id: str, *, limit: int = 400) -> list[Message]: ...

    async def messages(self, conversation_id: str, user_id: str) -> list[StoredMessage]: ...

    async def append(
        self, conversation_id: str, user_id: str, messages: Sequence[Message], *, deadline: float | None = None
    ) -> None: ...


class RunStore(Protocol):
    """Runs and their replayable event log, with the checkpoints of durable execution."""

    async def create(self, run: NewRun, *, deadline: float | None = None) -> Admitted:
        """Store the run (status ``queued``) and claim its conversation for the user, in
        one transaction. Returns the ids of the user's conversation's other unfinished
        runs, oldest first, and whether the run's ``title`` became the conversation's
        (only a conversation without a title takes it). Raises ``ConversationBusy``
        when the policy is ``reject`` and another run is unfinished. A run with an
        ``idempotency_key`` the user already used is not stored: ``IdempotencyKeyUsed``
        names the run that has it (checked first, and atomically with the insert). With
        ``max_unfinished_per_user``, the user's unfinished runs are counted in the same
        transaction, atomically across processes: ``TooManyRuns`` at the cap. With the
        ``interrupt`` policy, the other unfinished runs get a cancel request (as
        ``request_cancel``) in the same transaction."""
        ...

    async def get(self, run_id: str) -> StoredRun | None: ...

    async def request_cancel(self, run_id: str) -> StoredRun | None:
        """Mark a cancel on the run if it has not ended (idempotent) and signal the
        process executing it (a notification where the engine has them); the run as
        stored afterwards, ``None`` if there is no such run."""
        ...

    async def cancel_requests(self, run_ids: Sequence[str]) -> set[str]:
        """Which of ``run_ids`` have not ended and have a cancel request (the owner's
        look for cancels asked for on other replicas)."""
        ...

    async def find_by_idempotency_key(self, user_id: str, key: str) -> StoredRun | None:
        """The run ``user_id`` started with ``Idempotency-Key: key``, if it is stored."""
        ...

    async def events_after(self, run_id: str, after: int, limit: int = 10_000) -> list[RunEvent]: ...

    def write(
        self,
        step: RunWrite,
        *,
        on_commit: Callable[[], None] | None = None,
        on_fail: Callable[[BaseException], None] | None = None,
    ) -> None:
        """Queue a step; it commits after every step queued before it."""
        ...

    async def commit(self, step: RunWrite) -> None:
        """Queue a step and wait until it is durable (raises ``StorageUnavailable``)."""
        ...

    async def unfinished(self) -> list[StoredRun]:
        """Runs that have not ended (queued, running, interrupted), oldest first."""
        ...

    async def set_status(self, run_ids: Sequence[str], status: str) -> None: ...

    # Leases: the process executing a run holds it for ``lease_s`` and renews it; a run
    # whose lease expired (its process died) is claimed by another. A step written with
    # ``RunWrite.lease_owner`` by a process that lost the lease fails with ``LeaseLost``.

    async def claim(
        self, owner: str, lease_s: float, *, expired_only: bool = True, limit: int = 100
    ) -> list[StoredRun]:
        """Atomically take the unfinished runs whose lease expired or that never had one
        (every unfinished run when not ``expired_only``) for ``owner``; oldest first."""
        ...

    async def renew(self, owner: str, run_ids: Sequence[str], lease_s: float) -> set[str]:
        """Extend ``owner``'s leases of ``run_ids``; returns the ones it still holds."""
        ...

    async def release_leases(self, owner: str, run_ids: Sequence[str]) -> None:
        """Let other processes take these runs at once (shutdown)."""
        ...

    # Approvals: a run parked ``waiting_approval`` is held by nobody; a decision, a cancel
    # or the expiry makes it claimable (``storage.stores.approval_waits``).

    async def decide(self, run_id: str, user_id: str, checkpoint_seq: int, checkpoint: bytes) -> bool:
        """Store the checkpoint carrying a decision if the run still waits at
        ``checkpoint_seq``; False when something else came first."""
        ...

    async def expire_waits(self) -> list[str]:
        """Make the parked runs whose deadline passed claimable; their ids."""
        ...

    async def claim_one(self, run_id: str, owner: str, lease_s: float) -> bool:
        """Take one unfinished run that nobody holds for ``owner``."""
        ...

    async def claim_one_epoch(self, run_id: str, owner: str, lease_s: float) -> int | None:
        """``claim_one``, returning the lease epoch the claim holds the run under (every
        step of the run must carry it), or ``None`` when it was not taken."""
        ...


class HistoryStore(Protocol):
    """A user's history (issue 25): conversations listed newest first, titled, renamed and
    deleted; runs looked up and listed; feedback on a run. Every read and write takes
    the user: another user's id reads like one that does not exist."""

    async def list_conversations(
        self, user_id: str, *, limit: int, before: tuple[float, str] | None = None
    ) -> list[ConversationSummary]: ...

    async def conversation(self, user_id: str, conversation_id: str) -> ConversationSummary | None: ...

    async def rename(self, user_id: str, conversation_id: str, title: str) -> bool: ...

    async def set_title_if_unset(self, user_id: str, conversation_id: str, title: str) -> bool: ...

    async def unfinished_runs(self, user_id: str, conversation_id: str) -> list[str]: ...

    async def delete_conversation(self, user_id: str, conversation_id: str) -> DeletedConversation | None:
        """Everything of the conversation gone (keywords and saved web answers unlinked);
        ``ConversationBusy`` while a run of it is unfinished; ``None``: no such conversation."""
        ...

    async def run(self, user_id: str, run_id: str) -> RunView | None: ...

    async def list_runs(
        self, user_id: str, *, conversation_id: str | None, limit: int, before: tuple[float, str] | None = None
    ) -> list[RunView]: ...

    async def set_feedback(self, user_id: str, run_id: str, score: int, comment: str | None) -> bool: ...

    async def idle_conversations(self, idle_before: float, limit: int) -> list[tuple[str, str]]: ...


class RetentionStore(Protocol):
    """Compaction of long-finished runs' event logs (``storage.event_folding``)."""

    async def compactable(self, finished_before: float, limit: int) -> list[str]: ...

    async def compact(self, run_ids: Sequence[str]) -> tuple[bool, int]:
        """(whether this process held the retention lock, event rows removed)."""
        ...


class LimitStore(Protocol):
    """Admission limits every replica shares: requests per key per minute, and the
    number of a user's unfinished runs (an indexed count, read at admission)."""

    async def hit(self, key: str, per_minute: int, now: float, *, deadline: float | None = None) -> RateDecision:
        """Count one request of ``key`` at ``now`` if the limit allows it, atomically
        across replicas; a refused request is not counted."""
        ...

    async def prune(self, now: float) -> int:
        """Forget windows that no longer count at ``now``; returns how many."""
        ...

    async def unfinished_runs(self, user_id: str, limit: int) -> list[str]:
        """Ids of up to ``limit`` of the user's runs that are queued, running or interrupted."""
        ...


class SecretStore(Protocol):
    """Named secrets every process on the database shares (``app_secrets``): generated
    once by whichever process needs one first, then read by all."""

    async def get_or_create(self, name: str, value: str) -> str:
        """Store ``value`` under ``name`` unless a value is already stored; return the
        stored one. Concurrent first calls (replicas starting together) all return the
        same value."""
        ...


class ToolCallLog(Protocol):
    def record(self, entry: ToolCallRecord) -> None:
        """Queue an entry (never blocks the stream)."""
        ...


class Health(Protocol):
    async def readiness(self) -> dict[str, Any]: ...


# --- interfaces of the other stores (drafts, keywords, external results, KB) follow ---


# --- drafts ---


class DraftStore(Protocol):
    """Workflow drafts, each owned by one caller. A draft is *live* while its
    ``last_access`` is after the ``live_after`` the caller passes (its TTL policy);
    a dead draft, or another owner's, reads as absent."""

    async def insert(self, draft: Draft, *, live_after: float, max_per_owner: int) -> bool:
        """Delete every draft that is no longer live, then store ``draft`` unless its
        owner already has ``max_per_owner`` live drafts (then return False) — as one
        atomic step, so concurrent inserts never overshoot the limit."""
        ...

    async def load(self, owner: str, draft_id: str, *, live_after: float) -> Draft | None: ...

    async def save(self, draft: Draft) -> None:
        """Store the draft's ``actions`` and ``last_access`` (using a draft refreshes it)."""
        ...

    async def purge(self, *, live_after: float) -> int:
        """Delete the drafts that are no longer live; return how many."""
        ...


# --- keywords and external results ---


class ExternalResultStore(Protocol):
    """Answers from external search, kept so keywords can point at them. Each has an
    ``owner`` (the user whose run fetched it); every read that could cross users takes
    ``owner``: a user id reads only that user's rows, ``None`` every row (the shared
    pool of ``AGENT_SHARED_WEB_ANSWERS``, and operator tools)."""

    async def save(self, result: ExternalResult) -> None:
        """Store ``result`` with its ``owner`` (its id and ``created_at`` are the
        caller's; not ``matched_keywords``)."""
        ...

    async def get(self, result_id: str, *, owner: str | None) -> ExternalResult | None: ...

    async def get_many(self, result_ids: Sequence[str], *, owner: str | None) -> list[ExternalResult]:
        """The results that exist and belong to ``owner`` (any owner when None), in the
        order of ``result_ids`` (unknown and other users' ids skipped)."""
        ...


class KeywordStore(Protocol):
    """Keywords by their normalised ``key`` (unique per owner: the user whose run
    indexed them), with usage counts and the associations to the queries, external
    results and conversations they came from. Reads take ``owner`` like
    ``ExternalResultStore``'s: a user id, or ``None`` for every owner."""

    async def upsert(
        self,
        keywords: Mapping[str, str],
        *,
        query_id: str | None,
        external_result_ids: Sequence[str] = (),
        conversation_id: str | None = None,
        owner: str,
        now: float,
        terms: Mapping[str, Sequence[str]] | None = None,
    ) -> list[KeywordRecord]:
        """``keywords`` maps key -> display form, all ``owner``'s (another owner's
        keyword of the same key is another row). A new key is stored with usage 1; a
        known one gets ``usage_count + 1`` and ``updated_at = last_used_at = now`` (its
        display form kept). Each keyword is associated once with every result id (or,
        with none given, with the query alone). ``terms`` (key -> matching terms) are
        stored for ``term_hits``, replacing the keyword's earlier ones. All or nothing;
        concurrent calls never lose an update. Returns the keywords as stored, in the
        order given. Raises ``ValueError`` when there is neither a query id nor a
        result id."""
        ...

    async def term_hits(self, terms: Collection[str], *, owner: str | None) -> list[KeywordTermHit]:
        """The live keywords of ``owner`` with at least one of ``terms`` that point at an external
        result: one hit per (keyword, result), with how many of the keyword's terms
        are among ``terms`` and how many it has."""
        ...

    async def set_terms(self, terms: Mapping[str, Sequence[str]]) -> None:
        """Replace the matching terms of these keys, every owner's (terms derive from
        the key alone; unknown keys are skipped)."""
        ...

    async def without_terms(self, limit: int) -> dict[str, str]:
        """Up to ``limit`` live keywords (key -> display) whose terms were never stored
        (indexed before terms existed)."""
        ...

    async def hits(self, keys: Collection[str], *, owner: str | None) -> list[KeywordHit]:
        """The live keywords of ``owner`` among ``keys`` that point at an external result, one hit
        per (keyword, result)."""
        ...

    async def touch(self, keys: Collection[str], *, owner: str | None, now: float) -> None:
        """Set ``last_used_at`` of these keywords of ``owner`` (a lookup used them)."""
        ...

    async def prune(self, *, usage_below: int, idle_before: float, now: float) -> int:
        """Delete the keywords used fewer than ``usage_below`` times whose last use
        (``last_used_at``, else ``updated_at``) is before ``idle_before``. Their
        associations stay, archived at ``now``. Every owner's (an operator's policy).
        Returns how many keywords went."""
        ...

    async def get(self, key: str, *, owner: str) -> KeywordRecord | None: ...

    async def associations(self, key: str, *, owner: str | None) -> list[KeywordAssociation]:
        """Every association of ``owner`` recorded for ``key``, archived ones included,
        oldest first."""
        ...

    async def count(self) -> int: ...


class ExternalVectorStore(Protocol):
    """Embeddings of saved external answers (their question and answer text) and of
    keywords, per embedder (``embed_model``), so later questions find them by meaning.
    Rows are never updated: a reader keeps the highest ``id`` it has loaded and asks
    for what came after.

    No owner column: a vector is an index entry, not content. It names a result id or a
    keyword key, and a hit reaches a user only through the owner-scoped reads of
    ``ExternalResultStore.get_many`` and ``KeywordStore.hits`` (a keyword key's vector
    serves every owner's keyword of that key)."""

    async def save(self, embed_model: str, rows: Sequence[NewExternalVector]) -> None:
        """Store the rows; a (kind, ref) that already has a vector of ``embed_model`` keeps it."""
        ...

    async def after(self, embed_model: str, dim: int, after_id: int, limit: int) -> list[ExternalVector]:
        """Up to ``limit`` vectors of ``embed_model`` at ``dim`` dimensions with an id
        above ``after_id``, in id order."""
        ...

    async def unembedded_results(self, embed_model: str, limit: int) -> list[ExternalResult]:
        """Up to ``limit`` external results without an ``answer`` vector of ``embed_model``."""
        ...

    async def unembedded_keywords(self, embed_model: str, limit: int) -> dict[str, str]:
        """Up to ``limit`` live keywords (key -> display) without a vector of ``embed_model``."""
        ...


# --- knowledge base index ---


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

    async def set_file_stamps(self, stamps: Sequence[tuple[str, str | None]]) -> None:
        """Set the file stamp of each ``(doc_id, stamp)`` (``None`` clears it), nothing else."""
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

    async def count_documents(self, scope: KBScope) -> int: ...

    async def selective_terms(self, terms: Sequence[str], min_matches: int, tuning: KBTextTuning) -> list[str]:
        """The query terms worth ranking by: without terms that match nothing, and
        without very common ones when the engine's ranking pays for them."""
        ...

    async def text_candidates(
        self, terms: Sequence[str], scope: KBScope, limit: int, tuning: KBTextTuning
    ) -> KBRanked:
        """Full-text (BM25) top ``limit`` chunks matching any of ``terms`` within ``scope``."""
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

    async def counts(self, embed_model: str | None, embed_dim: int | None) -> KBCounts: ...

    # re-embedding (``knowledge.backfill``)
    async def documents_without_vectors(
        self, embed_model: str, embed_dim: int, *, limit: int, after: str | None = None
    ) -> list[KBUnembedded]:
        """Up to ``limit`` documents, by id after ``after``, whose vectors are not of
        ``embed_model`` at ``embed_dim`` dimensions (missing, or another embedder's), each
        with its chunks' text in position order."""
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

    async def cosines(self, chunk_ids: Sequence[int], query: npt.NDArray[np.float32]) -> dict[int, float]:
        """Cosine similarity of each of these chunks' vectors to ``query``."""
        ...

    async def has_vectors(self, embed_model: str, dim: int) -> bool:
        """Whether any chunk has a vector of ``embed_model`` at ``dim`` dimensions."""
        ...

    async def count_vectors(self, embed_model: str, dim: int) -> int:
        """How many chunks have a vector of ``embed_model`` at ``dim`` dimensions."""
        ...

    async def vector_index_status(self) -> dict[str, Any]:
        """How scoped searches run on this server (``/readyz``): on PostgreSQL, which
        pgvector and whether its HNSW scans are iterative (recall differs a lot)."""
        ...


# --- the bundle an engine opens ---


class WriterHealth(Protocol):
    """The part of an engine's database the app reads: health, counters, a barrier."""

    @property
    def healthy(self) -> bool: ...

    @property
    def stats(self) -> Any: ...

    async def flush(self) -> None: ...


class StorageBundle(Protocol):
    """Every store of the service on one engine, as ``storage.open_storage`` returns it
    (``SqliteStorage`` or ``PostgresStorage``); the app factory holds one of these.
    Members are read-only properties so that an engine may hold its own store classes (a
    protocol attribute would be invariant)."""

    @property
    def engine(self) -> str: ...

    @property
    def schema_version(self) -> int: ...

    @property
    def db(self) -> WriterHealth: ...

    @property
    def conversations(self) -> ConversationStore: ...

    @property
    def runs(self) -> RunStore: ...

    @property
    def tool_calls(self) -> ToolCallLog: ...

    @property
    def drafts(self) -> DraftStore: ...

    @property
    def keywords(self) -> KeywordStore: ...

    @property
    def external_results(self) -> ExternalResultStore: ...

    @property
    def external_vectors(self) -> ExternalVectorStore: ...

    @property
    def kb_index(self) -> KBIndex: ...

    @property
    def limits(self) -> LimitStore: ...

    @property
    def secrets(self) -> SecretStore: ...

    @property
    def history(self) -> HistoryStore: ...

    @property
    def retention(self) -> RetentionStore: ...

    @property
    def run_feed(self) -> RunFeed | None:
        """News of runs committed by other processes; ``None`` for a one-process engine."""
        ...


    async def readiness(self) -> dict[str, Any]: ...

    async def close(self) -> None: ...
