"""Bounds on what clients send, checked before anything reaches SQLite or an encoder.

Bad input is the client's problem: each check answers ``400`` (``413`` for sheer size)
with ``{"error", "detail"}`` naming the field, never a ``500`` from deep inside.

- SQLite integers are signed 64-bit; a larger Python ``int`` raises ``OverflowError``
  inside the driver. orjson decodes JSON integers up to ``2**64 - 1`` as ``int`` (larger
  ones become ``float``), so ``2**63 … 2**64 - 1`` would get through a type check.
- orjson encodes at most 254 levels of nesting and Python's own ``json`` recurses, so a
  body nested a few hundred levels deep fails when it is stored or echoed, not when read.
- Python's ``int()`` accepts ``"1_000"``, ``" 7 "``, ``"+7"`` and non-ASCII digits, and
  converts a 4,000-digit header before any range check; ``parse_int`` takes ASCII digits
  with an optional ``-`` and at most 19 of them.
"""

from __future__ import annotations

import re
from typing import Any

from app.server.problems import HTTPProblem

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# Number.MAX_SAFE_INTEGER: the largest integer a browser holds exactly (event ids, cursors).
MAX_SAFE_INTEGER = 2**53 - 1
MAX_JSON_DEPTH = 64
MAX_JSON_NODES = 1_000_000

_INTEGER = re.compile(r"-?[0-9]{1,19}")


def _shown(value: Any) -> str:
    """A short, safe rendering of what the client sent, for the error detail."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**40:
        return "a number with more than 40 digits"
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "…"


def _range_problem(name: str, lo: int, hi: int, value: Any) -> HTTPProblem:
    return HTTPProblem(400, "invalid_field", f"{name} must be an integer between {lo} and {hi}; got {_shown(value)}")


def parse_int(raw: str | None, *, name: str, lo: int, hi: int, default: int | None = None) -> int:
    """An integer from a header, query string or path: ``-?[0-9]+`` within ``[lo, hi]``.

    Missing or empty gives ``default`` (a ``400`` when there is none).
    """
    if raw is None or raw == "":
        if default is None:
            raise HTTPProblem(400, "invalid_field", f"{name} is required")
        return default
    if not _INTEGER.fullmatch(raw):
        raise _range_problem(name, lo, hi, raw)
    value = int(raw)
    if not lo <= value <= hi:
        raise _range_problem(name, lo, hi, value)
    return value


def check_int(value: Any, *, name: str, lo: int, hi: int) -> int:
    """An integer from a JSON body: a JSON integer (not a boolean, float or string) in ``[lo, hi]``."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise _range_problem(name, lo, hi, value)
    return value


def check_number(value: Any, *, name: str, lo: float, hi: float) -> float:
    """A number from a JSON body (integer or float, not a boolean) in ``[lo, hi]``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        detail = f"{name} must be a number between {lo:g} and {hi:g}; got {_shown(value)}"
        raise HTTPProblem(400, "invalid_field", detail)
    return float(value)


def check_json(value: Any, *, max_depth: int = MAX_JSON_DEPTH, max_nodes: int = MAX_JSON_NODES) -> None:
    """Refuse a decoded JSON document nested deeper than ``max_depth`` containers, with
    more than ``max_nodes`` values, or holding an integer outside SQLite's 64-bit range.

    Iterative, so the check itself cannot hit a recursion limit; the error names where.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    nodes = 0
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if nodes > max_nodes:
            raise HTTPProblem(413, "payload_too_large", f"the body holds more than {max_nodes} JSON values")
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            if type(node) is int and not INT64_MIN <= node <= INT64_MAX:
                raise HTTPProblem(
                    400,
                    "number_out_of_range",
                    f"{_path_to(value, node)}: integers must lie between {INT64_MIN} and {INT64_MAX}",
                )
            continue
        if depth > max_depth:
            raise HTTPProblem(
                400, "too_deep", f"{_path_to(value, node)}: the body is nested deeper than {max_depth} levels"
            )
        stack.extend((child, depth + 1) for child in children)


def _path_to(root: Any, target: Any, limit: int = 80) -> str:
    """Where ``target`` (by identity) sits in ``root``, as ``a.b[2].c``; only run on errors."""
    stack: list[tuple[Any, str]] = [(root, "")]
    while stack:
        node, path = stack.pop()
        if node is target:
            path = path.lstrip(".") or "the body"
            return path if len(path) <= limit else path[: limit - 1] + "…"
        if isinstance(node, dict):
            stack.extend(
                (v, f"{path}.{k}" if isinstance(k, str) and k.isidentifier() else f"{path}[{k!r}]")
                for k, v in node.items()
            )
        elif isinstance(node, list):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(node))
    return "the body"
