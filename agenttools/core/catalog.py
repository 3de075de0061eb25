"""The tool catalog: every tool the agent can be offered, the contexts it belongs to, and the
core tools each context always gets.

``build_catalog()`` returns fresh ``ToolSpec`` values (the definitions live in
``catalog_workflow``, ``catalog_tables``, ``catalog_table_edits`` and ``catalog_knowledge``); the app builds a
``ToolRegistry`` from them once at start-up. Everything else here is a pure function of its
arguments or an immutable constant, so several apps can live in one process.

Each tool carries its own facts (``ToolSpec.read_only``, ``core_in``, …), set where it is
defined; :func:`names_where` asks them. Core tools (stage 3 of tool selection) are the ones
whose ``core_in`` names the context, always offered there whatever the embedding search
ranks; the two mandatory tools of the RAG flow are appended everywhere so a context can
never lose the tool it is required to call first or last.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import orjson

from agenttools.core.catalog_discovery import FIND_TOOLS, discovery_specs
from agenttools.core.catalog_knowledge import knowledge_specs
from agenttools.core.catalog_table_edits import table_edit_specs
from agenttools.core.catalog_tables import table_specs
from agenttools.core.catalog_workflow import NEW_WORKFLOW, workflow_specs
from agenttools.core.registry import ToolSpec
from agenttools.core.registry import names_where as _names_where

CONTEXT_TYPES: tuple[str, ...] = ("workflow", "tables", "knowledge")

RAG_FLOW_TOOLS: tuple[str, ...] = (
    "knowledge_base_search",
    "perplexity_search",
    "index_keywords",
    "generate_response",
)
"""The tools of the mandatory RAG flow (seeds 000–002); they belong to every context."""

MANDATORY_CORE_TOOLS: tuple[str, ...] = ("knowledge_base_search", "generate_response")
"""Appended to every context's core set: the tool that must come first and the one that must
come last. ``perplexity_search`` and ``index_keywords`` are not core: the agent loop offers
them once the knowledge base has been searched."""

DISCOVERY_CORE_TOOLS: tuple[str, ...] = (FIND_TOOLS,)
"""Appended to every context's core set: the search over the context's whole catalog for
a tool that selection did not offer (``agenttools.core.catalog_discovery``)."""


def build_catalog() -> list[ToolSpec]:
    """Every tool, in catalog order: workflow tools, table tools, knowledge tools, ``find_tools``."""
    specs = [*workflow_specs(), *table_specs(), *table_edit_specs(), *knowledge_specs(), *discovery_specs()]
    seen: set[str] = set()
    for spec in specs:
        if spec.name in seen:
            raise ValueError(f"duplicate tool {spec.name!r} in catalog")
        seen.add(spec.name)
    return specs


def names_where(test: Callable[[ToolSpec], bool], specs: Iterable[ToolSpec] | None = None) -> list[str]:
    """The names of the tools (by default the catalog's) for which ``test`` holds, in
    catalog order: how a reader with no registry at hand asks a fact, e.g.
    ``names_where(lambda s: s.knowledge_search)``."""
    return _names_where(build_catalog() if specs is None else specs, test)


def _check_context_type(context_type: str) -> None:
    if context_type not in CONTEXT_TYPES:
        raise ValueError(f"unknown context_type {context_type!r}; expected one of {', '.join(CONTEXT_TYPES)}")


def tools_for_context(specs: Iterable[ToolSpec], context_type: str) -> list[ToolSpec]:
    """Stage 1 of selection: the tools whose groups include ``context_type``, in catalog order."""
    _check_context_type(context_type)
    return [s for s in specs if context_type in s.groups]


def core_tools(
    context_type: str,
    context: Mapping[str, Any] | None,
    *,
    mandatory: Sequence[str] = MANDATORY_CORE_TOOLS,
    specs: Iterable[ToolSpec] | None = None,
) -> list[str]:
    """The tool names always offered in this context, de-duplicated, in priority order
    (``find_tools`` last): the tools whose ``core_in`` names the context (the empty
    workflow canvas is ``new_workflow``), by ``core_rank``, then the mandatory ones.

    ``mandatory`` is what the context's enforcement policy requires (by default the first
    and last tools of the RAG flow); a policy that enforces nothing passes ``()``.
    ``specs`` is where the facts are read (the app's registry; by default the catalog).
    """
    _check_context_type(context_type)
    key = NEW_WORKFLOW if context_type == "workflow" and is_new_workflow(context) else context_type
    core = [s for s in (build_catalog() if specs is None else specs) if key in s.core_in]
    base = [s.name for s in sorted(core, key=lambda s: s.core_rank)]  # stable: ties keep catalog order
    out: list[str] = []
    for name in (*base, *mandatory, *DISCOVERY_CORE_TOOLS):
        if name not in out:
            out.append(name)
    return out


def is_new_workflow(context: Mapping[str, Any] | str | bytes | object | None) -> bool:
    """Whether a workflow context describes an empty canvas (guided creation).

    Accepts the decoded context or its raw JSON text. The rules:
    1. nothing (``None``, empty text, or JSON ``null``) → new;
    2. anything that is not an object with a usable shape (invalid JSON, an array, a
       non-boolean ``is_new``, a non-string ``workflow_id``, non-list ``nodes``) → not new;
    3. an explicit boolean ``is_new`` wins, whatever else is there;
    4. otherwise new when ``workflow_id`` is empty and there are no ``nodes``.
    """
    if context is None:
        return True
    if isinstance(context, (bytes, bytearray, memoryview, str)):
        raw = bytes(context) if not isinstance(context, str) else context.encode()
        if not raw.strip():
            return True
        try:
            context = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return False
        if context is None:
            return True
    if not isinstance(context, Mapping):
        return False
    is_new = context.get("is_new")
    workflow_id = context.get("workflow_id")
    nodes = context.get("nodes")
    if is_new is not None and not isinstance(is_new, bool):
        return False
    if workflow_id is not None and not isinstance(workflow_id, str):
        return False
    if nodes is not None and not isinstance(nodes, list):
        return False
    if isinstance(is_new, bool):
        return is_new
    return not workflow_id and not nodes
