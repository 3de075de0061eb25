"""Records of a user's history: their conversations as a list, their runs as looked up,
a run's feedback, and what a retention pass did. Plain types, importable from anywhere
(like ``storage.records``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ConversationSummary:
    """One row of ``GET /v1/agent/conversations``."""

    id: str
    title: str | None
    created_at: float
    updated_at: float
    #: The status of its newest run (``None``: no run yet, e.g. an imported transcript).
    last_run_status: str | None


@dataclass(frozen=True, slots=True)
class Feedback:
    score: int  # 1 or -1
    comment: str | None
    at: float


@dataclass(frozen=True, slots=True)
class RunView:
    """A run as ``GET /v1/agent/runs/{id}`` shows it: its row, and its ending read from
    its event log (the ``message_complete`` and the last ``error``)."""

    id: str
    conversation_id: str
    user_id: str
    context_type: str
    status: str
    created_at: float
    started_at: float | None
    finished_at: float | None
    tool_call_count: int | None
    resumes: int
    #: ``message_complete``'s data (status, turns, usage), ``None`` while running.
    complete: dict[str, Any] | None
    #: The last ``error`` event's data, if any.
    error: dict[str, Any] | None
    feedback: Feedback | None
    events_compacted_at: float | None


@dataclass(frozen=True, slots=True)
class DeletedConversation:
    """What deleting a conversation removed (counts, for the log line and the tests)."""

    runs: int
    messages: int
    events: int
    tool_calls: int
    drafts: int
    unlinked: int


@dataclass(frozen=True, slots=True)
class HistoryCut:
    """What cutting a conversation's history back took out: its last ``messages``
    (the turns the model no longer sees), from message ``from_seq`` on."""

    messages: int
    from_seq: int | None


@dataclass(frozen=True, slots=True)
class RetentionPass:
    """What one retention pass did."""

    runs_compacted: int = 0
    events_removed: int = 0
    conversations_deleted: int = 0
    #: ``False`` when another replica held the retention lock (PostgreSQL): nothing done.
    ran: bool = True


__all__ = ["ConversationSummary", "DeletedConversation", "Feedback", "HistoryCut", "RetentionPass", "RunView"]
