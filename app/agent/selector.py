"""The three-stage tool selector: context filter → embedding search → core merge.

It runs once per run. Every failure on the way (no embedder, an index still building or
whose build failed, a search that raises or times out) falls back to *all* tools of the
context — the Go original fell back to the core tools only, which hid most tools — and
the reason travels in the ``tool_selection`` event and the log.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from msgspec import UNSET

from agenttools.core.registry import ToolRegistry, ToolSpec
from events import RagScore, ToolSelection

log = logging.getLogger("agentchat.selector")

IndexStatus = Literal["disabled", "building", "ready", "failed"]


class Match(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def score(self) -> float: ...


class SearchOutcome(Protocol):
    @property
    def matches(self) -> Sequence[Match]: ...


class SearchableIndex(Protocol):
    async def search(
        self, query: str, *, top_k: int = 6, min_score: float = 0.0, allowlist: Any = None
    ) -> SearchOutcome: ...


@dataclass(slots=True)
class IndexState:
    """The tool index as the app sees it: absent, building, ready, or failed with a reason."""

    status: IndexStatus = "disabled"
    reason: str = "no embedder configured"
    index: SearchableIndex | None = None
    embedder_name: str | None = None
    built_ms: float | None = None
    #: Runs offered every tool of their context, by why (``index_disabled``,
    #: ``index_building``, ``index_failed``, ``search_failed``, ``empty_message``):
    #: ``agentchat_tool_selection_fallbacks_total``. The status above says whether the
    #: index is ready; this says how many runs a not-ready index or a failing search cost.
    fallbacks: dict[str, int] = field(default_factory=dict)
    #: Searches of a ready index that failed (a run's selection, or ``find_tools``, which
    #: then ranks by shared words), and the last one's error: ``/readyz``'s ``tool_index``
    #: and ``agentchat_tool_search_failures_total`` (a ready index whose searches fail —
    #: its embedder's server down — looked healthy there before).
    search_failures: int = 0
    #: The last failure's exception type and when (``/readyz`` answers anyone, and an
    #: embedder's error text may quote the message it was embedding — a user's; the run's
    #: own ``tool_selection`` event and the log carry the whole text).
    last_search_failure: str | None = None
    last_search_failure_at: str | None = None
    #: When a search of the index first succeeded after that failure (``None`` while none
    #: has): the failure is past. Kept beside it, not cleared, so ``/readyz`` tells a
    #: current failure from a recovered one and still shows what happened.
    last_search_failure_recovered_at: str | None = None

    def search_failed(self, exc: BaseException) -> None:
        self.search_failures += 1
        self.last_search_failure = type(exc).__name__
        self.last_search_failure_at = datetime.now(UTC).isoformat(timespec="seconds")
        self.last_search_failure_recovered_at = None

    def search_succeeded(self) -> None:
        """A search of the ready index answered: a failure before it is past."""
        if self.last_search_failure is not None and self.last_search_failure_recovered_at is None:
            self.last_search_failure_recovered_at = datetime.now(UTC).isoformat(timespec="seconds")

    def fell_back(self, reason: str) -> None:
        self.fallbacks[reason] = self.fallbacks.get(reason, 0) + 1

    def ready(self, index: SearchableIndex, built_ms: float) -> None:
        self.index, self.status, self.reason, self.built_ms = index, "ready", "", built_ms

    def failed(self, reason: str) -> None:
        self.index, self.status, self.reason = None, "failed", reason


@dataclass(frozen=True, slots=True)
class Selection:
    context_type: str
    core: list[str]
    rag: list[tuple[str, float]]
    fallback: str | None
    tools: list[str]
    elapsed_ms: float = 0.0

    def event(self, *, history_error: str | None = None) -> ToolSelection:
        """The run's first stored event after ``run_started``; ``history_error`` says the
        run goes on without its conversation's earlier messages (they could not be loaded)."""
        return ToolSelection(
            context_type=self.context_type,
            core=self.core,
            rag=[RagScore(name=n, score=round(s, 4)) for n, s in self.rag],
            fallback=self.fallback,
            tools=self.tools,
            history_error=UNSET if history_error is None else history_error,
        )


