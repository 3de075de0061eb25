"""Tool-argument validation: the JSON-Schema subset the catalog uses, plus sanitising and
the checks that stop a value from breaking out of the field it is meant for.

Every tool call passes through ``validate_arguments`` before it runs (FR-002 / FR-005). A
rejected call comes back as ``{"error": "invalid_parameters", "reason", "guidance"}`` for the
model to correct and retry; it never reaches a handler.

What is checked, in one pass over the arguments:
- types (``object``, ``array``, ``string``, ``integer``, ``number``, ``boolean``, untyped),
  ``required``, ``additionalProperties: false``, ``enum``, ``minLength``/``maxLength``,
  ``minimum``/``maximum``, ``minItems``/``maxItems``, ``pattern``; defaults are filled in;
- harmless slips are repaired instead of rejected, since models make them often: numbers or
  booleans sent as text, integral floats, enum values in the wrong case, an object sent as a
  JSON string, ``null`` for an optional field (treated as absent);
- every string loses its control characters (``\\n`` and ``\\t`` stay) and invisible
  formatting characters; strings with a schema are trimmed;
- guards chosen by field name (see ``FIELD_GUARDS``): SQL fragments and path traversal in
  ids and names that end up in URLs or lookups, and a strict shape for metadata ``filters``;
- free-form objects (workflow payloads, table configs) are capped by serialized size and
  nesting depth; arrays by ``maxItems`` (or a default cap).

Free-text search queries and keywords get the type, length and control-character checks
and nothing more: a question about "the system prompt", "jailbreak risks" or "developer
mode" is an ordinary question (a phrase blacklist rejected those and stopped nothing).
Protection against injected instructions lives where untrusted text enters the model's
view: retrieved text is quoted and neutralised (``agenttools.core.untrusted``) and the system
prompt says tool results are data.

Its parts: ``schema_walker`` (the schema keywords), ``field_guards`` (checks by field
name), ``validation_pass`` (limits, the issue collector, text helpers).

The validator is a small hand-written walker, not a dependency: it runs on every call and
only has to understand the keywords the catalog emits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from agenttools.core.registry import ToolSpec
from agenttools.core.schema_walker import check_value
from agenttools.core.validation_pass import Walk, type_name

MAX_ARGUMENTS_BYTES: Final = 256 * 1024
"""Cap on the serialized size of all arguments of one call."""


@dataclass(frozen=True, slots=True)
class ValidationResult:
    """``arguments`` is the cleaned input (defaults filled, strings sanitised) when ``ok``;
    ``error`` is the structured message for the model when not."""

    ok: bool
    arguments: dict[str, Any]
    error: dict[str, str] | None = None


def validate_arguments(spec: ToolSpec, args: object) -> ValidationResult:
    """Check and clean ``args`` against ``spec``'s parameter schema.

    ``args`` may be the decoded object, ``None`` (no arguments) or its JSON text. Never raises.
    """
    walk = Walk(spec.name)
    if args is None or args == "" or args == b"":
        args = {}
    elif isinstance(args, (str, bytes, bytearray)):
        try:
            args = orjson.loads(args)
        except orjson.JSONDecodeError as exc:
            walk.fail("", f"not valid JSON ({exc})")
            return _result(spec, walk, {})
    if not isinstance(args, Mapping):
        walk.fail("", f"must be a JSON object, got {type_name(args)}")
        return _result(spec, walk, {})
    try:
        size = len(orjson.dumps(args))
    except (TypeError, orjson.JSONEncodeError) as exc:
        walk.fail("", f"not JSON-serialisable ({exc})")
        return _result(spec, walk, {})
    if size > MAX_ARGUMENTS_BYTES:
        walk.fail("", f"too large ({size} bytes; the limit is {MAX_ARGUMENTS_BYTES})")
        return _result(spec, walk, {})
    schema = spec.definition.parameters
    cleaned = check_value(schema, args, "", None, walk, depth=0)
    if walk.issues or not isinstance(cleaned, dict):
        return _result(spec, walk, {})
    return ValidationResult(True, cleaned, None)


def _result(spec: ToolSpec, walk: Walk, cleaned: dict[str, Any]) -> ValidationResult:
    guidance = [f"Correct the arguments and call {spec.name} again."]
    guidance.extend(walk.hints)
    summary = parameter_summary(spec.definition.parameters)
    if summary:
        guidance.append(f"Parameters: {summary}.")
    error = {
        "error": "invalid_parameters",
        "reason": "; ".join(walk.issues) or "invalid arguments",
        "guidance": " ".join(guidance),
    }
    return ValidationResult(False, cleaned, error)


def parameter_summary(schema: Mapping[str, Any]) -> str:
    """A one-line description of a tool's parameters for error guidance."""
    props: Mapping[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    parts = []
    for name, sub in props.items():
        bits = [str(sub.get("type", "any"))]
        if name in required:
            bits.append("required")
        if "enum" in sub:
            bits.append("one of " + "|".join(map(str, sub["enum"])))
        if "minimum" in sub and "maximum" in sub:
            bits.append(f"{sub['minimum']}..{sub['maximum']}")
        if sub.get("type") == "string" and "maxLength" in sub:
            bits.append(f"max {sub['maxLength']} chars")
        if sub.get("type") == "array":
            lo, hi = sub.get("minItems"), sub.get("maxItems")
            bits.append(f"{lo or 0}..{hi} items" if hi is not None else "list")
        if "default" in sub:
            bits.append(f"default {sub['default']!r}")
        parts.append(f"{name} ({', '.join(bits)})")
    return "; ".join(parts)
