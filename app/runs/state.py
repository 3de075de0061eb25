"""The state of a run between steps, and its encoding as a checkpoint.

Kept apart from the agent's dependencies (as pydantic-ai keeps ``GraphAgentState`` apart
from ``GraphAgentDeps``): everything here is plain data, so a run can be stopped after
any step and carried on by another process from the stored checkpoint.

``pending`` is a model turn whose tool calls are not all answered yet: the results that
came back, and the side-effecting calls that were *started* (so a crash mid-call never
leads to running it twice: on resume such a call is answered "interrupted" instead).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from agenttools.core.log_redaction import redact_secrets
from agenttools.core.registry import EvidenceSource, RunToolState
from llm.types import Message, ToolCall, ToolResult, Usage

CHECKPOINT_VERSION = 1


_ARGUMENT_KEYS = frozenset({"args", "arguments"})


def stored_copy(message: Message) -> Message:
    """``message`` as the conversation keeps it: the arguments of its tool calls — also
    inside a provider's replay data (Gemini's ``function_call.args``) and the raw
    argument text — with the tool-call log's credential rules applied
    (``agenttools.core.log_redaction.redact_secrets``), so a password or a bearer token the
    model passed to a tool is not kept for the conversation's life."""
    if message.role != "assistant" or not (message.tool_calls or message.replay):
        return message
    calls = [
        replace(c, arguments=redact_secrets(c.arguments), raw_arguments=_redact_raw(c.raw_arguments))
        for c in message.tool_calls
    ]
    replay = _redact_replay(message.replay) if message.replay else message.replay
    return replace(message, tool_calls=calls, replay=replay)


def _redact_raw(raw: str) -> str:
    if not raw:
        return raw
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return str(redact_secrets(raw))
    return orjson.dumps(redact_secrets(parsed)).decode()


