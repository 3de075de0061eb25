"""An agent loop built in-process, for unit tests: no HTTP server, no network.

``build_agent`` puts the real pieces together the way ``app/wiring.py`` does — the
``Agent`` loop, a ``ToolExecutor`` with the real argument validator, a ``ToolSelector``
over the catalog's context filter, the real prompts — around what a test hands in: a
provider (``llm.scripted.ScriptedProvider`` or ``tests.support.gated_provider``), a small
``ToolRegistry``, and optionally the conversation store and tool-call log (in memory by
default). ``run_agent`` runs one question to its ``message_complete`` on a ``Run`` with
no store (its events are visible as emitted) and returns it; ``names``/``payloads`` read
its events back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from agenttools.core.catalog import tools_for_context
from agenttools.core.executor import ToolExecutor
from agenttools.core.registry import ToolContext, ToolHandler, ToolOutcome, ToolRegistry, ToolSpec
from agenttools.core.validation import validate_arguments
from agenttools.rag.policy import FlowPolicy
from app.agent.deps import AgentSettings
from app.agent.loop import Agent
from app.agent.prompting import PromptService
from app.agent.selector import IndexState, ToolSelector
from app.runs.records import Caller, ChatInput
from app.runs.run import Run
from llm.provider import Provider
from llm.types import Message, ToolDefinition
from storage.records import RunEvent, ToolCallRecord

ALL_CONTEXTS = frozenset({"workflow", "tables", "knowledge"})


@dataclass(slots=True)
class NoHistory:
    """A conversation store with nothing in it."""

    async def load(self, conversation_id: str, user_id: str, *, limit: int = 400) -> list[Message]:
        return []


@dataclass(slots=True)
class ListToolLog:
    """The tool-call log, kept in a list."""

    records: list[ToolCallRecord] = field(default_factory=list)

    def record(self, entry: ToolCallRecord) -> None:
        self.records.append(entry)


def tool(
    name: str,
    properties: Mapping[str, Any] | None = None,
    *,
    required: Sequence[str] = (),
    groups: Iterable[str] = ALL_CONTEXTS,
    description: str = "",
) -> ToolSpec:
    """A test tool's spec: an object schema with ``properties``, no extra fields."""
    schema: dict[str, Any] = {
        "type": "object",
        "properties": dict(properties or {}),
        "required": list(required),
        "additionalProperties": False,
    }
    return ToolSpec(ToolDefinition(name, description or f"The {name} test tool.", schema), frozenset(groups))


def registry_of(*entries: tuple[ToolSpec, ToolHandler | None]) -> ToolRegistry:
    reg = ToolRegistry([spec for spec, _ in entries])
    for spec, handler in entries:
        if handler is not None:
            reg.set_handler(spec.name, handler)
    return reg


def build_agent(
    provider: Provider,
    registry: ToolRegistry,
    *,
    mandatory_contexts: tuple[str, ...] = ("knowledge",),
    core_tools: Callable[[str, Mapping[str, Any] | None], list[str]] | None = None,
    index_state: IndexState | None = None,
    conversations: Any = None,
    tool_log: Any = None,
    **settings: Any,
) -> Agent:
    """The agent loop as the wiring builds it, around the given provider and tools.
    Without an index the selector offers every tool of the context (its fallback)."""
    selector = ToolSelector(
        registry=registry,
        index_state=index_state if index_state is not None else IndexState(),
        core_tools=core_tools if core_tools is not None else (lambda context_type, context: []),
        context_filter=tools_for_context,
    )
    return Agent(
        provider=provider,
        registry=registry,
        executor=ToolExecutor(registry, validator=validate_arguments, timeout_s=10.0),
        selector=selector,
        prompts=PromptService(),
        conversations=conversations if conversations is not None else NoHistory(),
        tool_log=tool_log if tool_log is not None else ListToolLog(),
        http=None,
        settings=AgentSettings(mandatory_contexts=mandatory_contexts, idle_timeout_s=10.0, **settings),
        policy=FlowPolicy(),
    )


async def run_agent(
    agent: Agent,
    message: str,
    context_type: str = "workflow",
    context: dict[str, Any] | None = None,
    *,
    user_id: str = "alice",
) -> Run:
    """One run of ``agent`` to its end, on a run without a store."""
    run = Run(id="run_unit", conversation_id="conv_unit", user_id=user_id, context_type=context_type)
    run.question = message
    await agent.run(run, ChatInput(message, context_type, context or {}, run.conversation_id), Caller(user_id))
    return run


def names(events: Sequence[RunEvent] | Run) -> list[str]:
    evs = events.events if isinstance(events, Run) else events
    return [e.event for e in evs]


def payloads(events: Sequence[RunEvent] | Run, name: str) -> list[dict[str, Any]]:
    evs = events.events if isinstance(events, Run) else events
    return [orjson.loads(e.data) for e in evs if e.event == name]


def tool_results_sent(messages: Sequence[Message]) -> list[tuple[str, bool, Any]]:
    """(tool name, is_error, decoded content) of every tool result in ``messages``."""
    out: list[tuple[str, bool, Any]] = []
    for m in messages:
        for r in m.tool_results:
            try:
                content: Any = orjson.loads(r.content)
            except orjson.JSONDecodeError:
                content = r.content
            out.append((r.name, r.is_error, content))
    return out


def recording(result: Callable[[dict[str, Any]], Any], calls: list[dict[str, Any]]) -> ToolHandler:
    """A handler that keeps the arguments it was run with and answers ``result(args)``."""

    async def handler(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        calls.append(dict(args))
        return ToolOutcome(result(args))

    return handler
