"""Checks for ``POST /v1/workflow/rules/full`` and ``PUT …/{id}/full``.

Two layers, as in Ichor:

* ``parse_workflow`` — struct validation. Any problem is a 400 ``invalid_argument``
  listing every field at fault.
* ``check_workflow`` — graph, output-port and action-config checks. Problems do not fail
  the request; they come back as ``{"valid": false, "errors": [...]}`` with each error
  prefixed ``graph: ``, ``output port: `` or ``action config: ``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from backend.config_schema import check_against_schema
from backend.params import canonical_uuid

EDGE_TYPES = ("start", "sequence", "always")
TEMP_PREFIX = "temp:"
MAX_EDGE_ORDER = 2**31 - 1  # a PostgreSQL integer in Ichor


@dataclass(frozen=True, slots=True)
class ActionSpec:
    id: str | None
    name: str
    description: str
    action_type: str
    action_config: dict[str, Any]
    is_active: bool


@dataclass(frozen=True, slots=True)
class EdgeSpec:
    source_action_id: str | None
    target_action_id: str
    edge_type: str
    source_output: str | None
    edge_order: int


@dataclass(slots=True)
class WorkflowSpec:
    name: str = ""
    description: str = ""
    is_active: bool = True
    entity_id: str = ""
    trigger_type_id: str = ""
    trigger_conditions: Any = None
    canvas_layout: Any = None
    actions: list[ActionSpec] = field(default_factory=list)
    edges: list[EdgeSpec] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ActionTypeInfo:
    ports: tuple[str, ...]
    config_schema: Mapping[str, Any]


@dataclass(slots=True)
class FieldProblems:
    items: list[tuple[str, str]] = field(default_factory=list)

    def add(self, where: str, problem: str) -> None:
        self.items.append((where, problem))

    def message(self) -> str:
        return "validation failed: " + "; ".join(f"{f}: {p}" for f, p in self.items)

    def as_fields(self) -> list[dict[str, str]]:
        return [{"field": f, "error": p} for f, p in self.items]


def _string(body: Mapping[str, Any], key: str, where: str, problems: FieldProblems, *, lo: int, hi: int) -> str:
    value = body.get(key)
    if value is None:
        if lo > 0:
            problems.add(where, "is required")
        return ""
    if not isinstance(value, str):
        problems.add(where, "must be a string")
        return ""
    if not lo <= len(value) <= hi:
        problems.add(where, f"must be between {lo} and {hi} characters" if lo else f"must be at most {hi} characters")
    return value


def _bool(body: Mapping[str, Any], key: str, where: str, problems: FieldProblems, default: bool) -> bool:
    value = body.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        problems.add(where, "must be a boolean")
        return default
    return value


def _uuid(body: Mapping[str, Any], key: str, where: str, problems: FieldProblems, *, required: bool) -> str:
    value = body.get(key)
    if value is None or value == "":
        if required:
            problems.add(where, "is required")
        return ""
    parsed = canonical_uuid(value) if isinstance(value, str) else None
    if parsed is None:
        problems.add(where, f"must be a UUID, got {value!r}")
        return ""
    return parsed


def _optional_object(body: Mapping[str, Any], key: str, problems: FieldProblems) -> Any:
    value = body.get(key)
    if value is not None and not isinstance(value, dict):
        problems.add(key, "must be an object")
        return None
    return value


def parse_workflow(body: Mapping[str, Any], action_types: Sequence[str]) -> tuple[WorkflowSpec, FieldProblems]:
    """Struct-validate a SaveWorkflowRequest; the caller raises when problems were found."""
    problems = FieldProblems()
    spec = WorkflowSpec(
        name=_string(body, "name", "name", problems, lo=1, hi=255),
        description=_string(body, "description", "description", problems, lo=0, hi=1000),
        is_active=_bool(body, "is_active", "is_active", problems, True),
        entity_id=_uuid(body, "entity_id", "entity_id", problems, required=True),
        trigger_type_id=_uuid(body, "trigger_type_id", "trigger_type_id", problems, required=True),
        trigger_conditions=_optional_object(body, "trigger_conditions", problems),
        canvas_layout=_optional_object(body, "canvas_layout", problems),
    )
    raw_actions = body.get("actions") or []
    if not isinstance(raw_actions, list):
        problems.add("actions", "must be an array")
        raw_actions = []
    for i, raw in enumerate(raw_actions):
        where = f"actions[{i}]"
        if not isinstance(raw, dict):
            problems.add(where, "must be an object")
            continue
        action_type = raw.get("action_type")
        if not isinstance(action_type, str) or not action_type:
            problems.add(f"{where}.action_type", "is required")
            action_type = ""
        elif action_type not in action_types:
            problems.add(f"{where}.action_type", f"{action_type!r} is not one of {', '.join(action_types)}")
        config = raw.get("action_config")
        if config is None:
            problems.add(f"{where}.action_config", "is required")
        elif not isinstance(config, dict):
            problems.add(f"{where}.action_config", "must be an object")
        spec.actions.append(
            ActionSpec(
                id=_uuid(raw, "id", f"{where}.id", problems, required=False) or None,
                name=_string(raw, "name", f"{where}.name", problems, lo=1, hi=255),
                description=_string(raw, "description", f"{where}.description", problems, lo=0, hi=1000),
                action_type=action_type,
                action_config=config if isinstance(config, dict) else {},
                is_active=_bool(raw, "is_active", f"{where}.is_active", problems, True),
            )
        )
    raw_edges = body.get("edges") or []
    if not isinstance(raw_edges, list):
        problems.add("edges", "must be an array")
        raw_edges = []
    for i, raw in enumerate(raw_edges):
        where = f"edges[{i}]"
        if not isinstance(raw, dict):
            problems.add(where, "must be an object")
            continue
        edge_type = raw.get("edge_type")
        if edge_type not in EDGE_TYPES:
            problems.add(f"{where}.edge_type", f"must be one of {', '.join(EDGE_TYPES)}, got {edge_type!r}")
        order = raw.get("edge_order", 0)
        if order is None:
            order = 0
        if not isinstance(order, int) or isinstance(order, bool) or not 0 <= order <= MAX_EDGE_ORDER:
            problems.add(f"{where}.edge_order", f"must be an integer between 0 and {MAX_EDGE_ORDER}, got {order!r}")
            order = 0
        source = raw.get("source_action_id")
        if source is not None and not isinstance(source, str):
            problems.add(f"{where}.source_action_id", "must be a string")
            source = None
        output = raw.get("source_output")
        if output is not None and not isinstance(output, str):
            problems.add(f"{where}.source_output", "must be a string")
            output = None
        spec.edges.append(
            EdgeSpec(
                source_action_id=source or None,
                target_action_id=_string(raw, "target_action_id", f"{where}.target_action_id", problems, lo=1, hi=64),
                edge_type=str(edge_type),
                source_output=output or None,
                edge_order=order,
            )
        )
    return spec, problems


def _resolve(ref: str, actions: Sequence[ActionSpec]) -> int | str:
    """The action index ``ref`` points at, or the reason it points nowhere."""
    if ref.startswith(TEMP_PREFIX):
        tail = ref[len(TEMP_PREFIX) :]
        if not (tail.isascii() and tail.isdigit() and len(tail) <= 9):
            return f"{ref!r} is not a valid temp reference (expected temp:<action index>)"
        index = int(tail)
        if index >= len(actions):
            return f"{ref!r} is out of range: there are {len(actions)} action(s)"
        return index
    wanted = canonical_uuid(ref)
    if wanted is not None:
        for i, action in enumerate(actions):
            if action.id == wanted:
                return i
        return f"{ref!r} is not the id of any action in this request"
    return f"{ref!r} is neither temp:<index> nor an action id"


def _label(actions: Sequence[ActionSpec], index: int) -> str:
    return f'"{actions[index].name}"'


def check_workflow(spec: WorkflowSpec, types: Mapping[str, ActionTypeInfo]) -> list[str]:
    """Graph, port and config errors for a struct-valid workflow; empty means valid."""
    errors: list[str] = []
    actions = spec.actions
    for i, action in enumerate(actions):
        info = types.get(action.action_type)
        if info is None:
            continue
        for problem in check_against_schema(action.action_config, dict(info.config_schema)):
            errors.append(f"action config: actions[{i}] {_label(actions, i)} ({action.action_type}): {problem}")

    if not actions and not spec.edges:
        return errors
    if actions and not spec.edges:
        errors.append("graph: rules with actions require at least one edge (a start edge targeting the first action)")
        return errors

    adjacency: dict[int, list[int]] = {i: [] for i in range(len(actions))}
    start_targets: list[int] = []
    start_count = 0
    for k, edge in enumerate(spec.edges):
        target = _resolve(edge.target_action_id, actions)
        if isinstance(target, str):
            errors.append(f"graph: edges[{k}].target_action_id {target}")
        if edge.edge_type == "start":
            start_count += 1
            if edge.source_action_id is not None:
                errors.append(f"graph: edges[{k}] is a start edge and must not have a source_action_id")
            if isinstance(target, int):
                start_targets.append(target)
            continue
        if edge.source_action_id is None:
            errors.append(f"graph: edges[{k}] is a {edge.edge_type} edge and needs a source_action_id")
            continue
        source = _resolve(edge.source_action_id, actions)
        if isinstance(source, str):
            errors.append(f"graph: edges[{k}].source_action_id {source}")
            continue
        if edge.source_output is not None:
            info = types.get(actions[source].action_type)
            if info is not None and edge.source_output not in info.ports:
                errors.append(
                    f"output port: edges[{k}]: {edge.source_output!r} is not an output port of action "
                    f"{_label(actions, source)} ({actions[source].action_type}); valid ports: {', '.join(info.ports)}"
                )
        if isinstance(target, int):
            adjacency[source].append(target)

    if start_count != 1:
        errors.append(f"graph: exactly one start edge is required, found {start_count}")
    cycle = _find_cycle(adjacency)
    if cycle is not None:
        errors.append("graph: cycle detected: " + " -> ".join(_label(actions, i) for i in cycle))
    if start_count == 1 and len(start_targets) == 1:
        reached = _reachable(start_targets[0], adjacency)
        for i in range(len(actions)):
            if i not in reached:
                errors.append(f"graph: action {_label(actions, i)} (actions[{i}]) is not reachable from the start edge")
    return errors


def _find_cycle(adjacency: Mapping[int, list[int]]) -> list[int] | None:
    """One cycle as a closed path of action indexes, found by iterative DFS, or None."""
    state: dict[int, int] = {}  # 1 = on the stack, 2 = finished
    for root in adjacency:
        if root in state:
            continue
        stack: list[tuple[int, int]] = [(root, 0)]
        path: list[int] = [root]
        state[root] = 1
        while stack:
            node, next_child = stack[-1]
            children = adjacency[node]
            if next_child >= len(children):
                stack.pop()
                path.pop()
                state[node] = 2
                continue
            stack[-1] = (node, next_child + 1)
            child = children[next_child]
            if state.get(child) == 1:
                return [*path[path.index(child) :], child]
            if child not in state:
                state[child] = 1
                stack.append((child, 0))
                path.append(child)
    return None


def _reachable(start: int, adjacency: Mapping[int, list[int]]) -> set[int]:
    seen = {start}
    todo = [start]
    while todo:
        for child in adjacency[todo.pop()]:
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return seen
