"""The tool step of a run: execute the pending calls of a model turn, store each result.

Each result is stored together with its events (previews, ``response``,
``tool_call_result``) and the run's checkpoint in one write, the moment it is back.
A call that must not run twice (a write, a paid search) is first stored as *started*;
if the process dies before its result is stored, carrying the run on answers it as
interrupted instead of running it again. For a tool that says when its request leaves
(``ToolExecutor.starts_at_send``: a paid search through its connection pool) it is stored
as started only then — durably, before the bytes go out — so a call that was still
waiting for a connection when the process died is simply run after the restart, once.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from agenttools.core.executor import ToolExecutor
from agenttools.core.log_redaction import log_text, redact_for_log, redact_secrets
from agenttools.core.registry import ToolContext, ToolOutcome
from agenttools.core.result_summary import summarize_result
from agenttools.core.untrusted import neutralize
from agenttools.rag.policy import FlowPolicy
from app.agent.approvals import (
    CANCELLED_WHILE_WAITING,
    ApprovalCancelled,
    ApprovalExpired,
    AwaitingApproval,
    approval_reason,
    decided_call,
    edited_note,
    rejected_outcome,
)
from app.agent.deps import AgentSettings, Prompts, ToolCallLog
from app.ops.run_metrics import RunMetrics
from app.ops.tracing import Tracing
from app.runs.run import Run
from app.runs.state import PendingCalls, RunState
from events import UNSET, Event, ToolCallResult, UnsetType
from llm.types import ToolCall, ToolResult
from storage.records import ToolCallRecord

MAX_TOOL_RESULT_CHARS = 24_000
#: The tool-call log keeps results and errors cut to these lengths (seed 001: "may be truncated").
LOGGED_RESULT_CHARS = 4000
LOGGED_ERROR_CHARS = 1000
INTERRUPTED = (
    "This call was cut off when the service restarted, and it may or may not have taken effect. "
    "It was not run again. Check its effect (for example by reading the object) before retrying."
)


@dataclass(slots=True)
class ToolStep:
    executor: ToolExecutor
    prompts: Prompts
    tool_log: ToolCallLog
    settings: AgentSettings
    flow: FlowPolicy
    metrics: RunMetrics | None = None
    #: A span per executed call when tracing is on (``app.ops.tracing``; set by the wiring).
    tracing: Tracing = field(default_factory=Tracing)

    async def run_pending(self, run: Run, ctx: ToolContext, state: RunState) -> list[ToolResult]:
        """Answer every pending call, in the model's order; read-only runs run together."""
        pending = state.pending
        assert pending is not None
        allowed = frozenset(pending.allowed)
        calls = pending.calls
        i = 0
        while i < len(calls):
            j = i + 1
            if self.executor.needs_approval(calls[i].name):  # alone: the run may park on it
                if calls[i].id not in pending.results:
                    await self._answer_decided(run, ctx, state, calls[i], allowed)
                i = j
                continue
            if self.executor.is_read_only(calls[i].name):
                while (
                    j < len(calls)
                    and self.executor.is_read_only(calls[j].name)
                    and not self.executor.needs_approval(calls[j].name)
                ):
                    j += 1
            batch = [c for c in calls[i:j] if c.id not in pending.results]
            if len(batch) == 1:
                await self._answer(run, ctx, state, batch[0], allowed)
            elif batch:
                await asyncio.gather(*(self._answer(run, ctx, state, c, allowed) for c in batch))
            i = j
        return [pending.results[c.id] for c in calls]

    async def _answer_decided(
        self, run: Run, ctx: ToolContext, state: RunState, call: ToolCall, allowed: frozenset[str]
    ) -> None:
        """A call that waits for the user: park the run (``AwaitingApproval``) until a
        decision is stored; then run it as decided — at most once, like any write — or
        answer the model with the rejection."""
        pending = state.pending
        assert pending is not None
        decided = state.approvals.get(call.id)
        if decided is None:
            if state.awaiting is not None and state.awaiting.get("tool_use_id") == call.id:
                raise ApprovalExpired(call.name)  # parked on it and carried on undecided
            raise AwaitingApproval(call, approval_reason(call.name))
        if decided.get("decision") == CANCELLED_WHILE_WAITING:
            raise ApprovalCancelled(call.name)
        state.awaiting = None
        if decided.get("decision") == "reject":
            self._store(run, state, pending, call, rejected_outcome(), 0.0)
            return
        await self._answer(run, ctx, state, decided_call(call, decided), allowed,
                           edited=decided.get("decision") == "edit")

    async def _answer(
        self, run: Run, ctx: ToolContext, state: RunState, call: ToolCall, allowed: frozenset[str],
        *, edited: bool = False,
    ) -> None:
        pending = state.pending
        assert pending is not None
        if call.id in pending.started and not self.executor.is_repeatable(call.name):
            outcome = ToolOutcome(content={"error": "interrupted", "reason": INTERRUPTED}, is_error=True)
            self._store(run, state, pending, call, outcome, 0.0)
            return
        refusal = self.flow.before_call(call.name, call.arguments, state.tools)
        if refusal is not None:
            outcome = ToolOutcome(
                content={"error": refusal.code, "reason": refusal.reason}, is_error=True, counts_as_execution=False
            )
            self._store(run, state, pending, call, outcome, 0.0)
            return
        mark: StartMark | None = None
        if self.executor.starts_at_send(call.name):
            mark = StartMark(run, state, call.id)
            ctx = replace(ctx, before_send=mark)
        elif not self.executor.is_repeatable(call.name):
            pending.started.append(call.id)
            await run.emit_step(checkpoint=state.encode())
        outcome, duration_ms = await self._execute(state, ctx, call, allowed)
        if edited:
            outcome = edited_note(outcome, call)
        if mark is not None:
            mark.raise_failure()  # the mark was not stored: fail as a mark before the call would
        self.flow.record(call.name, call.arguments, outcome, state.tools)
        self._store(run, state, pending, call, outcome, duration_ms)

    async def _execute(
        self, state: RunState, ctx: ToolContext, call: ToolCall, allowed: frozenset[str]
    ) -> tuple[ToolOutcome, float]:
        started = time.perf_counter()
        last = self.flow.last
        if call.name != last and state.executions >= self.settings.max_tool_calls:
            outcome = ToolOutcome(
                content={
                    "error": "tool_budget_exhausted",
                    "reason": self.prompts.budget_exhausted(self.settings.max_tool_calls),
                },
                is_error=True,
                counts_as_execution=False,
            )
        else:
            if call.name != last:
                state.executions += 1
            with self.tracing.tool_span(call.name) as span:
                outcome = await self.executor.execute(call, ctx, allowed=allowed)
                span.finished(not outcome.is_error)
            if not outcome.counts_as_execution and call.name != last:
                state.executions -= 1
        return outcome, (time.perf_counter() - started) * 1000

    def _store(
        self, run: Run, state: RunState, pending: PendingCalls, call: ToolCall, outcome: ToolOutcome, duration_ms: float
    ) -> None:
        """Record the result and emit its events with the checkpoint, in one write (no
        await in between, so concurrent calls never interleave their steps)."""
        if outcome.counts_as_execution and not outcome.is_error:
            state.tools.tools_called.append(call.name)
        state.call_outcomes.append((call.name, not outcome.is_error))
        if self.metrics is not None and outcome.counts_as_execution:
            self.metrics.tool_finished(call.name, not outcome.is_error, duration_ms / 1000)
        if outcome.counts_as_execution:
            state.tool_calls += 1
            if call.name not in state.used_tools:
                state.used_tools.append(call.name)
            if isinstance(outcome.content, dict) and not outcome.is_error:
                count = outcome.content.get("keyword_count")
                if isinstance(count, int) and not isinstance(count, bool):
                    state.keyword_count += count
        body = outcome.model_content if outcome.model_content is not None else outcome.content
        body = neutralize(body)  # retrieved text must not carry chat-template control tokens
        content = body if isinstance(body, str) else orjson.dumps(body, default=str).decode()
        if len(content) > MAX_TOOL_RESULT_CHARS:
            content = content[:MAX_TOOL_RESULT_CHARS] + f"… [truncated: {len(content)} characters in all]"
        result = ToolResult(call.id, call.name, content, outcome.is_error)
        pending.results[call.id] = result
        done = ToolCallResult(
            tool_use_id=call.id,
            tool_name=call.name,
            is_error=outcome.is_error,
            duration_ms=round(duration_ms, 2),
            error=failure_reason(outcome.content) if outcome.is_error else UNSET,
            # The caller's result, not ``model_content`` (a preview's fixed note to the model).
            summary=UNSET if outcome.is_error else summarize_result(outcome.content),
            arguments=streamed_arguments(call.arguments),
        )
        events: list[Event] = [*outcome.events, done]
        self.log_call(run, state, call, outcome, duration_ms)
        run.emit_step(events, checkpoint=state.encode())

    def log_call(self, run: Run, state: RunState, call: ToolCall, outcome: ToolOutcome, duration_ms: float) -> None:
        """Seed 001's log: success | failure, plus ``rejected`` for calls refused before
        they ran (validation, prerequisites, the flow's first step); a call after earlier
        failed attempts of the same tool in this run is logged as ``retry`` with how many
        came before. Arguments and result are redacted (``agenttools.core.log_redaction``)."""
        body = outcome.model_content if outcome.model_content is not None else outcome.content
        retries = state.failed_attempts.get(call.name, 0)
        if outcome.is_error:
            status = "failure" if outcome.counts_as_execution else "rejected"
            state.failed_attempts[call.name] = retries + 1
        else:
            status = "retry" if retries else "success"
        self.tool_log.record(
            ToolCallRecord(
                run_id=run.id,
                conversation_id=run.conversation_id,
                user_id=run.user_id,
                tool_use_id=call.id,
                tool_name=call.name,
                arguments=redact_for_log(call.arguments),
                result=log_text(body, LOGGED_RESULT_CHARS),
                status=status,
                error=log_text(failure_reason(outcome.content), LOGGED_ERROR_CHARS) if outcome.is_error else None,
                duration_ms=round(duration_ms, 2),
                retry_count=retries,
            )
        )


