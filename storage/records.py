"""The records the stores keep. No behaviour beyond encoding; importable from anywhere.

Like Starlette's ``types.py``: a small module of plain types, so the agent loop, the
routes and the engines can all speak of a ``RunEvent`` without importing each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from llm.types import Message

RunStatus = Literal["queued", "running", "completed", "failed", "cancelled", "interrupted", "waiting_approval"]
#: Statuses of a run that has not ended: another process may carry it on.
UNFINISHED: tuple[RunStatus, ...] = ("queued", "running", "interrupted")
#: A run parked until its user decides on a tool call: not ended, but held by no process
#: (no lease, no live-run slot, not counted among the user's unfinished runs); a decision,
#: a cancel or its expiry turns it ``interrupted``, and whichever process claims it first
#: carries it on. Its ``lease_until`` column holds the approval's deadline meanwhile.
WAITING_APPROVAL: RunStatus = "waiting_approval"
#: Statuses of a run that still holds its conversation (later runs wait for its end).
NOT_ENDED: tuple[RunStatus, ...] = (*UNFINISHED, WAITING_APPROVAL)
TERMINAL_STATUSES: tuple[RunStatus, ...] = ("completed", "failed", "cancelled")
TERMINAL_EVENT = "message_complete"
MultitaskPolicy = Literal["enqueue", "reject", "interrupt"]
MULTITASK_POLICIES: tuple[MultitaskPolicy, ...] = ("enqueue", "reject", "interrupt")


@dataclass(frozen=True, slots=True)
class RunEvent:
    """One event of a run; ``data`` is compact JSON text (one line: orjson escapes
    newlines), encoded once on append. ``wire`` is the SSE frame, built once and sent
    as-is to every follower."""

    seq: int
    event: str
    data: str

    @property
    def wire(self) -> bytes:
        return b"id: %d\nevent: %s\ndata: %s\n\n" % (self.seq, self.event.encode(), self.data.encode())


@dataclass(frozen=True, slots=True)
class NewRun:
    """A run as admitted: stored (with the user's message in ``input``) before the 2xx."""

    id: str
    conversation_id: str
    user_id: str
    context_type: str
    input: bytes
    multitask: MultitaskPolicy = "enqueue"
    #: The client's ``Idempotency-Key``: unique per user, it names this run for retries.
    idempotency_key: str | None = None
    #: With a key: the sha256 (hex) of what the request asked (``app.runs.records.
    #: request_fingerprint``), so a repeat of the key with another request is told apart.
    request_fingerprint: str | None = None
    #: The process that will execute the run leases it from admission for ``lease_s``.
    lease_owner: str | None = None
    lease_s: float = 0.0
    #: The user's cap on unfinished runs, counted in the transaction that stores this
    #: one (``TooManyRuns`` past it), so concurrent admissions on any replica cannot
    #: all take the last slot. ``None``: no cap.
    max_unfinished_per_user: int | None = None
    #: Runs the admitting process has already ended whose ending is still queued for
    #: the writer: not counted against the cap.
    ending_unwritten: tuple[str, ...] = ()
    #: The conversation's title as the client named it: set in the same transaction when
    #: the conversation has none yet (never overwriting one).
    title: str | None = None


@dataclass(frozen=True, slots=True)
class Admitted:
    """What a run's admission (``RunStore.create``) found and did besides storing it."""

    #: The ids of the conversation's other unfinished runs, oldest first.
    others: list[str]
    #: The run's ``title`` became the conversation's (it had none).
    titled: bool = False


@dataclass(frozen=True, slots=True)
class StoredRun:
    id: str
    conversation_id: str
    user_id: str
    context_type: str
    status: str
    created_at: float = 0.0
    input: bytes | None = None
    checkpoint: bytes | None = None
    checkpoint_seq: int = 0
    last_seq: int = 0
    multitask: str = "enqueue"
    resumes: int = 0
    #: Set by ``RunStore.claim`` only: when the lease this claim replaced had expired
    #: (epoch seconds; ``None`` when the run had no lease) — the take-over latency.
    lease_expired_at: float | None = None
    #: Set by ``RunStore.claim`` only: the lease epoch this claim holds the run under
    #: (``runs.lease_epoch`` as the claiming statement left it). Its steps carry it.
    lease_epoch: int = 0
    #: A cancel was asked for (on any replica) while the run had not ended: whoever
    #: executes or next claims it ends it ``cancelled``.
    cancel_requested: bool = False
    #: The fingerprint of the request its ``Idempotency-Key`` was first used for
    #: (``NewRun.request_fingerprint``); ``None`` without one, or stored before step 31.
    request_fingerprint: str | None = None


@dataclass(frozen=True, slots=True)
class RunSummary:
    """What a run did (seed 001), stored when it ends."""

    tool_call_count: int = 0
    used_tools: tuple[str, ...] = ()
    keyword_count: int = 0


@dataclass(slots=True)
class RunWrite:
    """What one step of a run stores, atomically: its events, its checkpoint, the
    messages it adds to the conversation (their ``seq`` is assigned inside the write
    transaction) and a status change. ``finished`` also forgets the run's input.
    ``user_id`` is the run's: a conversation is keyed by its user and its id.

    Not ``frozen``: a run builds one per streamed token (``app.runs.run``), and a frozen
    dataclass sets each of its fields through ``object.__setattr__`` - 3.5-7 us a write,
    a few per cent of the serving process's CPU per token (issue 23). Nothing changes one
    once built: a variant is a new one (``dataclasses.replace``)."""

    run_id: str
    conversation_id: str
    user_id: str
    events: Sequence[RunEvent] = ()
    checkpoint: bytes | None = None
    checkpoint_seq: int | None = None
    messages: Sequence[Message] = ()
    status: RunStatus | None = None
    finished: bool = False
    summary: RunSummary | None = None
    #: Written by the holder of the run's lease: the write renews the lease for
    #: ``lease_s``, or fails with ``LeaseLost`` (nothing stored) when another process
    #: took the run over. ``None``: no lease check (one process, or a rescue write).
    lease_owner: str | None = None
    lease_s: float = 0.0
    #: The claim the writer holds the run under (``runs.lease_epoch``): with several
    #: copies of the run in one process (a lapsed lease taken back while its old copy was
    #: still going), only the copy of the current claim may write (issue 23).
    lease_epoch: int = 0
    #: With ``status`` ``waiting_approval``: the run is parked for this many seconds (its
    #: lease handed back, its deadline kept in ``lease_until``) — no process holds it.
    wait_s: float | None = None


@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    """Seed 001's tool-call log entry."""

    run_id: str
    conversation_id: str
    user_id: str
    tool_use_id: str
    tool_name: str
    arguments: dict[str, Any]
    result: str
    status: str  # success | failure | retry | rejected
    error: str | None
    duration_ms: float
    retry_count: int


@dataclass(frozen=True, slots=True)
class StoredMessage:
    seq: int
    created_at: float
    payload: dict[str, Any] = field(default_factory=dict)


# --- records of the other stores (drafts, keywords, external results, KB) follow ---

# --- drafts: see storage/draft_records.py (Draft, DraftAction) ---
# --- keywords and external results: see storage/keyword_records.py (Citation,
#     ExternalResult, KeywordRecord, KeywordAssociation, KeywordHit) ---
