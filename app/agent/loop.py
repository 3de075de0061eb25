"""The agent loop as named steps, each stored before the next begins.

A run is: **prepare** (load history, select tools, build the system prompt; stored as
the first checkpoint together with the user's message: ``prepare``) → up to ``max_loops``
**turns**.
A turn streams the model's answer into run events; the finished turn is stored (the
assistant message, and the tool calls it asked for as *pending*). Then the **tool
step** runs every pending call (read-only ones concurrently), storing each result with
its events as it arrives, and stores the step. Any step can be the last one a process
sees: ``Agent.run(..., state=…)`` carries a run on from its stored ``RunState`` — a turn
that was cut off is simply streamed again, a call whose result was stored is never run
again, and a side-effecting call that was started but never answered is reported to the
model as interrupted rather than repeated.

A ``MandatoryPolicy`` (seeds 000–002) makes the model search the knowledge base first and
end with ``generate_response``, with one nudge each before the run fails — in the
contexts of ``mandatory_contexts`` (by default ``knowledge``). Elsewhere the same policy
runs on demand: nothing is refused for lack of a search, and only a run that used the
flow owes its end. The run always ends with exactly one ``message_complete``.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any

import orjson

from agenttools.core.executor import ToolExecutor
from agenttools.core.registry import RunToolState, ToolContext, ToolOutcome, ToolRegistry
from agenttools.rag.policy import FlowPolicy, set_flow_scope
from agenttools.rag.review import review_after_round
from app.agent.answer_stream import ShownText, streamed_answer_tool
from app.agent.approvals import ApprovalCancelled, ApprovalExpired, AwaitingApproval
from app.agent.budget import prune_in_run
from app.agent.deps import (
    AgentSettings,
    ConversationHistory,
    Planner,
    Prompts,
    ToolCallLog,
)
from app.agent.find_tools import found_tools
from app.agent.output_caps import TurnTextCap
from app.agent.prepare import RunPreparation
from app.agent.run_endings import close_cancelled, finish_run, park_run, release_run
from app.agent.run_scope import RunFailed, RunScope, resumed_event, run_step
from app.agent.selector import ToolSelector
from app.agent.tool_step import ToolStep
from app.agent.turn import TurnOutcome, stream_turn
from app.ops.run_metrics import RunMetrics
from app.runs.records import Caller, ChatInput
from app.runs.run import Run
from app.runs.state import PendingCalls, RunState
from events import (
    Clarification,
    Error,
    RunEnding,
    RunResumed,
    RunStarted,
    ToolCallResult,
)
from llm.provider import Provider
from llm.types import (
    ChatRequest,
    Message,
    ToolCall,
    ToolDefinition,
    ToolResult,
)
from storage.errors import StorageError
from storage.records import ToolCallRecord

log = logging.getLogger("agentchat.agent")

#: The old name of the flow policy, kept for callers.
MandatoryPolicy = FlowPolicy

__all__ = ["Agent", "AgentSettings", "Caller", "ChatInput", "FlowPolicy", "MandatoryPolicy", "ToolCallRecord"]


class Agent:
    def __init__(
        self,
        *,
        provider: Provider,
        registry: ToolRegistry,
        executor: ToolExecutor,
        selector: ToolSelector,
        prompts: Prompts,
        conversations: ConversationHistory,
        tool_log: ToolCallLog,
        http: Any,
        settings: AgentSettings,
        policy: FlowPolicy | None = None,
        planner: Planner | None = None,
        metrics: RunMetrics | None = None,
    ) -> None:
        self.provider = provider
        self.registry = registry
        self.executor = executor
        self.selector = selector
        self.prompts = prompts
        self.conversations = conversations
        self.tool_log = tool_log
        self.http = http
        self.settings = settings
        self.policy = policy or FlowPolicy()
        self.planner = planner
        self.metrics = metrics
        self.preparation = RunPreparation(
            conversations=conversations, selector=selector, registry=registry, prompts=prompts, settings=settings,
            planner=planner, metrics=metrics,
        )
        self.tools = ToolStep(
            executor=executor, prompts=prompts, tool_log=tool_log, settings=settings, flow=self.policy, metrics=metrics
        )

    def policy_for(self, context_type: str) -> FlowPolicy:
        """The flow policy of a context: mandatory in ``mandatory_contexts``, else on demand."""
        if context_type in self.settings.mandatory_contexts:
            return self.policy
        return replace(self.policy, mandatory=False)

    # --- the run ----------------------------------------------------------------------

    async def run(
        self,
        run: Run,
        chat: ChatInput,
        caller: Caller,
        *,
        state: RunState | None = None,
        resumed: RunResumed | None = None,
    ) -> None:
        """Run (or, given ``state``, carry on) one run to its ``message_complete``; given
        ``resumed`` alone, run it again from its request (no checkpoint was stored)."""
        ctx = ToolContext(
            user_id=caller.user_id,
            authorization=caller.authorization,
            conversation_id=run.conversation_id,
            run_id=run.id,
            context_type=chat.context_type,
            context=chat.context,
            http=self.http,
            state=state.tools if state is not None else RunToolState(),
        )
        scope = RunScope(run=run, chat=chat, caller=caller, ctx=ctx, state=state, first_token_pending=state is None)
        # Set at every start, so a run carried on follows this process's settings.
        set_flow_scope(ctx.state, mandatory=self.policy_for(chat.context_type).mandatory)
        status: RunEnding = "failed"
        error: Error | None = None
        try:
            if scope.state is None:
                # ``resumed`` without a state: a run taken over before its first checkpoint
                # starts again from its request; its ``run_started`` is logged already.
                run.emit(resumed or RunStarted(run_id=run.id, conversation_id=run.conversation_id))
                scope.state = await self.preparation.prepare(scope, self.policy_for(chat.context_type))
            else:
                await run.emit_step([resumed or resumed_event(run, scope.state)], status="running")
            ctx.state = scope.state.tools
            status = await self._loop(scope)
        except AwaitingApproval as wait:
            await park_run(scope, wait, self.settings.approval_ttl_s)
            return
        except ApprovalExpired as exc:
            error, status = Error(message=str(exc), code="approval_expired"), "cancelled"
        except ApprovalCancelled:
            status = "cancelled"
        except RunFailed as exc:
            error, status = Error(message=str(exc), code=exc.code), "failed"
        except asyncio.CancelledError:
            if run.storage_error is not None or run.lost:
                raise
            if run.interrupting:
                await release_run(scope, self.settings.release_timeout_s)
                raise
            status = "cancelled"
            close_cancelled(scope)
            self._finish(scope, status, None)
            raise
        except StorageError as exc:
            if run.storage_error is not None or run.lost:
                return  # the run already ended loudly (Run._storage_failed), or moved on
            log.error("run could not be stored", extra={"run_id": run.id, "error": str(exc)})
            error, status = Error(message="The service could not store this run.", code="storage_unavailable"), "failed"
        except Exception as exc:
            log.exception("agent run crashed", extra={"run_id": run.id})
            error, status = Error(message=f"internal error ({type(exc).__name__})", code="internal_error"), "failed"
        self._finish(scope, status, error)

    async def _loop(self, scope: RunScope) -> RunEnding:
        chat, state = scope.chat, scope.state
        assert state is not None
        policy = self.policy_for(chat.context_type)

        if state.pending is not None:  # carried on in the middle of a tool step
            done = await self._tool_step(scope)
            if done is not None:
                return done

        shown = ShownText()  # the text this run streamed: an answer repeating it is not shown twice
        while state.turns < self.settings.max_loops:
            state.turns += 1
            offered = self._offered_tools(self._run_tool_defs(state), state.tools, policy)
            request = ChatRequest(
                system_prompt=state.system,
                messages=list(prune_in_run(state.messages, state.budget)),  # a snapshot: state grows on
                tools=offered,
                max_tokens=self.settings.max_tokens,
            )
            outcome = await stream_turn(
                self.provider,
                scope.run,
                request,
                state.turns - 1,
                idle_timeout_s=self.settings.idle_timeout_s,
                partial=scope.partial,
                cap=TurnTextCap(self.settings.max_chunk_chars, self.settings.max_answer_chars),
                answer_tool=streamed_answer_tool([d.name for d in offered], state.tools, policy.last),
                shown=shown,
            )
            state.usage = state.usage + outcome.usage
            self._observe_turn(scope, outcome)
            if outcome.error is not None:
                if outcome.text:
                    state.add(Message("assistant", outcome.text))
                raise RunFailed(*outcome.error)
            scope.partial.clear()
            state.add(Message("assistant", outcome.text, outcome.calls, replay=outcome.replay))

            if not outcome.calls:
                required = policy.next_required(state.tools)
                if required is None:
                    return "completed"
                self._nudge(scope, *required, results=[])
                await run_step(scope, state)
                continue

            if policy.refuse_turn([c.name for c in outcome.calls], state.tools):
                reason = f"Not executed: search the knowledge first ({policy.first} or a corpus search)."
                results = [self._refuse(scope, c, reason) for c in outcome.calls]
                self._nudge(
                    scope, policy.first, "Step 1: search the knowledge base before anything else", results=results
                )
                await run_step(scope, state)
                continue

            state.pending = PendingCalls(calls=outcome.calls, allowed=[d.name for d in offered])
            await run_step(scope, state)
            done = await self._tool_step(scope)
            if done is not None:
                return done
        raise RunFailed(f"Stopped after {self.settings.max_loops} model turns without a final answer.", "max_loops")

    async def _tool_step(self, scope: RunScope) -> RunEnding | None:
        """Run the pending calls, store the step; a status when the run is over."""
        state = scope.state
        assert state is not None and state.pending is not None
        results = await self.tools.run_pending(scope.run, scope.ctx, state)
        names = [c.name for c in state.pending.calls]
        state.pending = None
        strikes = [r for r in results if r.is_error and '"invalid_arguments_json"' in r.content]
        state.malformed_strikes = state.malformed_strikes + 1 if strikes else 0
        state.add(Message("user", tool_results=results))
        # Seed 004's review after a search round: enough / more / clarify.
        review = review_after_round(
            state.tools, names, calls_left=max(0, self.settings.max_tool_calls - state.executions)
        )
        if (
            review is not None
            and review.status == "clarify"
            and state.tools.clarification is None
            and review.clarification_details is not None
        ):
            state.tools.clarification = dict(review.clarification_details)
            await run_step(scope, state, events=[Clarification.from_dict(review.clarification_details)])
            return "completed"
        await run_step(scope, state)
        if state.malformed_strikes >= 2:
            raise RunFailed("The model sent malformed tool-call arguments twice in a row.", "malformed_tool_call")
        if state.tools.clarification is not None or state.tools.final_response is not None:
            return "completed"
        policy = self.policy_for(scope.chat.context_type)
        if policy.generate_failures(state.tools) >= 2:
            raise RunFailed(
                f"Failed to generate a response after a retry: {policy.last} failed twice.",
                "response_generation_failed",
            )
        if self.policy.repeats_refused(state.tools) >= 2:
            raise RunFailed(
                "The model kept repeating a tool call that had already failed the same way twice.",
                "repeated_tool_call",
            )
        return None

    def _run_tool_defs(self, state: RunState) -> list[ToolDefinition]:
        """The run's selection plus what ``find_tools`` found (kept in the checkpoint), minus
        tools that left the catalog (an MCP server that went away)."""
        names = list(dict.fromkeys([*state.tool_names, *found_tools(state.tools)]))
        return [self.registry.spec(n).definition for n in names if n in self.registry]

    def _offered_tools(
        self, tool_defs: list[ToolDefinition], tools: RunToolState, policy: FlowPolicy
    ) -> list[ToolDefinition]:
        names = set(policy.offerable([d.name for d in tool_defs], tools))
        return [d for d in tool_defs if d.name in names]

    def _observe_turn(self, scope: RunScope, outcome: TurnOutcome) -> None:
        """Time to first token (once per run started here) and provider errors by code."""
        if self.metrics is None:
            return
        if scope.first_token_pending and outcome.first_text_at is not None:
            scope.first_token_pending = False
            self.metrics.first_token(outcome.first_text_at - scope.run.created_at)
        if outcome.error is not None:
            self.metrics.provider_error(outcome.error[1])

    def _nudge(self, scope: RunScope, tool: str, step: str, *, results: list[ToolResult]) -> None:
        """Tell the model a mandatory tool is missing; the second miss fails the run."""
        state = scope.state
        assert state is not None
        if state.nudges.get(tool, 0) >= 1:
            raise RunFailed(
                f"The model did not call the mandatory tool {tool} after being reminded ({step}).",
                "mandatory_tool_missing",
            )
        policy = self.policy_for(scope.chat.context_type)
        if tool == policy.last and policy.generate_failures(state.tools) >= 1:
            # The one retry FR-010 allows was spent on a failing call.
            raise RunFailed(
                f"Failed to generate a response after a retry: {tool} failed and was not called again.",
                "response_generation_failed",
            )
        state.nudges[tool] = state.nudges.get(tool, 0) + 1
        state.add(Message("user", self.prompts.enforcement(tool, step), tool_results=results, reminder=True))
        log.info("mandatory tool missing; reminding the model", extra={"run_id": scope.run.id, "tool": tool})

    def _refuse(self, scope: RunScope, call: ToolCall, reason: str) -> ToolResult:
        """A call of a turn the policy refused: answered, streamed and logged (seed 001:
        every call is in the log, this one as ``rejected``), never run."""
        content = orjson.dumps({"error": "not_executed", "reason": reason}).decode()
        if scope.state is not None:
            scope.state.call_outcomes.append((call.name, False))
            outcome = ToolOutcome(
                content={"error": "not_executed", "reason": reason}, is_error=True, counts_as_execution=False
            )
            self.tools.log_call(scope.run, scope.state, call, outcome, 0.0)
        scope.run.emit(
            ToolCallResult(tool_use_id=call.id, tool_name=call.name, is_error=True, duration_ms=0.0, error=reason)
        )
        return ToolResult(call.id, call.name, content, True)

    def _finish(self, scope: RunScope, status: RunEnding, error: Error | None) -> None:
        """The run's one ending (``run_endings.finish_run``), with this agent's metrics and policy."""
        finish_run(
            scope,
            status,
            error,
            metrics=self.metrics,
            mandatory=self.policy_for(scope.chat.context_type).mandatory,
            last_tool=self.policy.last,
        )
