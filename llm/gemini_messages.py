"""The conversation as Gemini reads it: tool definitions as function declarations (the
JSON Schema untouched), the provider-neutral history as ``types.Content``, a model turn's
parts kept as JSON so they can be sent back byte for byte.

Why apart from ``llm.gemini``: the provider streams and maps errors; this is the
translation of messages, which has its own rules (thought signatures replayed verbatim,
tool results answering calls by name and by the model's own ids only).
"""

from __future__ import annotations

from typing import Any

import orjson
from google.genai import types

from llm.types import Message, ToolDefinition, ToolResult

# Google's documented placeholder for a function call the model did not produce in
# this conversation (history from another provider): Gemini 3 accepts it in place of
# a real thought signature.
SKIP_SIGNATURE = b"skip_thought_signature_validator"


def function_declarations(tools: list[ToolDefinition]) -> list[types.FunctionDeclaration]:
    """Declarations carrying the JSON Schema untouched (``parameters_json_schema``)."""
    return [
        types.FunctionDeclaration(name=t.name, description=t.description, parameters_json_schema=t.parameters)
        for t in tools
    ]


def _result_payload(result: ToolResult) -> dict[str, Any]:
    """Gemini wants an object: ``{"output": ...}`` on success, ``{"error": ...}`` on failure."""
    try:
        value: Any = orjson.loads(result.content) if result.content else ""
    except orjson.JSONDecodeError:
        value = result.content
    return {"error": value} if result.is_error else {"output": value}


def _replayed_parts(message: Message) -> list[dict[str, Any]] | None:
    gemini = (message.replay or {}).get("gemini")
    if isinstance(gemini, dict) and isinstance(gemini.get("parts"), list):
        return gemini["parts"]
    return None


def contents_from_messages(messages: list[Message]) -> list[types.Content]:
    """Provider-neutral history to Gemini contents.

    An assistant message recorded by this provider is replayed from its stored parts,
    byte for byte (thought signatures included). Tool results answer calls by name,
    and by id when the model gave one (ids we generated are never sent back).
    """
    contents: list[types.Content] = []
    model_ids: set[str] = set()
    for m in messages:
        if m.role == "assistant":
            stored = _replayed_parts(m)
            if stored is not None:
                parts = [types.Part.model_validate(p) for p in stored]
                model_ids.update(p.function_call.id for p in parts if p.function_call and p.function_call.id)
            else:
                parts = []
                if m.content:
                    parts.append(types.Part(text=m.content))
                for c in m.tool_calls:
                    parts.append(
                        types.Part(
                            function_call=types.FunctionCall(name=c.name, args=c.arguments),
                            thought_signature=SKIP_SIGNATURE,
                        )
                    )
            if parts:
                contents.append(types.Content(role="model", parts=parts))
            continue
        user_parts = [
            types.Part(
                function_response=types.FunctionResponse(
                    name=r.name,
                    id=r.tool_call_id if r.tool_call_id in model_ids else None,
                    response=_result_payload(r),
                )
            )
            for r in m.tool_results
        ]
        if m.content:
            user_parts.append(types.Part(text=m.content))
        if user_parts:
            contents.append(types.Content(role="user", parts=user_parts))
    return contents


def part_record(part: types.Part) -> dict[str, Any]:
    """A JSON-able copy of a part that ``types.Part.model_validate`` turns back into it."""
    record: dict[str, Any] = part.model_dump(mode="json", exclude_none=True)
    return record


__all__ = ["SKIP_SIGNATURE", "contents_from_messages", "function_declarations", "part_record"]
