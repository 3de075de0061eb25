"""Run outcomes, recorded by the agent loop: per-tool latency and outcome, run duration,
and the seed-002 success criteria read off a run's ordered tool calls (SC-001 the
knowledge base searched, SC-002 ``generate_response`` right the first time, SC-003
keywords indexed after Perplexity, SC-005 latency, SC-007 failures a retry recovered).

Its own module because it owns the *interpretation* of a run (``assess``): the loop
reports facts (``FinishedRun``), this decides what they mean for the criteria.
"""

from __future__ import annotations

from collections.abc import Collection, Container, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

from prometheus_client import CollectorRegistry, Counter, Histogram

from agenttools.core.catalog import names_where
from agenttools.rag.policy import GENERATE_RESPONSE, INDEX_KEYWORDS, PERPLEXITY_SEARCH

#: The flow's roles the success criteria are read off (the policy's own steps).
RESPONSE_TOOL: Final = GENERATE_RESPONSE
WEB_TOOL: Final = PERPLEXITY_SEARCH
KEYWORD_TOOL: Final = INDEX_KEYWORDS

#: SC-005 asks for 95 % under 10 s: 10 is a bucket boundary.
LATENCY_BUCKETS: Final = (0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 300.0)
TOOL_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: Tool names the model invents are reported under this label, so they cannot grow
#: the number of series without bound.
OTHER_TOOL: Final = "other"


class ToolCallFact(NamedTuple):
    """One tool call of a run, in call order: its name and whether it succeeded
    (a plain ``(name, ok)`` tuple is accepted wherever this is)."""

    name: str
    ok: bool


@dataclass(frozen=True, slots=True)
class FinishedRun:
    """What the agent loop knows when a run ends; ``RunMetrics.run_finished`` reads it.

    ``tool_calls`` are the run's executed calls in order (a call rejected by validation
    counts, with ``ok=False``: the model did call the tool). ``seconds`` is the wall time
    from the run's start to its ``message_complete``; ``response_seconds`` the time to
    the ``response`` event when there was one (defaults to ``seconds``).
    ``response_reminders`` counts the reminders sent because the run tried to end without
    ``generate_response``; ``mandatory`` says whether the mandatory flow applied.
    """

    status: str
    seconds: float
    tool_calls: Sequence[ToolCallFact | tuple[str, bool]] = ()
    context_type: str = "knowledge"
    mandatory: bool = True
    response_seconds: float | None = None
    response_reminders: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    def calls(self) -> list[ToolCallFact]:
        return [ToolCallFact(str(name), bool(ok)) for name, ok in self.tool_calls]

    @property
    def responded(self) -> bool:
        return any(c.name == RESPONSE_TOOL and c.ok for c in self.calls())


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """The success-criteria facts of one run, derived from its ``FinishedRun``.

    ``None`` means "does not apply to this run" (nothing is counted for it).
    """

    kb_searched: bool | None  # SC-001
    response: str | None  # SC-002: first_try | retried | failed
    perplexity: bool  # SC-003: a Perplexity search succeeded ...
    keywords_indexed: bool  # ... and index_keywords succeeded after it
    retries: tuple[tuple[str, bool], ...]  # SC-007: (tool, recovered) per retried failure


def knowledge_search_tools() -> frozenset[str]:
    """The tools whose call counts as "searched the knowledge base" (issue 12, item 1), also
    when it failed (the step was attempted): their ``knowledge_search`` fact."""
    return frozenset(names_where(lambda s: s.knowledge_search))


def assess(summary: FinishedRun, kb_tools: Collection[str] | None = None) -> RunOutcome:
    """Read the success criteria off one run (pure: unit-testable without a registry).
    ``kb_tools``: the knowledge searches (by default the catalog's)."""
    if kb_tools is None:
        kb_tools = knowledge_search_tools()
    calls = summary.calls()
    ended = summary.status in {"completed", "failed"}  # cancelled / interrupted runs say nothing

    kb_searched: bool | None = None
    if ended and summary.mandatory:
        kb_searched = any(c.name in kb_tools for c in calls)

    response: str | None = None
    answers = [c.ok for c in calls if c.name == RESPONSE_TOOL]
    if ended and (answers or summary.mandatory):
        if answers and answers[0] and summary.response_reminders == 0:
            response = "first_try"
        elif any(answers):
            response = "retried"
        else:
            response = "failed"

    web_at = next((i for i, c in enumerate(calls) if c.name == WEB_TOOL and c.ok), None)
    keywords = web_at is not None and any(c.name == KEYWORD_TOOL and c.ok for c in calls[web_at + 1 :])
    return RunOutcome(kb_searched, response, web_at is not None, keywords, tuple(_retries(calls)))


def _retries(calls: Sequence[ToolCallFact]) -> Iterator[tuple[str, bool]]:
    """A failed call of a tool followed by more calls of the same tool is one retry
    episode; it recovered when one of those later calls succeeded. A failure the model
    never retried is not an attempt and is not counted."""
    failing: dict[str, bool] = {}  # tool -> retried since its first unrecovered failure
    for call in calls:
        if call.name in failing:
            if call.ok:
                del failing[call.name]
                yield call.name, True
            else:
                failing[call.name] = True
        elif not call.ok:
            failing[call.name] = False
    for name, retried in failing.items():
        if retried:
            yield name, False