@dataclass(slots=True)
class StartMark:
    """``ToolContext.before_send`` of one call: the first await records the call as
    started and waits until that checkpoint is durable; later awaits (a second request of
    the same call) wait for the same write. Its failure is kept, because a handler may
    turn any exception into a tool error: the step re-raises it."""

    run: Run
    state: RunState
    call_id: str
    write: asyncio.Future[None] | None = None

    async def __call__(self) -> None:
        if self.write is None:
            pending = self.state.pending
            assert pending is not None
            pending.started.append(self.call_id)
            self.write = self.run.emit_step(checkpoint=self.state.encode())
        await asyncio.shield(self.write)

    def raise_failure(self) -> None:
        write = self.write
        if write is not None and write.done() and not write.cancelled() and (exc := write.exception()) is not None:
            raise exc


#: A call's arguments longer than this as JSON are left out of ``tool_call_result``
#: (a whole workflow, a long answer): the stream shows those through their own events.
MAX_STREAMED_ARGUMENTS_CHARS = 8_000


def streamed_arguments(arguments: dict[str, Any]) -> dict[str, Any] | UnsetType:
    """The arguments the call ran with, for ``tool_call_result`` (the AI SDK face's tool
    ``input``): the same copy the conversation keeps (credentials masked), unless long."""
    shown = redact_secrets(arguments)
    if len(orjson.dumps(shown, default=str)) > MAX_STREAMED_ARGUMENTS_CHARS:
        return UNSET
    return shown if isinstance(shown, dict) else UNSET


def failure_reason(content: object) -> str:
    """A failed call's reason in one short line, for the client (``tool_call_result.error``)."""
    if isinstance(content, dict):
        parts = [str(content[k]) for k in ("error", "reason", "detail") if content.get(k)]
        text = ": ".join(dict.fromkeys(parts)) or str(content)
    else:
        text = str(content)
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:299] + "…"
