"""The tool registry: what a tool is (spec), how it runs (handler), and what it may touch (context).

The catalog fills in ``ToolSpec`` values; executor modules attach handlers. The agent loop
only talks to ``ToolRegistry``: it never knows which module implements a tool.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict

import httpx

from agenttools.core.untrusted import safe_url
from events import Event
from llm.types import ToolDefinition


class ToolFacts(TypedDict, total=False):
    """The facts of ``ToolSpec`` as keyword arguments, for the catalog's ``_spec`` helpers."""

    read_only: bool
    at_most_once: bool
    starts_at_send: bool
    knowledge_search: bool
    closed_by_enough: bool
    asks_approval: bool
    core_in: frozenset[str]
    core_rank: int


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as the catalog defines it, with the facts the rest of the service reads.

    ``examples`` are realistic user requests used only to build the retrieval text for the
    tool index; they are never sent to the model. ``groups`` are the contexts the tool
    belongs to (``workflow``, ``tables``, ``knowledge``).

    The facts are set where the tool is defined (``agenttools.core.catalog_*``, MCP tools in
    ``agenttools.mcp.catalog``), so no other module keeps a list of tool names: the executor,
    the tool step, the flow policy, the metrics and the selector ask the spec. Every fact
    defaults to the cautious answer (a write, run alone and at most once, core nowhere).
    """

    definition: ToolDefinition
    groups: frozenset[str]
    examples: tuple[str, ...] = ()
    #: It only reads: the calls of one turn that are all read-only run together, and a
    #: read-only call cut off by a crash is simply run again (unless ``at_most_once``).
    read_only: bool = False
    #: Read-only, but each call is paid for: never repeated when a run is carried on
    #: (a write is never repeated anyway).
    at_most_once: bool = False
    #: An at-most-once tool whose handler says when its request actually leaves (it awaits
    #: ``ToolContext.before_send``): such a call counts as started only then; any other
    #: at-most-once call counts as started before its handler runs.
    starts_at_send: bool = False
    #: Calling it is "searching the knowledge" for step 1 of the mandatory flow (also when
    #: it failed: the step was attempted), and for the metric of that step.
    knowledge_search: bool = False
    #: A search withdrawn once a review said ``enough`` (seed 004), so the next turn answers.
    closed_by_enough: bool = False
    #: By default a call waits for the user's decision before it runs: it changes the
    #: backend (a table configuration written), or an MCP server says it may destroy or
    #: does not say it only reads. ``AGENT_APPROVAL_TOOLS`` can override it.
    asks_approval: bool = False
    #: Whether a call waits for the user's decision here: ``asks_approval`` under the
    #: deployment's ``ApprovalRule``, set by the registry when the tool is added.
    needs_approval: bool = False
    #: The core sets it belongs to (stage 3 of selection): context types, or
    #: ``new_workflow`` for the empty workflow canvas, whose core set is its own.
    core_in: frozenset[str] = frozenset()
    #: Where it stands among the core tools of its contexts (lower first).
    core_rank: int = 0

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def repeatable(self) -> bool:
        """May a call that was cut off (crash, shutdown) simply be run again? Only reads
        that cost nothing; a write or a paid web search is run at most once."""
        return self.read_only and not self.at_most_once

    def embedding_text(self) -> str:
        """``"<name> — <description> | <example> | …"``: the text the tool index embeds."""
        parts = [f"{self.definition.name} \u2014 {self.definition.description}"]
        parts.extend(self.examples)
        return " | ".join(parts)


@dataclass(slots=True)
class EvidenceSource:
    """Something this run retrieved that an answer may cite."""

    id: str
    title: str = ""
    url: str | None = None
    kind: str = "internal"  # internal | external
    location: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id, "title": self.title, "kind": self.kind}
        url = safe_url(self.url)  # only http(s): a document's javascript:/data: link is dropped
        if url:
            d["url"] = url
        if self.location:
            d["location"] = self.location
        if self.metadata:
            d["metadata"] = self.metadata
        return d


@dataclass(slots=True)
class RunToolState:
    """Per-run state that tools share: what was retrieved and which tools ran.

    It lives exactly as long as one run; nothing here is global.
    """

    sources: dict[str, EvidenceSource] = field(default_factory=dict)
    tools_called: list[str] = field(default_factory=list)
    query_id: str | None = None
    last_external_result_id: str | None = None
    final_response: dict[str, Any] | None = None
    clarification: dict[str, Any] | None = None
    extras: dict[str, Any] = field(default_factory=dict)

    def add_source(self, source: EvidenceSource) -> None:
        self.sources.setdefault(source.id, source)


@dataclass(slots=True)
class ToolContext:
    """What a handler may use: the caller's identity and credentials, the UI context,
    the shared HTTP client, and the run's shared state."""

    user_id: str
    authorization: str | None
    conversation_id: str
    run_id: str
    context_type: str
    context: dict[str, Any]
    http: httpx.AsyncClient
    state: RunToolState = field(default_factory=RunToolState)
    #: Set (per call) for a tool the executor runs at most once and lets say when its
    #: request leaves (``ToolExecutor.starts_at_send``): the handler must await it before
    #: its request goes out — or hand it to a pooled transport (``llm.pool.ON_SEND``),
    #: which awaits it once a connection is granted. A call still waiting for a connection
    #: when the process dies was never sent, so it is run after a restart, not reported
    #: interrupted. Awaiting it more than once is harmless.
    before_send: Callable[[], Awaitable[None]] | None = None