class RunMetrics:
    """The recorder the agent loop calls; all metrics are registered in ``registry``."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        tool_names: Container[str] | None = None,
        kb_tools: Collection[str] | None = None,
    ) -> None:
        """``tool_names``: the known tools (the registry); other names are reported as
        ``other``. ``kb_tools``: the tools that count as searching the knowledge base (by
        default the catalog's knowledge searches)."""
        self._tool_names = tool_names
        self._kb_tools = knowledge_search_tools() if kb_tools is None else frozenset(kb_tools)
        self.tool_seconds = Histogram(
            "agentchat_tool_call_duration_seconds",
            "Tool call latency, by tool and outcome (ok | error).",
            ["tool", "outcome"],
            buckets=TOOL_BUCKETS,
            registry=registry,
        )
        self.run_seconds = Histogram(
            "agentchat_run_duration_seconds",
            "Run duration from start to message_complete, by final status.",
            ["status"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.response_seconds = Histogram(
            "agentchat_response_latency_seconds",
            "SC-005: end-to-end latency from the user's message to the final response event.",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.first_token_seconds = Histogram(
            "agentchat_time_to_first_token_seconds",
            "Time from a run's start to its first streamed answer token (runs carried on after a "
            "restart or take-over are left out: their start is not this process's).",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.provider_errors = Counter(
            "agentchat_provider_errors",
            "Model turns that failed, by our error code (provider_timeout, provider_rate_limited, ...).",
            ["code"],
            registry=registry,
        )
        self.history_failures = Counter(
            "agentchat_history_load_failures",
            "Runs whose conversation's earlier messages could not be loaded: the model was sent none of them "
            "(said in the run's tool_selection.history_error).",
            registry=registry,
        )
        self.tokens = Counter(
            "agentchat_tokens",
            "Model tokens of finished runs as the provider reported them, by direction (in | out).",
            ["direction"],
            registry=registry,
        )
        self.kb_runs = Counter(
            "agentchat_kb_search_runs",
            "SC-001: finished runs under the mandatory flow, by whether the knowledge base was searched.",
            ["context", "kb_searched"],
            registry=registry,
        )
        self.response_outcomes = Counter(
            "agentchat_generate_response_runs",
            "SC-002: finished runs by how generate_response went (first_try | retried | failed).",
            ["outcome"],
            registry=registry,
        )
        self.perplexity_runs = Counter(
            "agentchat_perplexity_runs",
            "SC-003: runs with a successful perplexity_search.",
            registry=registry,
        )
        self.perplexity_keyword_runs = Counter(
            "agentchat_perplexity_runs_keywords_indexed",
            "SC-003: runs with a successful perplexity_search followed by a successful index_keywords.",
            registry=registry,
        )
        self.tool_retries = Counter(
            "agentchat_tool_retries",
            "SC-007: failed tool calls the model retried, by tool and whether a retry succeeded "
            "(recovered | unrecovered).",
            ["tool", "outcome"],
            registry=registry,
        )
        for outcome in ("first_try", "retried", "failed"):
            self.response_outcomes.labels(outcome)

    def _tool_label(self, name: str) -> str:
        if self._tool_names is None:
            return name
        return name if name in self._tool_names else OTHER_TOOL

    def tool_finished(self, name: str, ok: bool, seconds: float) -> None:
        """After each executed tool call (``ok`` is ``not result.is_error``)."""
        self.tool_seconds.labels(self._tool_label(name), "ok" if ok else "error").observe(max(0.0, seconds))

    def first_token(self, seconds: float) -> None:
        """Once per run, at its first streamed answer token."""
        self.first_token_seconds.observe(max(0.0, seconds))

    def provider_error(self, code: str) -> None:
        """A model turn that ended in an error (``code`` is ours, a short fixed set)."""
        self.provider_errors.labels(code).inc()

    def history_unavailable(self) -> None:
        """A run that goes on without its conversation's history (it could not be loaded)."""
        self.history_failures.inc()

    def run_finished(self, summary: FinishedRun) -> RunOutcome:
        """Once per run, when its ``message_complete`` is emitted. Returns what was read."""
        outcome = assess(summary, self._kb_tools)
        self.run_seconds.labels(summary.status).observe(max(0.0, summary.seconds))
        if summary.input_tokens > 0:
            self.tokens.labels("in").inc(summary.input_tokens)
        if summary.output_tokens > 0:
            self.tokens.labels("out").inc(summary.output_tokens)
        if summary.responded:
            latency = summary.seconds if summary.response_seconds is None else summary.response_seconds
            self.response_seconds.observe(max(0.0, latency))
        if outcome.kb_searched is not None:
            context = summary.context_type if summary.context_type in {"workflow", "tables", "knowledge"} else "other"
            self.kb_runs.labels(context, "true" if outcome.kb_searched else "false").inc()
        if outcome.response is not None:
            self.response_outcomes.labels(outcome.response).inc()
        if outcome.perplexity:
            self.perplexity_runs.inc()
            if outcome.keywords_indexed:
                self.perplexity_keyword_runs.inc()
        for tool, recovered in outcome.retries:
            self.tool_retries.labels(self._tool_label(tool), "recovered" if recovered else "unrecovered").inc()
        return outcome
