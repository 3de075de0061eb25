"""What the agent loop depends on, as small protocols, and its settings.

Kept out of ``agent.py`` so the loop reads as the run's steps and nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from llm.types import Message
from storage.records import ToolCallRecord


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


class ConversationHistory(Protocol):
    async def load(self, conversation_id: str, user_id: str, *, limit: int = 400) -> list[Message]: ...


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
    #: How long an interrupted run may take to store its status at shutdown.
    release_timeout_s: float = 5.0
