"""Events of a run's life and of the model's output: from ``run_started`` to the one
``message_complete``, plus the ``heartbeat`` that keeps an idle stream observable.

Field order is the JSON key order on the wire; do not reorder fields.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from events.base import Event

__all__ = [
    "Clarification",
    "ContentChunk",
    "Discarded",
    "Error",
    "Heartbeat",
    "MessageComplete",
    "MessageStart",
    "RagScore",
    "Response",
    "RunEnding",
    "RunResumed",
    "RunStarted",
    "Source",
    "TokenUsage",
    "ToolSelection",
]

#: How a run ended (``message_complete.status``).
RunEnding = Literal["completed", "failed", "cancelled"]

class RunStarted(Event, frozen=True, kw_only=True):
    """The run exists: the first event of a new run."""

    name: ClassVar[str] = "run_started"
    run_id: str
    conversation_id: str


class Discarded(msgspec.Struct, frozen=True, kw_only=True):
    """Events a restarted service discarded: a model turn that was cut off, streamed again."""

    from_seq: int
    to_seq: int
    reason: str


class RunResumed(Event, frozen=True, kw_only=True):
    """A restarted service (or another replica) carried the run on from its last checkpoint."""

    name: ClassVar[str] = "run_resumed"
    run_id: str
    reason: Annotated[str, Meta(description="Why the run was carried on, in words.")]
    checkpoint_seq: Annotated[int, Meta(description="The last event id covered by the checkpoint.")]
    discarded: Discarded | None
    pending_tool_calls: Annotated[int, Meta(description="Tool calls of the step still to be answered.")]


class RagScore(msgspec.Struct, frozen=True, kw_only=True):
    """A tool found by the embedding search, with its similarity."""

    name: str
    score: float


class ToolSelection(Event, frozen=True, kw_only=True):
    """The tools offered to the model for this run (selected once per run)."""

    name: ClassVar[str] = "tool_selection"
    context_type: str
    core: Annotated[list[str], Meta(description="The context's core tools, always offered.")]
    rag: Annotated[list[RagScore], Meta(description="Tools found by the embedding search.")]
    fallback: Annotated[
        str | None, Meta(description="Why every tool of the context was offered instead (null: search worked).")
    ]
    tools: Annotated[list[str], Meta(description="Every tool offered, in order.")]
    history_error: Annotated[
        str,
        Meta(
            description="Why the conversation's earlier messages could not be loaded: the model was sent none "
            "of them this run (absent: loaded, or a new conversation)."
        ),
    ] | UnsetType = UNSET


class MessageStart(Event, frozen=True, kw_only=True):
    """A model turn begins."""

    name: ClassVar[str] = "message_start"
    turn: Annotated[int, Meta(ge=0, description="The turn's index in the run, from 0.")]


class ContentChunk(Event, frozen=True, kw_only=True):
    """A piece of the assistant's text, streamed as the model writes it."""

    name: ClassVar[str] = "content_chunk"
    chunk: str

    def to_json(self) -> bytes:
        # The hot path (one per token). msgspec's encoder writes strings exactly as
        # orjson does (tests/test_event_types.py checks every code point), and faster.
        return msgspec.json.encode(self)


class Clarification(Event, frozen=True, kw_only=True):
    """The agent needs the user to narrow or fix the question; the run ends after it."""

    name: ClassVar[str] = "clarification"
    type: Annotated[
        Literal["no_results", "overload"],
        Meta(description="no_results: nothing matched; overload: too much matched."),
    ]
    missing_info: Annotated[str, Meta(description="What the user should add or change, in words.")]


class Source(msgspec.Struct, frozen=True, kw_only=True):
    """A source the answer cites (something this run retrieved)."""

    id: str
    title: str
    kind: Literal["internal", "external"]
    url: Annotated[str, Meta(description="An http(s) link, when the source has one.")] | UnsetType = UNSET
    location: Annotated[str, Meta(description="Where in the document (a page, a section).")] | UnsetType = UNSET
    metadata: dict[str, Any] | UnsetType = UNSET


class Response(Event, frozen=True, kw_only=True):
    """The final answer, from `generate_response`."""

    name: ClassVar[str] = "response"
    answer: str
    sources: list[Source]
    confidence_score: Annotated[float, Meta(ge=0, le=1)] | None
    used_internal_kb: bool
    used_external_kb: bool


class Error(Event, frozen=True, kw_only=True):
    """A failure; always followed by `message_complete` — except an `error` without an
    `id` (`storage_unavailable`): the run's log could not be written or read, so its
    ending is not stored yet; the stream ends there, and a reconnect with `Last-Event-ID`
    reads on from what the log holds once the service is back."""

    name: ClassVar[str] = "error"
    message: str
    code: Annotated[
        str,
        Meta(
            description=(
                "provider_unreachable, provider_error, provider_rate_limited, provider_timeout, "
                "malformed_tool_call, mandatory_tool_missing, response_generation_failed, "
                "repeated_tool_call, max_loops, storage_unavailable, run_interrupted, internal_error "
                "(clients should accept codes they do not know)."
            )
        ),
    ]


class TokenUsage(msgspec.Struct, frozen=True, kw_only=True):
    """Model tokens the run used."""

    input_tokens: int
    output_tokens: int


class MessageComplete(Event, frozen=True, kw_only=True):
    """The run ended: the last event of every run, exactly once."""

    name: ClassVar[str] = "message_complete"
    status: RunEnding
    run_id: str
    conversation_id: str
    turns: Annotated[int, Meta(ge=0, description="Model turns the run took.")]
    usage: TokenUsage


class Heartbeat(Event, frozen=True, kw_only=True):
    """Sent after a quiet spell (no id: it is not part of the run's log), so a client can
    tell a stalled stream from a slow run."""

    name: ClassVar[str] = "heartbeat"
    ts: Annotated[int, Meta(description="Server time, Unix seconds.")]
