"""What the agent loop depends on, as small protocols, and its settings.

Kept out of ``agent.py`` so the loop reads as the run's steps and nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agenttools.rag.policy import FlowPolicy
from llm.types import Message
from storage.records import ToolCallRecord


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
        policy: FlowPolicy | None,
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
    #: Caps on what one model turn may stream: one chunk, and the whole message.
    max_chunk_chars: int = 16_384
    max_answer_chars: int = 200_000
    #: How long an interrupted run may take to store its status at shutdown.
    release_timeout_s: float = 5.0
    #: How long a run parked for an approval waits for the decision (``AGENT_APPROVAL_TTL_S``).
    approval_ttl_s: float = 86_400.0
