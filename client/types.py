"""The client's typed results (events themselves are the ``events`` classes)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

#: ``cancelling``: a cancel answered before the run ended (``POST …/cancel``, 202).
RunStatusName = Literal[
    "queued", "running", "completed", "failed", "cancelled", "interrupted", "cancelling", "waiting_approval"
]
ApprovalDecisionName = Literal["approve", "reject", "edit"]
ContextType = Literal["workflow", "tables", "knowledge"]
Multitask = Literal["enqueue", "reject", "interrupt"]


@dataclass(frozen=True, slots=True)
class StartedRun:
    """``POST /v1/agent/runs``. ``created`` is False when an ``Idempotency-Key`` the user
    sent before found the run it started (HTTP 200 instead of 201). ``stream_url``
    carries a signed token, for a browser ``EventSource``."""

    run_id: str
    conversation_id: str
    stream_url: str
    created: bool = True


@dataclass(frozen=True, slots=True)
class RunState:
    """A run's status, as ``POST /v1/agent/runs/{id}/cancel`` answers it."""

    run_id: str
    status: RunStatusName


@dataclass(frozen=True, slots=True)
class ApprovalAccepted:
    """``POST /v1/agent/runs/{id}/approvals/{tool_use_id}``: the decision was stored and the
    run goes on; ``stream_url`` (signed token) follows it from after ``approval_required``."""

    run_id: str
    tool_use_id: str
    decision: ApprovalDecisionName
    stream_url: str


@dataclass(frozen=True, slots=True)
class ConversationMessage:
    """One stored message; ``payload`` is the whole stored object (tool calls and all)."""

    seq: int
    created_at: float
    role: str
    content: Any
    payload: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Conversation:
    conversation_id: str
    messages: tuple[ConversationMessage, ...]


# --- a user's history (issue 25) ---


@dataclass(frozen=True, slots=True)
class ConversationSummary:
    """One of your conversations (``GET /v1/agent/conversations``)."""

    id: str
    title: str | None
    created_at: float
    updated_at: float
    last_run_status: str | None


@dataclass(frozen=True, slots=True)
class ConversationPage:
    conversations: tuple[ConversationSummary, ...]
    #: Pass back as ``cursor`` for the next page; ``None`` on the last one.
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file attached to a conversation (``POST /v1/agent/conversations/{id}/attachments``):
    searched by that conversation's questions only."""

    id: str
    filename: str
    size: int
    media_type: str
    chunks: int
    created_at: str
    title: str | None = None


@dataclass(frozen=True, slots=True)
class RunFeedback:
    score: Literal[1, -1]
    comment: str | None
    at: float


@dataclass(frozen=True, slots=True)
class RunInfo:
    """A run as ``GET /v1/agent/runs/{id}`` shows it; ``ending`` is ``None`` while it runs
    (else ``{"status", "error"}``); ``raw`` is the whole answer."""

    run_id: str
    conversation_id: str
    status: str
    created_at: float
    finished_at: float | None
    turns: int | None
    usage: Mapping[str, int] | None
    tool_call_count: int | None
    ending: Mapping[str, Any] | None
    feedback: RunFeedback | None
    raw: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class RunPage:
    runs: tuple[RunInfo, ...]
    next_cursor: str | None
