"""The first step of a run: load the conversation's history, select the tools, build
the system prompt, and store it all with the user's message as the run's first checkpoint.

A step of its own, as a turn (``turn``) and a tool step (``tool_step``) are: it runs once
per run, before the loop (a run carried on from a checkpoint never runs it again), and it
alone reads the conversation, asks the selector and the planner, and sizes the run's
token budget. A history that cannot be read does not stop the run: it goes on without
it and says so (``tool_selection``'s ``history_error``, a metric).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from agenttools.core.registry import ToolRegistry
from agenttools.rag.policy import FlowPolicy
from app.agent.budget import estimate_tokens, prune_history
from app.agent.deps import AgentSettings, ConversationHistory, Planner, Prompts
from app.agent.run_scope import RunScope, run_step
from app.agent.selector import ToolSelector
from app.ops.run_metrics import RunMetrics
from app.runs.state import RunState
from llm.types import Message

log = logging.getLogger("agentchat.agent")


@dataclass(slots=True)
class RunPreparation:
    """What the first step reads; ``prepare`` runs it for one run."""

    conversations: ConversationHistory
    selector: ToolSelector
    registry: ToolRegistry
    prompts: Prompts
    settings: AgentSettings
    planner: Planner | None = None
    metrics: RunMetrics | None = None

    async def prepare(self, scope: RunScope, policy: FlowPolicy) -> RunState:
        """Load history, select tools, build the prompt; store it all as the first step."""
        run, chat = scope.run, scope.chat
        history: list[Message] = []
        history_error: str | None = None
        try:
            if not run.new_conversation:  # a conversation this run's admission created holds nothing yet
                history = await self.conversations.load(run.conversation_id, scope.caller.user_id)
        except Exception as exc:
            # The run goes on without it, and says so: in its first event and a metric.
            log.exception("could not load conversation history", extra={"run_id": run.id})
            history, history_error = [], f"{type(exc).__name__}: {exc}"[:300]
            if self.metrics is not None:
                self.metrics.history_unavailable()
        selection = await self.selector.select(chat.context_type, chat.context, chat.message)
        tool_defs = [self.registry.spec(n).definition for n in selection.tools if n in self.registry]
        hint = None
        if self.planner is not None and chat.context_type == "knowledge":
            plan = await self.planner.plan(chat.message)  # never raises; None skips the hint
            hint = plan.text if plan is not None else None
            if plan is not None and hasattr(plan, "attach"):
                plan.attach(scope.ctx.state)  # its constraints become the corpus tools' filters
        system = self.prompts.system_prompt(
            chat.context_type,
            chat.context,
            tool_names=[d.name for d in tool_defs],
            policy=policy,
            max_tool_calls=self.settings.max_tool_calls,
            plan_hint=hint,
        )
        user = Message("user", chat.message)
        state = RunState(
            system=system,
            tool_names=[d.name for d in tool_defs],
            budget=max(1024, self.settings.context_budget_tokens - estimate_tokens(system)),
            messages=prune_history(history, self.settings.history_budget_tokens),
            tools=scope.ctx.state,
        )
        state.add(user)
        scope.state = state  # from here on the user's message is in the step below
        await run_step(scope, state, events=[selection.event(history_error=history_error)], status="running")
        return state


__all__ = ["RunPreparation"]