@dataclass(slots=True)
class ToolOutcome:
    """What a handler returns.

    ``content`` is JSON-serialisable and goes to the model (encoded with orjson).
    ``events`` are streamed to the client *before* this call's ``tool_call_result``
    (previews, ``response``, ``clarification``).
    ``model_content`` overrides what the model sees when it must differ from
    ``content`` (a preview's fixed ``preview_sent`` answer).
    ``counts_as_execution`` is False for calls rejected by validation.
    """

    content: Any
    is_error: bool = False
    events: list[Event] = field(default_factory=list)
    model_content: Any = None
    counts_as_execution: bool = True
    ends_run: bool = False

    @classmethod
    def error(cls, message: str, **extra: Any) -> ToolOutcome:
        return cls(content={"error": message, **extra}, is_error=True)


ToolHandler = Callable[[dict[str, Any], ToolContext], Awaitable[ToolOutcome]]


def names_where(specs: Iterable[ToolSpec], test: Callable[[ToolSpec], bool]) -> list[str]:
    """The names of ``specs`` for which ``test`` holds, in their order."""
    return [s.name for s in specs if test(s)]


class UnknownToolError(KeyError):
    pass


@dataclass(frozen=True, slots=True)
class ApprovalRule:
    """Which tools wait for the user's decision (``AGENT_APPROVAL_TOOLS``): ``names`` is
    ``None`` for each tool's own default (``ToolSpec.asks_approval``), else exactly those
    names (empty: none). Applied to every spec the registry takes in, MCP tools that
    arrive later included, so the fact is read off the spec and nowhere else."""

    names: frozenset[str] | None = None

    @classmethod
    def from_setting(cls, names: tuple[str, ...] | None) -> ApprovalRule:
        return cls(None if names is None else frozenset(names))

    def applies(self, spec: ToolSpec) -> bool:
        return spec.asks_approval if self.names is None else spec.name in self.names


class ToolRegistry:
    """Specs by name, plus the handler that executes each one (if any yet)."""

    def __init__(self, specs: Iterable[ToolSpec] = (), *, approval: ApprovalRule | None = None) -> None:
        self._specs: dict[str, ToolSpec] = {}
        self._handlers: dict[str, ToolHandler] = {}
        self.approval = approval or ApprovalRule()
        #: Bumped whenever the set of specs changes: what is derived from it per context
        #: (the selector's context filter) is cached against this (issue 23).
        self.version = 0
        for spec in specs:
            self.add_spec(spec)

    def add_spec(self, spec: ToolSpec) -> None:
        if spec.name in self._specs:
            raise ValueError(f"duplicate tool {spec.name!r}")
        needs = self.approval.applies(spec)
        self._specs[spec.name] = spec if spec.needs_approval == needs else replace(spec, needs_approval=needs)
        self.version += 1

    def set_approval(self, rule: ApprovalRule) -> None:
        """Apply the deployment's approval rule to every spec, and to those added later."""
        self.approval = rule
        self.version += 1
        for name, spec in list(self._specs.items()):
            needs = rule.applies(spec)
            if spec.needs_approval != needs:
                self._specs[name] = replace(spec, needs_approval=needs)

    def set_handler(self, name: str, handler: ToolHandler) -> None:
        if name not in self._specs:
            raise UnknownToolError(name)
        self._handlers[name] = handler

    def remove(self, name: str) -> None:
        """Drop a tool and its handler (MCP tools come and go with their servers)."""
        self._specs.pop(name, None)
        self._handlers.pop(name, None)
        self.version += 1

    def spec(self, name: str) -> ToolSpec:
        try:
            return self._specs[name]
        except KeyError:
            raise UnknownToolError(name) from None

    def handler(self, name: str) -> ToolHandler | None:
        return self._handlers.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)

    def names(self) -> list[str]:
        return list(self._specs)

    def get(self, name: str) -> ToolSpec | None:
        """The spec of ``name``, or None for a name the model made up."""
        return self._specs.get(name)

    def names_where(self, test: Callable[[ToolSpec], bool]) -> list[str]:
        """The names of the tools for which ``test`` holds (a fact), in catalog order."""
        return names_where(self._specs.values(), test)

    def in_group(self, group: str) -> list[ToolSpec]:
        """Tools of a group, in catalog order."""
        return [s for s in self._specs.values() if group in s.groups]
