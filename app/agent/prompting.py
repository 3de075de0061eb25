"""Adapts the ``prompts`` room's builder to the agent's ``Prompts`` protocol."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agenttools.rag.policy import FlowPolicy
from prompts.builder import PromptLibrary


class PromptService:
    def __init__(self, library: PromptLibrary | None = None) -> None:
        self.library = library or PromptLibrary()

    def system_prompt(
        self,
        context_type: str,
        context: Mapping[str, Any] | None,
        *,
        tool_names: Sequence[str],
        policy: FlowPolicy | None,
        max_tool_calls: int | None,
        plan_hint: str | None = None,
    ) -> str:
        return self.library.build_system_prompt(
            context_type,
            context,
            tool_names=tool_names,
            # An on-demand policy is described by the prompt, not enforced as steps.
            mandatory_first=policy.first if policy and policy.mandatory else None,
            mandatory_last=policy.last if policy and policy.mandatory else None,
            max_tool_calls=max_tool_calls,
            plan_hint=plan_hint,
        )

    def enforcement(self, tool: str, step: str) -> str:
        return self.library.enforcement_message(tool, step)

    def budget_exhausted(self, limit: int) -> str:
        return (
            f"The tool-call budget of this run ({limit} calls) is used up. Do not call more tools: "
            "answer now with what you have, through generate_response if it is available."
        )
