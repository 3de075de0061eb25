"""The agent loop: stream a turn, run the tools it asked for, feed the results back.

One ``Agent`` serves every run of an app. A run is: load history → select tools →
build the system prompt → up to ``max_loops`` turns. Each turn streams provider events
into run events (``message_start``, ``content_chunk``, ``tool_call_start``), then runs
every tool call of the turn (read-only ones concurrently), emitting preview events and
``tool_call_result`` per call. A ``MandatoryPolicy`` (seeds 000–002) makes the model
search the knowledge base first and end with ``generate_response``, with one nudge each
before the run fails. The run always ends with exactly one ``message_complete``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from agenttools.executor import ToolExecutor
from agenttools.registry import RunToolState, ToolContext, ToolOutcome, ToolRegistry
from app.budget import estimate_tokens, prune_history, prune_in_run
from app.runs import TERMINAL_EVENT, Run
from app.selector import ToolSelector
from llm.provider import Provider
from llm.types import ChatRequest, Message, ToolCall, ToolDefinition, ToolResult, Usage

log = logging.getLogger("agentchat.agent")

MAX_TOOL_RESULT_CHARS = 24_000


@dataclass(frozen=True, slots=True)
class ChatInput:
    message: str
    context_type: str
    context: dict[str, Any]
    conversation_id: str | None = None


@dataclass(frozen=True, slots=True)
class Caller:
    user_id: str
    authorization: str | None = None


@dataclass(frozen=True, slots=True)
class MandatoryPolicy:
    """The mandatory flow of seed 000: which tool must come first, which must end the run,
    and what must follow an external search."""

    first: str | None = "knowledge_base_search"
    last: str | None = "generate_response"
    external: str | None = "perplexity_search"
    after_external: str | None = "index_keywords"

    def required_next(self, called: Sequence[str], finished: bool) -> tuple[str, str] | None:
        if self.first and self.first not in called:
            return self.first, "Step 1: search the knowledge base before anything else"
        if self.external and self.after_external and self.external in called and self.after_external not in called:
            return self.after_external, "Step 3c: index keywords from the external search results"
        if self.last and not finished:
            return self.last, "Step 4: return the final answer through generate_response"
        return None


class ConversationStore(Protocol):
    async def load(self, conversation_id: str, user_id: str) -> list[Message]: ...

    async def append(self, conversation_id: str, user_id: str, messages: Sequence[Message]) -> None: ...


@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    run_id: str
    conversation_id: str
    user_id: str
    tool_use_id: str
    tool_name: str
    arguments: dict[str, Any]
    result: str
    status: str  # success | failure | rejected
    error: str | None
    duration_ms: float
    retry_count: int


class ToolCallLog(Protocol):
    def record(self, entry: ToolCallRecord) -> None: ...


class Planner(Protocol):
    """Query decomposition (seed 004 §8): a short plan hint for the system prompt, or None."""

    async def plan(self, message: str) -> Any: ...


class Prompts(Protocol):
    def system_prompt(
        self,
        context_type: str,
        context: Mapping[str, Any] | None,
        *,
        tool_names: Sequence[str],
        policy: MandatoryPolicy | None,
        max_tool_calls: int | None,
        plan_hint: str | None = None,
    ) -> str: ...

    def enforcement(self, tool: str, step: str) -> str: ...

    def budget_exhausted(self, limit: int) -> str: ...


@dataclass(slots=True)
class AgentSettings:
    max_loops: int = 20
    max_tokens: int = 4096
    max_tool_calls: int = 8
    context_budget_tokens: int = 24000
    history_budget_tokens: int = 8000
    mandatory_contexts: tuple[str, ...] = ("workflow", "tables", "knowledge")
    idle_timeout_s: float = 120.0


@dataclass(slots=True)
class _TurnOutcome:
    text: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    stop_for_tool_use: bool = False
    usage: Usage = Usage()
    replay: dict[str, Any] | None = None
    error: tuple[str, str] | None = None  # (message, code)


class RunFailed(Exception):
    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(slots=True)
class _RunScope:
    """Mutable bookkeeping of one run (kept off the Agent so runs never share state)."""

    run: Run
    chat: ChatInput
    caller: Caller
    state: RunToolState
    ctx: ToolContext
    messages: list[Message] = field(default_factory=list)
    new_messages: list[Message] = field(default_factory=list)
    usage: Usage = Usage()
    turns: int = 0
    partial_text: str = ""
    executions: int = 0
    nudges: dict[str, int] = field(default_factory=dict)
    malformed_strikes: int = 0
    failed_attempts: dict[str, int] = field(default_factory=dict)


class Agent:
    def __init__(
        self,
        *,
        provider: Provider,
        registry: ToolRegistry,
        executor: ToolExecutor,
        selector: ToolSelector,
        prompts: Prompts,
        conversations: ConversationStore,
        tool_log: ToolCallLog,
        http: Any,
        settings: AgentSettings,
        policy: MandatoryPolicy | None = None,
        planner: Planner | None = None,
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
        self.policy = policy or MandatoryPolicy()
        self.planner = planner

    def policy_for(self, context_type: str) -> MandatoryPolicy | None:
        return self.policy if context_type in self.settings.mandatory_contexts else None

    # --- the run ----------------------------------------------------------------------

    async def run(self, run: Run, chat: ChatInput, caller: Caller) -> None:
        state = RunToolState()
        ctx = ToolContext(
            user_id=caller.user_id,
            authorization=caller.authorization,
            conversation_id=run.conversation_id,
            run_id=run.id,
            context_type=chat.context_type,
            context=chat.context,
            http=self.http,
            state=state,
        )
        scope = _RunScope(run=run, chat=chat, caller=caller, state=state, ctx=ctx)
        status = "failed"
        try:
            run.emit("run_started", {"run_id": run.id, "conversation_id": run.conversation_id})
            status = await self._loop(scope)
        except RunFailed as exc:
            run.emit("error", {"message": str(exc), "code": exc.code})
            status = "failed"
        except asyncio.CancelledError:
            status = "cancelled"
            if scope.partial_text:
                scope.new_messages.append(Message("assistant", scope.partial_text))
            raise
        except Exception as exc:
            log.exception("agent run crashed", extra={"run_id": run.id})
            run.emit("error", {"message": f"internal error ({type(exc).__name__})", "code": "internal_error"})
            status = "failed"
        finally:
            await self._persist(scope)
            run.emit(
                TERMINAL_EVENT,
                {
                    "status": status,
                    "run_id": run.id,
                    "conversation_id": run.conversation_id,
                    "turns": scope.turns,
                    "usage": scope.usage.to_dict(),
                },
            )

    async def _persist(self, scope: _RunScope) -> None:
        if not scope.new_messages:
            return
        _answer_dangling_calls(scope.new_messages)
        try:
            await asyncio.wait_for(
                asyncio.shield(
                    self.conversations.append(scope.run.conversation_id, scope.caller.user_id, scope.new_messages)
                ),
                timeout=5,
            )
        except (Exception, asyncio.CancelledError):
            log.exception("could not store the conversation", extra={"run_id": scope.run.id})

    async def _loop(self, scope: _RunScope) -> str:
        run, chat = scope.run, scope.chat
        try:
            history = await self.conversations.load(run.conversation_id, scope.caller.user_id)
        except Exception:
            log.exception("could not load conversation history", extra={"run_id": run.id})
            history = []
        selection = await self.selector.select(chat.context_type, chat.context, chat.message)
        run.emit("tool_selection", selection.event())
        policy = self.policy_for(chat.context_type)
        tool_defs = [self.registry.spec(n).definition for n in selection.tools if n in self.registry]
        hint = None
        if self.planner is not None and chat.context_type == "knowledge":
            plan = await self.planner.plan(chat.message)  # never raises; None skips the hint
            hint = plan.text if plan is not None else None
        system = self.prompts.system_prompt(
            chat.context_type,
            chat.context,
            tool_names=[d.name for d in tool_defs],
            policy=policy,
            max_tool_calls=self.settings.max_tool_calls,
            plan_hint=hint,
        )
        user = Message("user", chat.message)
        scope.messages = [*prune_history(history, self.settings.history_budget_tokens), user]
        scope.new_messages.append(user)
        budget = max(1024, self.settings.context_budget_tokens - estimate_tokens(system))

        for turn in range(self.settings.max_loops):
            scope.turns = turn + 1
            offered = self._offered_tools(tool_defs, scope.state, policy)
            request = ChatRequest(
                system_prompt=system,
                messages=prune_in_run(scope.messages, budget),
                tools=offered,
                max_tokens=self.settings.max_tokens,
            )
            outcome = await self._stream_turn(scope, request, turn)
            scope.usage = scope.usage + outcome.usage
            if outcome.error is not None:
                if outcome.text:
                    scope.new_messages.append(Message("assistant", outcome.text))
                raise RunFailed(*outcome.error)
            assistant = Message("assistant", outcome.text, outcome.calls, replay=outcome.replay)
            scope.partial_text = ""
            scope.messages.append(assistant)
            scope.new_messages.append(assistant)

            if not outcome.calls:
                required = policy.required_next(scope.state.tools_called, scope.state.final_response is not None) if policy else None
                if required is None:
                    return "completed"
                self._nudge(scope, *required, results=[])
                continue

            if policy and policy.first and policy.first not in scope.state.tools_called and all(
                c.name != policy.first for c in outcome.calls
            ):
                results = [
                    self._refuse(scope, c, f"Not executed: {policy.first} must be called first.")
                    for c in outcome.calls
                ]
                self._nudge(scope, policy.first, "Step 1: search the knowledge base before anything else", results=results)
                continue

            results = await self._execute_calls(scope, outcome.calls, frozenset(d.name for d in offered))
            strikes = [r for r in results if r is not None and r.is_error and '"invalid_arguments_json"' in r.content]
            scope.malformed_strikes = scope.malformed_strikes + 1 if strikes else 0
            tool_msg = Message("user", tool_results=[r for r in results if r is not None])
            scope.messages.append(tool_msg)
            scope.new_messages.append(tool_msg)
            if scope.malformed_strikes >= 2:
                raise RunFailed("The model sent malformed tool-call arguments twice in a row.", "malformed_tool_call")
            if scope.state.clarification is not None:
                return "completed"
            if scope.state.final_response is not None:
                return "completed"
        raise RunFailed(
            f"Stopped after {self.settings.max_loops} model turns without a final answer.", "max_loops"
        )

    def _offered_tools(
        self, tool_defs: list[ToolDefinition], state: RunToolState, policy: MandatoryPolicy | None
    ) -> list[ToolDefinition]:
        if policy and policy.external and policy.first and policy.first not in state.tools_called:
            return [d for d in tool_defs if d.name != policy.external]
        return tool_defs

    def _nudge(self, scope: _RunScope, tool: str, step: str, *, results: list[ToolResult]) -> None:
        """Tell the model a mandatory tool is missing; the second miss fails the run."""
        if scope.nudges.get(tool, 0) >= 1:
            raise RunFailed(
                f"The model did not call the mandatory tool {tool} after being reminded ({step}).",
                "mandatory_tool_missing",
            )
        scope.nudges[tool] = scope.nudges.get(tool, 0) + 1
        msg = Message("user", self.prompts.enforcement(tool, step), tool_results=results)
        scope.messages.append(msg)
        scope.new_messages.append(msg)
        log.info("mandatory tool missing; reminding the model", extra={"run_id": scope.run.id, "tool": tool})

    def _refuse(self, scope: _RunScope, call: ToolCall, reason: str) -> ToolResult:
        content = orjson.dumps({"error": "not_executed", "reason": reason}).decode()
        scope.run.emit(
            "tool_call_result", {"tool_use_id": call.id, "name": call.name, "is_error": True, "duration_ms": 0.0}
        )
        return ToolResult(call.id, call.name, content, True)

    # --- one streamed turn ---------------------------------------------------------------

    async def _stream_turn(self, scope: _RunScope, request: ChatRequest, turn: int) -> _TurnOutcome:
        run = scope.run
        out = _TurnOutcome()
        text_parts: list[str] = []
        order: list[str] = []
        names: dict[str, str] = {}
        args: dict[str, list[str]] = {}
        completed = False
        stream = self.provider.stream_chat(request)
        try:
            async with asyncio.timeout(self.settings.idle_timeout_s) as deadline:
                async for ev in stream:
                    deadline.reschedule(asyncio.get_running_loop().time() + self.settings.idle_timeout_s)
                    kind = ev.type
                    if kind == "content_delta":
                        if ev.text:
                            text_parts.append(ev.text)
                            scope.partial_text += ev.text
                            run.emit("content_chunk", {"chunk": ev.text})
                    elif kind == "tool_use_start":
                        if ev.id not in names:
                            order.append(ev.id)
                            args[ev.id] = []
                        names[ev.id] = ev.name
                        run.emit("tool_call_start", {"tool_use_id": ev.id, "name": ev.name})
                    elif kind == "tool_use_input":
                        args.setdefault(ev.id, []).append(ev.partial_json)
                    elif kind == "message_start":
                        run.emit("message_start", {"turn": turn})
                    elif kind == "message_complete":
                        out.stop_for_tool_use = ev.stop_for_tool_use
                        out.usage = ev.usage
                        out.replay = ev.replay
                        completed = True
                    elif kind == "thinking_delta":
                        log.debug("thinking", extra={"run_id": run.id, "text": ev.text[:2000]})
                    elif kind == "error":
                        out.error = (ev.message, ev.code)
                        break
        except TimeoutError:
            out.error = (f"The model sent nothing for {self.settings.idle_timeout_s:g} s.", "provider_timeout")
        finally:
            await stream.aclose()
        out.text = "".join(text_parts)
        if out.error is None and not completed:
            out.error = ("The model's stream ended before the turn was complete.", "provider_error")
        if out.error is None:
            out.calls = [_parse_call(cid, names.get(cid, ""), "".join(args.get(cid, []))) for cid in order]
            if out.calls and not out.stop_for_tool_use:
                log.info("tool calls with a non-tool stop reason; executing them anyway", extra={"run_id": run.id})
        return out

    # --- tools ---------------------------------------------------------------------------

    async def _execute_calls(
        self, scope: _RunScope, calls: list[ToolCall], allowed: frozenset[str]
    ) -> list[ToolResult | None]:
        results: list[ToolResult | None] = []
        i = 0
        while i < len(calls):
            j = i + 1
            if self.executor.is_read_only(calls[i].name):
                while j < len(calls) and self.executor.is_read_only(calls[j].name):
                    j += 1
            batch = calls[i:j]
            if len(batch) == 1:
                outcomes = [await self._run_one(scope, batch[0], allowed)]
            else:
                outcomes = await asyncio.gather(*(self._run_one(scope, c, allowed) for c in batch))
            for call, (outcome, duration_ms) in zip(batch, outcomes, strict=True):
                results.append(self._finish_call(scope, call, outcome, duration_ms))
            i = j
        return results

    async def _run_one(self, scope: _RunScope, call: ToolCall, allowed: frozenset[str]) -> tuple[ToolOutcome, float]:
        started = time.perf_counter()
        last = self.policy.last if self.policy else None
        if call.name != last and scope.executions >= self.settings.max_tool_calls:
            outcome = ToolOutcome(
                content={"error": "tool_budget_exhausted", "reason": self.prompts.budget_exhausted(self.settings.max_tool_calls)},
                is_error=True,
                counts_as_execution=False,
            )
        else:
            if call.name != last:
                scope.executions += 1
            outcome = await self.executor.execute(call, scope.ctx, allowed=allowed)
            if not outcome.counts_as_execution and call.name != last:
                scope.executions -= 1
        return outcome, (time.perf_counter() - started) * 1000

    def _finish_call(self, scope: _RunScope, call: ToolCall, outcome: ToolOutcome, duration_ms: float) -> ToolResult:
        run = scope.run
        for name, data in outcome.events:
            run.emit(name, data)
        if outcome.counts_as_execution and not outcome.is_error:
            scope.state.tools_called.append(call.name)
        run.emit(
            "tool_call_result",
            {"tool_use_id": call.id, "name": call.name, "is_error": outcome.is_error, "duration_ms": round(duration_ms, 2)},
        )
        body = outcome.model_content if outcome.model_content is not None else outcome.content
        content = body if isinstance(body, str) else orjson.dumps(body, default=str).decode()
        if len(content) > MAX_TOOL_RESULT_CHARS:
            content = content[:MAX_TOOL_RESULT_CHARS] + f"… [truncated: {len(content)} characters in all]"
        # Seed 001's log: success | failure, plus `rejected` for calls refused before they
        # ran (validation, prerequisites); a call after earlier failed attempts of the same
        # tool in this run is logged as `retry` with how many came before.
        retries = scope.failed_attempts.get(call.name, 0)
        if outcome.is_error:
            status = "failure" if outcome.counts_as_execution else "rejected"
            scope.failed_attempts[call.name] = retries + 1
        else:
            status = "retry" if retries else "success"
        self.tool_log.record(
            ToolCallRecord(
                run_id=run.id,
                conversation_id=run.conversation_id,
                user_id=scope.caller.user_id,
                tool_use_id=call.id,
                tool_name=call.name,
                arguments=call.arguments,
                result=content[:4000],
                status=status,
                error=content[:1000] if outcome.is_error else None,
                duration_ms=round(duration_ms, 2),
                retry_count=retries,
            )
        )
        return ToolResult(call.id, call.name, content, outcome.is_error)


def _answer_dangling_calls(messages: list[Message]) -> None:
    """Give every tool call of the last assistant turn a result, if the run stopped
    (cancelled, failed) before they had one: providers reject a history with calls
    that were never answered, which would break the conversation's next run."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "assistant":
            calls = messages[i].tool_calls
            answered = {r.tool_call_id for m in messages[i + 1 :] for r in m.tool_results}
            missing = [c for c in calls if c.id not in answered]
            if missing:
                note = orjson.dumps({"error": "not_run", "reason": "The run ended before this call ran."}).decode()
                messages.append(Message("user", tool_results=[ToolResult(c.id, c.name, note, True) for c in missing]))
            return


def _parse_call(call_id: str, name: str, raw: str) -> ToolCall:
    text = raw.strip()
    if not text:
        return ToolCall(call_id, name, {}, raw)
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        return ToolCall(call_id, name, {}, raw, parse_error=str(exc))
    if not isinstance(value, dict):
        return ToolCall(call_id, name, {}, raw, parse_error=f"expected an object, got {type(value).__name__}")
    return ToolCall(call_id, name, value, raw)
