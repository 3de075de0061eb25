"""JSON Schema (draft 2020-12) of every event's ``data``, generated from the classes.

``event_data_schemas()`` gives one self-contained schema per event (nested objects
inlined, no ``$ref``): a ``$ref`` inside an OpenAPI 3.1 component would resolve against
the OpenAPI document, not the schema, so self-contained is what can be dropped in
anywhere. ``event_stream_schema()`` is the whole stream as one document — every class
once under ``$defs``, and ``AgentEvent``, the union of ``{event, data}`` pairs — for
generators that name types (``clients/typescript``).
"""

from __future__ import annotations

import inspect
from typing import Any

import msgspec

from events.catalog import EVENT_TYPES

__all__ = ["event_data_schemas", "event_stream_schema"]

DRAFT = "https://json-schema.org/draft/2020-12/schema"
_REF = "#/$defs/"


def _components() -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """(wire name → ``{"$ref"}``, ``$defs``), as msgspec generates them, tidied."""
    refs, defs = msgspec.json.schema_components(list(EVENT_TYPES.values()), ref_template=_REF + "{name}")
    return dict(zip(EVENT_TYPES, refs, strict=True)), _tidy(defs)


def _tidy(node: Any) -> Any:
    """Descriptions as prose (docstrings keep their indentation), and free-form objects
    (``dict[str, Any]``) saying so with ``additionalProperties: {}`` — the same schema,
    but generators then type them as maps rather than as empty objects."""
    if isinstance(node, list):
        return [_tidy(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _tidy(v) for k, v in node.items()}
    if isinstance(out.get("description"), str):
        paragraphs = inspect.cleandoc(out["description"]).split("\n\n")
        out["description"] = "\n\n".join(" ".join(p.split()) for p in paragraphs)
    if out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
        out["additionalProperties"] = {}
    return out


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF):
            target = _inline(defs[ref.removeprefix(_REF)], defs)
            rest = {k: _inline(v, defs) for k, v in node.items() if k != "$ref"}
            return {**target, **rest}
        return {k: _inline(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


def event_data_schemas() -> dict[str, dict[str, Any]]:
    """Wire name → JSON Schema of its ``data`` (self-contained, in emission order)."""
    refs, defs = _components()
    return {name: _inline(ref, defs) for name, ref in refs.items()}


def event_stream_schema() -> dict[str, Any]:
    """The stream as one schema document: ``AgentEvent``, a ``{event, data}`` union
    (``event`` a constant, ``data`` a ``$ref``); every class is a ``$defs`` entry named
    after it."""
    refs, defs = _components()
    pairs = [
        {
            "type": "object",
            "properties": {"event": {"const": name}, "data": ref},
            "required": ["event", "data"],
            "additionalProperties": False,
        }
        for name, ref in refs.items()
    ]
    return {
        "$schema": DRAFT,
        "title": "AgentEvent",
        "description": "One server-sent event of a run: its name (the SSE event field) and its data. "
        "Clients must ignore events whose name they do not know.",
        "oneOf": pairs,
        "$defs": defs,
    }
