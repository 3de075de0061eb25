"""How a run ends: the last step with exactly one ``message_complete`` (and the run's
metrics), a cancelled turn's partial text kept, unanswered tool calls answered, a run
parked for an approval, and a run released at shutdown for the next process.

Apart from the loop because every ending writes the same durable account whatever
step the run was in; the loop only decides which ending it is.
"""

from __future__ import annotations

import asyncio
import logging
import time

import orjson

from app.agent.approvals import AwaitingApproval
from app.agent.run_scope import RunScope
from app.ops.run_metrics import FinishedRun, RunMetrics
from app.runs.run import terminal_event
from app.runs.state import RunState
from events import ApprovalRequired, Error, Event, RunEnding, TokenUsage
from llm.types import Message, ToolResult, Usage
from storage.records import RunSummary

log = logging.getLogger("agentchat.agent")


def finish_run(
    scope: RunScope,
    status: RunEnding,
    error: Error | None,
    *,
    metrics: RunMetrics | None,
    mandatory: bool,
    last_tool: str,
) -> None:
    """The last step: the run's remaining messages, ``error`` if any, then exactly
    one ``message_complete`` — all in one write."""
    run, state = scope.run, scope.state
    events: list[Event] = [] if error is None else [error]
    usage = state.usage if state else Usage()
    events.append(
        terminal_event(
            run,
            status,
            turns=state.turns if state else 0,
            usage=TokenUsage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens),
        )
    )
    summary = RunSummary(state.tool_calls, tuple(state.used_tools), state.keyword_count) if state is not None else None
    if metrics is not None:
        metrics.run_finished(
            FinishedRun(
                status=status,
                seconds=time.time() - run.created_at,
                tool_calls=tuple(state.call_outcomes) if state else (),
                context_type=scope.chat.context_type,
                mandatory=mandatory,
                response_reminders=state.nudges.get(last_tool, 0) if state else 0,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
            )
        )
    messages: list[Message] = []
    if state is None and run.question:
        messages = [Message("user", run.question)]  # ended before its first step
    if state is not None:
        if status != "completed":
            answer_dangling(state)
        messages = state.take_unsaved()
    run.emit_step(events, messages=messages, finished=True, summary=summary)


def close_cancelled(scope: RunScope) -> None:
    state = scope.state
    if state is not None and scope.partial:
        state.add(Message("assistant", "".join(scope.partial)))


def answer_dangling(state: RunState) -> None:
    """Give every tool call of the last assistant turn a result (those that came back,
    else ``not_run``): providers reject a history with unanswered calls, which would
    break the conversation's next run."""
    for i in range(len(state.messages) - 1, -1, -1):
        if state.messages[i].role == "assistant":
            calls = state.messages[i].tool_calls
            answered = {r.tool_call_id for m in state.messages[i + 1 :] for r in m.tool_results}
            missing = [c for c in calls if c.id not in answered]
            if missing:
                known = state.pending.results if state.pending is not None else {}
                note = orjson.dumps({"error": "not_run", "reason": "The run ended before this call ran."}).decode()
                state.add(
                    Message(
                        "user",
                        tool_results=[known.get(c.id) or ToolResult(c.id, c.name, note, True) for c in missing],
                    )
                )
            return


async def park_run(scope: RunScope, wait: AwaitingApproval, ttl_s: float) -> None:
    """The call waits for the user: store the step with ``approval_required`` and the
    run ``waiting_approval`` (no process holds it from here: no lease, no live-run
    slot, no model connection), then let it go here; followers end without a terminal
    event. The decision route, a cancel or the expiry makes it claimable again."""
    run, state = scope.run, scope.state
    assert state is not None
    call = wait.call
    expires_at = time.time() + ttl_s
    state.awaiting = {"tool_use_id": call.id, "name": call.name, "expires_at": expires_at}
    event = ApprovalRequired(
        tool_use_id=call.id,
        tool_name=call.name,
        arguments=call.arguments,
        reason=wait.reason,
        expires_at=round(expires_at, 3),
    )
    run.parked = True  # from this write on the lease is handed back on purpose (not "lost")
    await run.emit_step(
        [event],
        checkpoint=state.encode(),
        messages=state.take_unsaved(),
        status="waiting_approval",
        wait_s=ttl_s,
    )
    log.info("run waits for an approval", extra={"run_id": run.id, "tool": call.name, "tool_use_id": call.id})
    run.park()


async def release_run(scope: RunScope, timeout_s: float) -> None:
    """Shutdown: the last stored checkpoint stands; mark the run interrupted so the
    next process carries it on, and let followers go (they reconnect)."""
    run = scope.run
    try:
        fut = run.emit_step(status="interrupted")
        await asyncio.wait_for(asyncio.shield(fut), timeout_s)
    except (Exception, asyncio.CancelledError):
        log.warning("could not mark the run interrupted", extra={"run_id": run.id})
    finally:
        run.release()