CoreToolsFn = Callable[[str, Mapping[str, Any] | None], list[str]]
ContextFilterFn = Callable[[Sequence[ToolSpec], str], list[ToolSpec]]


@dataclass(slots=True)
class ToolSelector:
    registry: ToolRegistry
    index_state: IndexState
    core_tools: CoreToolsFn
    context_filter: ContextFilterFn
    top_k: int = 6
    min_score: float = 0.0
    search_timeout_s: float = 10.0
    max_query_chars: int = 8000
    log_extra: dict[str, Any] = field(default_factory=dict)
    #: Stage 1's result per context type, against the registry's version: the filter
    #: walks the whole catalog, and its answer changes only when the catalog does.
    _contexts: dict[str, tuple[int, list[str], frozenset[str]]] = field(default_factory=dict)

    def _context_tools(self, context_type: str) -> tuple[list[str], frozenset[str]]:
        version = self.registry.version
        cached = self._contexts.get(context_type)
        if cached is None or cached[0] != version:
            names = [s.name for s in self.context_filter(list(self.registry), context_type)]
            cached = (version, names, frozenset(names))
            self._contexts[context_type] = cached
        return cached[1], cached[2]

    async def select(self, context_type: str, context: Mapping[str, Any] | None, message: str) -> Selection:
        started = time.perf_counter()
        # Stage 1: context filter.
        context_names, allowed = self._context_tools(context_type)
        core = [n for n in self.core_tools(context_type, context) if n in allowed]
        # Stage 2: embedding search.
        rag: list[tuple[str, float]] = []
        fallback: str | None = None
        search_ms: float | None = None
        state = self.index_state
        reason = ""  # the fallback's kind, for the count
        if state.status != "ready" or state.index is None:
            fallback = f"index {state.status}: {state.reason}" if state.reason else f"index {state.status}"
            reason = f"index_{state.status}"
        else:
            query = message.strip()[: self.max_query_chars]
            if not query:
                fallback, reason = "empty message", "empty_message"
            else:
                t0 = time.perf_counter()
                try:
                    async with asyncio.timeout(self.search_timeout_s):
                        result = await state.index.search(
                            query, top_k=self.top_k, min_score=self.min_score, allowlist=allowed
                        )
                    rag = [(m.name, float(m.score)) for m in result.matches if m.name in allowed]
                    search_ms = round((time.perf_counter() - t0) * 1000, 3)
                    state.search_succeeded()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # any search failure: fall back, never fail the run
                    fallback, reason = f"search failed: {type(exc).__name__}: {exc}"[:300], "search_failed"
                    state.search_failed(exc)
        # Stage 3: core merge (or fallback to the whole context set).
        if fallback is not None:
            state.fell_back(reason)
            tools = list(context_names)
        else:
            tools = []
            seen: set[str] = set()
            for name in [*core, *(n for n, _ in rag)]:
                if name in allowed and name not in seen:
                    seen.add(name)
                    tools.append(name)
        elapsed = (time.perf_counter() - started) * 1000
        # One record per run with every stage's figures (issue 23: a run's start logs one
        # line, not one per stage); a fallback the operator must see is a warning.
        quiet = fallback is None or state.status in ("disabled", "building")
        level = logging.INFO if quiet else logging.WARNING
        if log.isEnabledFor(level):
            log.log(level, "tool selection: final", extra={
                "stage": "tool_selection", "context_type": context_type, "total": len(self.registry),
                "kept": len(context_names), "core": core, "rag": [n for n, _ in rag],
                "scores": [round(s, 4) for _, s in rag], "top_k": self.top_k, "min_score": self.min_score,
                "search_ms": search_ms, "fallback": fallback, "final": tools, "elapsed_ms": round(elapsed, 3),
            })
        return Selection(context_type, core, rag, fallback, tools, elapsed)
