"""Provider-neutral chat types: messages, tool definitions, tool calls and stream events.

Every provider translates these to and from its own wire format; the agent loop only
ever sees these. They are plain dataclasses so they are cheap to build on the hot path
and easy to serialise (``to_dict`` / ``from_dict``) into the conversation store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

Role: TypeAlias = Literal["user", "assistant"]


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """What the model is told about a tool: a name, a description and a JSON Schema."""

    name: str
    description: str
    parameters: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call the model asked for.

    ``arguments`` is the decoded JSON object (``{}`` when the model sent nothing);
    ``raw_arguments`` keeps the text exactly as the model produced it, and
    ``parse_error`` is set when that text was not a JSON object, so the loop can tell
    the model instead of executing a guess.
    """

    id: str
    name: str
    arguments: dict[str, Any]
    raw_arguments: str = ""
    parse_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id, "name": self.name, "arguments": self.arguments}
        if self.raw_arguments:
            d["raw_arguments"] = self.raw_arguments
        if self.parse_error:
            d["parse_error"] = self.parse_error
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ToolCall:
        return cls(
            id=str(d["id"]),
            name=str(d["name"]),
            arguments=dict(d.get("arguments") or {}),
            raw_arguments=str(d.get("raw_arguments") or ""),
            parse_error=d.get("parse_error"),
        )


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The answer to one ``ToolCall``; ``content`` is the text the model reads (usually JSON)."""

    tool_call_id: str
    name: str
    content: str
    is_error: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool_call_id": self.tool_call_id,
            "name": self.name,
            "content": self.content,
            "is_error": self.is_error,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ToolResult:
        return cls(
            tool_call_id=str(d["tool_call_id"]),
            name=str(d["name"]),
            content=str(d.get("content") or ""),
            is_error=bool(d.get("is_error", False)),
        )


@dataclass(slots=True)
class Message:
    """One conversation entry.

    A ``user`` message carries either text or tool results (the answers to the
    previous assistant turn's calls). An ``assistant`` message carries text and/or
    tool calls. ``replay`` holds provider-private data that must be sent back
    unmodified on the next turn (Gemini's content parts with thought signatures);
    it is keyed by provider name so another provider simply ignores it. ``reminder``
    marks a ``user`` message the agent wrote itself (an enforcement reminder), so that
    nothing mistakes it for the user's question.
    """

    role: Role
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_results: list[ToolResult] = field(default_factory=list)
    replay: dict[str, Any] | None = None
    reminder: bool = False

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            d["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        if self.tool_results:
            d["tool_results"] = [r.to_dict() for r in self.tool_results]
        if self.replay:
            d["replay"] = self.replay
        if self.reminder:
            d["reminder"] = True
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Message:
        role = d.get("role")
        if role not in ("user", "assistant"):
            raise ValueError(f"unknown message role {role!r}")
        return cls(
            role=role,
            content=str(d.get("content") or ""),
            tool_calls=[ToolCall.from_dict(c) for c in d.get("tool_calls") or []],
            tool_results=[ToolResult.from_dict(r) for r in d.get("tool_results") or []],
            replay=d.get("replay"),
            reminder=d.get("reminder") is True,
        )


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens)

    def to_dict(self) -> dict[str, int]:
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens}


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One LLM turn: the same system prompt and tool list are sent every turn of a run."""

    system_prompt: str
    messages: list[Message]
    tools: list[ToolDefinition] = field(default_factory=list)
    max_tokens: int = 4096
    temperature: float | None = None


# --- stream events -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MessageStart:
    type: Literal["message_start"] = "message_start"


@dataclass(frozen=True, slots=True)
class ContentDelta:
    text: str
    type: Literal["content_delta"] = "content_delta"


@dataclass(frozen=True, slots=True)
class ThinkingDelta:
    text: str
    type: Literal["thinking_delta"] = "thinking_delta"


@dataclass(frozen=True, slots=True)
class ToolUseStart:
    """A tool call begins. ``index`` orders calls within the turn (parallel calls)."""

    id: str
    name: str
    index: int
    type: Literal["tool_use_start"] = "tool_use_start"


@dataclass(frozen=True, slots=True)
class ToolUseInput:
    """A piece of the JSON arguments of the call with this ``id`` (may be the whole)."""

    id: str
    partial_json: str
    type: Literal["tool_use_input"] = "tool_use_input"


@dataclass(frozen=True, slots=True)
class MessageComplete:
    """The turn ended. ``replay`` is provider-private state for the assistant message."""

    stop_for_tool_use: bool
    usage: Usage = Usage()
    stop_reason: str = ""
    replay: dict[str, Any] | None = None
    type: Literal["message_complete"] = "message_complete"


@dataclass(frozen=True, slots=True)
class StreamError:
    """The provider failed. ``code`` is one of ``provider_unreachable``,
    ``provider_error``, ``provider_rate_limited``, ``provider_timeout``."""

    message: str
    code: str = "provider_error"
    type: Literal["error"] = "error"


StreamEvent: TypeAlias = (
    MessageStart | ContentDelta | ThinkingDelta | ToolUseStart | ToolUseInput | MessageComplete | StreamError
)
