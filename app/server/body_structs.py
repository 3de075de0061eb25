"""Request bodies declared once, as msgspec ``Struct``s: decoded field by field with the
declared types and constraints, and described in OpenAPI from the same declaration.

Why field by field rather than ``msgspec.convert(body, Struct)``: msgspec reports the
first error in the order the *client* wrote the members, and a missing field only after
the whole object; every face answers the error of the first field in *declaration*
order instead (a body with two bad fields always gets the same 400). So each field is
converted on its own, in the struct's order, and its face turns a refusal into its own
error code and message (``Refuse``); what a type cannot say (a bound from the settings, a
pattern ECMAScript and Python read differently) is the face's ``Check``, run right
after its field so the same error still wins.

A struct declared with ``forbid_unknown_fields=True`` (the native face's bodies) refuses a
member it does not declare, before any field (``app/server/unknown_fields.py``), and its
schema says ``additionalProperties: false``: one declaration for both. The compatible
faces' structs leave it off, and their unknown members are ignored.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import msgspec

from app.server.unknown_fields import refuse_unknown_fields

S = TypeVar("S", bound=msgspec.Struct)
#: A field's member was absent from the body (``Refuse`` gets it for a missing required field).
ABSENT: Any = msgspec.NODEFAULT
#: ``(field name, the member as sent or ABSENT)`` → the face's error for that field.
Refuse = Callable[[str, Any], Exception]
#: ``(field name, its decoded value)``: raises the face's error, or returns.
Check = Callable[[str, Any], None]

_REF = "#/$defs/"


# A module-level cache on purpose: keyed by this program's own Struct classes (a fixed, small set), read-only.
@functools.cache
def _fields(struct: type[msgspec.Struct]) -> tuple[msgspec.structs.FieldInfo, ...]:
    """``msgspec.structs.fields``, once per struct class: it evaluates the class's
    annotations on every call (a few percent of a busy server's CPU when it ran per
    request). A pure function of a class, memoised: the same answer for every app."""
    return msgspec.structs.fields(struct)


@functools.cache
def _names(struct: type[msgspec.Struct]) -> tuple[str, ...]:
    """The members ``struct`` declares, as the body names them, in declaration order."""
    return tuple(field.encode_name for field in _fields(struct))


def decode_fields(body: Mapping[str, Any], struct: type[S], refuse: Refuse, check: Check | None = None) -> S:
    """``struct`` from a JSON object: each field in declaration order taken from its member
    (absent: its default; absent and required: ``refuse``), converted strictly with its
    declared type (a mismatch: ``refuse``), then ``check``ed. Unknown members are refused
    first (400 ``unknown_field``) when the struct forbids them, else ignored."""
    fields = _fields(struct)
    if struct.__struct_config__.forbid_unknown_fields:
        refuse_unknown_fields(body, _names(struct))
    values: dict[str, Any] = {}
    for field in fields:
        raw = body.get(field.encode_name, ABSENT)
        if raw is ABSENT:
            if field.required:
                raise refuse(field.name, ABSENT)
            continue
        try:
            value = msgspec.convert(raw, field.type)
        except msgspec.ValidationError:
            raise refuse(field.name, raw) from None
        if check is not None:
            check(field.name, value)
        values[field.name] = value
    return struct(**values)


def body_schema(struct: type[msgspec.Struct], extra: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12, as OpenAPI 3.1 reads it) of ``struct``, as msgspec
    generates it, self-contained (nested structs inlined: a ``$ref`` inside an OpenAPI
    component resolves against the document) and without msgspec's ``title``s.
    ``extra``: keywords added to a property that only the running server knows (a
    length bound from the settings)."""
    (ref,), defs = msgspec.json.schema_components([struct], ref_template=_REF + "{name}")
    schema: dict[str, Any] = _tidy(_inline(ref, defs))
    for name, keywords in (extra or {}).items():
        schema["properties"][name].update(keywords)
    return schema


def _inline(node: Any, defs: Mapping[str, Any]) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF):
            target = _inline(defs[ref.removeprefix(_REF)], defs)
            return {**target, **{k: _inline(v, defs) for k, v in node.items() if k != "$ref"}}
        return {k: _inline(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


def _tidy(node: Any) -> Any:
    """Descriptions as prose (docstrings keep their indentation); no ``title`` (the
    component's name says it)."""
    if isinstance(node, list):
        return [_tidy(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _tidy(v) for k, v in node.items() if k not in ("title", "properties")}
    if isinstance(node.get("properties"), dict):  # member names, not keywords: a member may be called "title"
        out["properties"] = {k: _tidy(v) for k, v in node["properties"].items()}
    if isinstance(out.get("description"), str):
        out["description"] = " ".join(inspect.cleandoc(out["description"]).split())
    return out
