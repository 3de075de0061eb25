"""Runs one tool call: lookup, context-ID injection (on a copy), validation, the handler.

Nothing raises out of ``execute``: unknown tools, malformed arguments, validation
failures, timeouts and handler crashes all become a ``ToolOutcome`` the model can read.
The validator and injector are handed in, so this module stays a thin, testable seam.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from agenttools.core.registry import ToolContext, ToolOutcome, ToolRegistry
from llm.types import ToolCall

log = logging.getLogger("agentchat.tools")


class ValidationOutcome(Protocol):
    """What a validator returns (read-only, so any result class with these fields fits)."""

    @property
    def ok(self) -> bool: ...

    @property
    def arguments(self) -> dict[str, Any]: ...

    @property
    def error(self) -> Mapping[str, Any] | None: ...


Validator = Callable[[Any, object], ValidationOutcome]
Injector = Callable[[str, dict[str, Any], str, Mapping[str, Any]], dict[str, Any]]


@dataclass(slots=True)
class ToolExecutor:
    registry: ToolRegistry
    validator: Validator | None = None
    injector: Injector | None = None
    timeout_s: float = 30.0

    # The tool's own facts (``ToolSpec``) answer these; a name the registry does not know
    # gets the cautious answer (run alone, at most once), and is then refused by ``execute``.

    def is_read_only(self, name: str) -> bool:
        """Calls of one turn that are all read-only run concurrently."""
        spec = self.registry.get(name)
        return spec is not None and spec.read_only

    def is_repeatable(self, name: str) -> bool:
        """May a call that was cut off (crash, shutdown) simply be run again? Only reads
        that cost nothing; a write or a paid web search is run at most once."""
        spec = self.registry.get(name)
        return spec is not None and spec.repeatable

    def needs_approval(self, name: str) -> bool:
        """Does a call of ``name`` wait for the user's decision before it runs?"""
        spec = self.registry.get(name)
        return spec is not None and spec.needs_approval

    def starts_at_send(self, name: str) -> bool:
        """Does a call of ``name`` count as started when its request leaves (its handler
        awaits ``ToolContext.before_send``), rather than when its handler starts?"""
        spec = self.registry.get(name)
        return spec is not None and spec.starts_at_send and not spec.repeatable

    async def execute(self, call: ToolCall, ctx: ToolContext, *, allowed: frozenset[str] | None = None) -> ToolOutcome:
        if call.name not in self.registry or (allowed is not None and call.name not in allowed):
            names = sorted(allowed) if allowed is not None else self.registry.names()
            return ToolOutcome(
                content={
                    "error": "unknown_tool",
                    "reason": f"There is no tool named {call.name!r} available here.",
                    "guidance": "Call one of: " + ", ".join(names),
                },
                is_error=True,
                counts_as_execution=False,
            )
        if call.parse_error is not None:
            return ToolOutcome(
                content={
                    "error": "invalid_arguments_json",
                    "reason": f"The arguments were not a JSON object: {call.parse_error}",
                    "guidance": "Send the arguments again as one valid JSON object matching the tool's schema.",
                },
                is_error=True,
                counts_as_execution=False,
            )
        args: dict[str, Any] = dict(call.arguments)
        if self.injector is not None:
            try:
                args = self.injector(call.name, args, ctx.context_type, ctx.context)
            except Exception:  # the injector is best-effort: the model's own input stands
                log.exception("context id injection failed", extra={"tool": call.name})
        spec = self.registry.spec(call.name)
        if self.validator is not None:
            result = self.validator(spec, args)
            if not result.ok:
                return ToolOutcome(content=result.error, is_error=True, counts_as_execution=False)
            args = result.arguments
        handler = self.registry.handler(call.name)
        if handler is None:
            return ToolOutcome.error(
                f"The tool {call.name} is not available in this deployment.",
                guidance="Continue without it, or tell the user what is missing.",
            )
        try:
            async with asyncio.timeout(self.timeout_s):
                return await handler(args, ctx)
        except TimeoutError:
            return ToolOutcome.error(f"The tool {call.name} timed out after {self.timeout_s:g} s.")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a handler bug must not end the run
            log.exception("tool handler crashed", extra={"tool": call.name})
            return ToolOutcome.error(f"The tool {call.name} failed unexpectedly ({type(exc).__name__}).")