def _redact_replay(value: Any, depth: int = 0) -> Any:
    if depth > 30:
        return value
    if isinstance(value, dict):
        return {
            k: (_redact_raw(v) if isinstance(v, str) else redact_secrets(v))
            if k in _ARGUMENT_KEYS
            else _redact_replay(v, depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_redact_replay(v, depth + 1) for v in value]
    return value


@dataclass(slots=True)
class PendingCalls:
    calls: list[ToolCall]
    allowed: list[str]
    results: dict[str, ToolResult] = field(default_factory=dict)
    started: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "calls": [c.to_dict() for c in self.calls],
            "allowed": self.allowed,
            "results": {k: r.to_dict() for k, r in self.results.items()},
            "started": self.started,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PendingCalls:
        return cls(
            calls=[ToolCall.from_dict(c) for c in d["calls"]],
            allowed=list(d["allowed"]),
            results={k: ToolResult.from_dict(r) for k, r in d["results"].items()},
            started=list(d["started"]),
        )


@dataclass(slots=True)
class RunState:
    system: str
    tool_names: list[str]
    budget: int
    messages: list[Message]
    tools: RunToolState = field(default_factory=RunToolState)
    turns: int = 0
    usage: Usage = Usage()
    executions: int = 0
    nudges: dict[str, int] = field(default_factory=dict)
    malformed_strikes: int = 0
    failed_attempts: dict[str, int] = field(default_factory=dict)
    pending: PendingCalls | None = None
    #: Seed 001's run record: calls executed, the tools they used, keywords indexed.
    tool_calls: int = 0
    used_tools: list[str] = field(default_factory=list)
    keyword_count: int = 0
    #: Every answered call of the run in order, with whether it succeeded (metrics).
    call_outcomes: list[tuple[str, bool]] = field(default_factory=list)
    #: Messages added since the last stored step (written with the next one).
    unsaved: list[Message] = field(default_factory=list)
    #: The call the run is parked on (``waiting_approval``): ``{tool_use_id, name,
    #: expires_at}``; cleared once its decision is applied.
    awaiting: dict[str, Any] | None = None
    #: The user's decisions by ``tool_use_id``: ``{decision, arguments?}`` — written into
    #: the parked checkpoint by the decision route, read when the run is carried on.
    approvals: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add(self, message: Message) -> None:
        self.messages.append(message)
        self.unsaved.append(message)

    def take_unsaved(self) -> list[Message]:
        """The messages to store in the conversation, their tool calls' credentials
        masked (``stored_copy``); the run itself goes on with them whole."""
        out, self.unsaved = self.unsaved, []
        return [stored_copy(m) for m in out]

    def encode(self) -> bytes:
        t = self.tools
        return orjson.dumps(
            {
                "v": CHECKPOINT_VERSION,
                "system": self.system,
                "tool_names": self.tool_names,
                "budget": self.budget,
                "messages": [m.to_dict() for m in self.messages],
                "turns": self.turns,
                "usage": self.usage.to_dict(),
                "executions": self.executions,
                "nudges": self.nudges,
                "malformed_strikes": self.malformed_strikes,
                "failed_attempts": self.failed_attempts,
                "pending": self.pending.to_dict() if self.pending is not None else None,
                "awaiting": self.awaiting,
                "approvals": self.approvals,
                "record": {"tool_calls": self.tool_calls, "used_tools": self.used_tools,
                           "keyword_count": self.keyword_count,
                           "call_outcomes": [[n, ok] for n, ok in self.call_outcomes]},
                "tools": {
                    "sources": [_source_dict(s) for s in t.sources.values()],
                    "tools_called": t.tools_called,
                    "query_id": t.query_id,
                    "last_external_result_id": t.last_external_result_id,
                    "final_response": t.final_response,
                    "clarification": t.clarification,
                    "extras": t.extras,
                },
            },
            default=str,
        )

    @classmethod
    def decode(cls, raw: bytes) -> RunState:
        d = orjson.loads(raw)
        if d.get("v") != CHECKPOINT_VERSION:
            raise ValueError(f"unknown checkpoint version {d.get('v')!r}")
        t = d["tools"]
        tools = RunToolState(
            sources={s["id"]: EvidenceSource(**s) for s in t["sources"]},
            tools_called=list(t["tools_called"]),
            query_id=t["query_id"],
            last_external_result_id=t["last_external_result_id"],
            final_response=t["final_response"],
            clarification=t["clarification"],
            extras=dict(t["extras"]),
        )
        return cls(
            system=d["system"],
            tool_names=list(d["tool_names"]),
            budget=int(d["budget"]),
            messages=[Message.from_dict(m) for m in d["messages"]],
            tools=tools,
            turns=int(d["turns"]),
            usage=Usage(**d["usage"]),
            executions=int(d["executions"]),
            nudges=dict(d["nudges"]),
            malformed_strikes=int(d["malformed_strikes"]),
            failed_attempts=dict(d["failed_attempts"]),
            pending=PendingCalls.from_dict(d["pending"]) if d["pending"] is not None else None,
            tool_calls=int(d.get("record", {}).get("tool_calls", 0)),
            used_tools=list(d.get("record", {}).get("used_tools", [])),
            keyword_count=int(d.get("record", {}).get("keyword_count", 0)),
            call_outcomes=[(str(n), bool(ok)) for n, ok in d.get("record", {}).get("call_outcomes", [])],
            awaiting=d.get("awaiting"),
            approvals=dict(d.get("approvals") or {}),
        )

    def cancel_waiting(self) -> None:
        """A cancel reached the run while it was parked: the agent that carries it on
        ends it ``cancelled`` itself, so the waiting call gets its "not run" answer."""
        if self.awaiting is not None:
            self.approvals.setdefault(str(self.awaiting.get("tool_use_id")), {"decision": "cancel"})

    def approval_account(self) -> str | None:
        """Why a parked run is carried on (its ``run_resumed`` reason), or ``None`` for a
        run that was not parked."""
        if self.awaiting is None:
            return None
        name = self.awaiting.get("name", "a tool")
        decided = self.approvals.get(str(self.awaiting.get("tool_use_id")))
        if decided is None:
            return f"the approval of {name} was not decided in time"
        if decided.get("decision") == "cancel":
            return f"the run was cancelled while the call of {name} waited for approval"
        verb = {"approve": "approved", "edit": "edited and approved", "reject": "rejected"}.get(
            str(decided.get("decision")), "decided on"
        )
        return f"the user {verb} the call of {name}"


def _source_dict(s: EvidenceSource) -> dict[str, Any]:
    return {"id": s.id, "title": s.title, "url": s.url, "kind": s.kind, "location": s.location, "metadata": s.metadata}
