"""Tool-call helpers shared by the providers: the OpenAI-style tool entries and failed
result prefix that Ollama and OpenAI-compatible servers both take, and, for wire formats
that deliver calls whole (Ollama), call ids and events."""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from typing import Any

import orjson

from llm.types import StreamEvent, ToolDefinition, ToolUseInput, ToolUseStart

#: Prefixed to a failed tool result's content, so the model can tell a failure from data.
ERROR_PREFIX = "ERROR: "


def tools_payload(tools: list[ToolDefinition]) -> list[dict[str, Any]]:
    """The request's ``tools`` list: OpenAI-style function entries with the schema as given
    (Ollama's chat API takes the same shape)."""
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in tools
    ]


def new_call_id() -> str:
    """An id for a call the provider sent without one (Ollama never sends ids)."""
    return f"call_{secrets.token_hex(12)}"


def arguments_json(arguments: Any) -> str:
    """The call's arguments as the JSON text a ``ToolUseInput`` carries.

    Whole-call providers hand us decoded values; anything that is not an object is
    still encoded faithfully so the agent loop can report the malformed call.
    """
    if isinstance(arguments, str):
        return arguments
    return orjson.dumps(arguments if arguments is not None else {}).decode()


def whole_call_events(call_id: str, name: str, index: int, arguments: Any) -> Iterable[StreamEvent]:
    """``ToolUseStart`` then one ``ToolUseInput`` holding all the arguments."""
    yield ToolUseStart(id=call_id, name=name, index=index)
    yield ToolUseInput(id=call_id, partial_json=arguments_json(arguments))
