"""Tools carry their own facts (issue 22): the sets the executor, the flow policy, the
metrics and the selector read off ``ToolSpec`` are exactly the name lists they kept
before the facts existed. The literals below were computed from those lists
(``READ_ONLY_TOOLS``, ``RUN_AT_MOST_ONCE``, ``STARTS_AT_SEND``, ``KNOWLEDGE_SEARCH_TOOLS``,
``CLOSED_BY_ENOUGH``, ``KB_SEARCH_TOOLS`` and the per-context core tuples) before they were
deleted, so a change here is a change of behaviour, not a refactoring."""

from __future__ import annotations

from typing import Any

import pytest

from agenttools.core.catalog import build_catalog, core_tools, names_where
from agenttools.core.executor import ToolExecutor
from agenttools.core.registry import ToolRegistry
from agenttools.mcp.catalog import McpCatalog, McpTool
from agenttools.rag.policy import FlowPolicy
from app.ops.run_metrics import RunMetrics, assess

READ_ONLY = frozenset({
    "discover", "discover_table_reference", "explain_workflow_node", "find_tools", "get_alert_detail",
    "get_document_metadata", "get_table_config", "get_workflow_rule", "knowledge_base_search",
    "list_alerts_for_rule", "list_my_alerts", "list_table_configs", "list_workflow_rules", "perplexity_search",
    "search_database_schema", "search_semantic", "search_text", "validate_table_config",
})
AT_MOST_ONCE = frozenset({"perplexity_search"})
STARTS_AT_SEND = frozenset({"perplexity_search"})
KNOWLEDGE_SEARCH = frozenset({"knowledge_base_search", "search_text", "search_semantic", "get_document_metadata"})
CLOSED_BY_ENOUGH = frozenset({"knowledge_base_search", "search_text", "search_semantic", "perplexity_search"})
CORE: dict[tuple[str, Any], list[str]] = {
    ("workflow", "existing"): ["list_workflow_rules", "discover"],
    ("workflow", "new"): ["discover", "start_draft", "add_draft_action", "remove_draft_action", "preview_draft"],
    ("tables", None): [
        "get_table_config", "discover_table_reference", "apply_column_change", "apply_filter_change",
        "preview_table_config",
    ],
    ("knowledge", None): [
        "knowledge_base_search", "search_text", "search_semantic", "get_document_metadata", "perplexity_search",
        "index_keywords", "generate_response",
    ],
}
CONTEXTS = {"existing": {"workflow_id": "wf-1"}, "new": None, None: None}


def test_the_facts_name_the_sets_of_today() -> None:
    assert set(names_where(lambda s: s.read_only)) == READ_ONLY
    assert set(names_where(lambda s: s.at_most_once)) == AT_MOST_ONCE
    assert set(names_where(lambda s: s.starts_at_send)) == STARTS_AT_SEND
    assert set(names_where(lambda s: s.knowledge_search)) == KNOWLEDGE_SEARCH
    assert set(names_where(lambda s: s.closed_by_enough)) == CLOSED_BY_ENOUGH


def test_the_executor_reads_the_facts() -> None:
    executor = ToolExecutor(ToolRegistry(build_catalog()))
    names = [s.name for s in build_catalog()] + ["no_such_tool"]
    assert {n for n in names if executor.is_read_only(n)} == READ_ONLY
    assert {n for n in names if executor.is_repeatable(n)} == READ_ONLY - AT_MOST_ONCE
    assert {n for n in names if executor.starts_at_send(n)} == STARTS_AT_SEND


def test_the_policy_and_the_metrics_read_the_facts() -> None:
    policy = FlowPolicy()
    assert policy.knowledge_search == KNOWLEDGE_SEARCH
    assert policy.closed_by_enough == CLOSED_BY_ENOUGH
    assert policy.tools == ("knowledge_base_search", "perplexity_search", "index_keywords", "generate_response")
    from prometheus_client import CollectorRegistry

    assert RunMetrics(CollectorRegistry())._kb_tools == KNOWLEDGE_SEARCH
    assert assess.__defaults__ == (None,)


@pytest.mark.parametrize(("context_type", "which"), list(CORE))
def test_core_sets_come_from_the_facts(context_type: str, which: Any) -> None:
    base = CORE[(context_type, which)]
    assert core_tools(context_type, CONTEXTS[which], mandatory=()) == [*base, "find_tools"]
    registry = ToolRegistry(build_catalog())
    assert core_tools(context_type, CONTEXTS[which], mandatory=(), specs=registry) == [*base, "find_tools"]


class _NoCaller:
    async def call_tool(self, tool: str, arguments: dict[str, Any]) -> Any:
        raise AssertionError("not called")


def test_mcp_tools_keep_todays_facts_whatever_their_hints() -> None:
    """Today no MCP tool is read-only (it runs alone, and at most once after a crash),
    whatever ``readOnlyHint`` its server gives; the facts keep that."""
    registry = ToolRegistry(build_catalog())
    catalog = McpCatalog(registry, {"srv": ["knowledge"]}, {"srv": _NoCaller()})
    tools = [McpTool("srv", "look", "Looks.", {"type": "object"}, read_only=True),
             McpTool("srv", "poke", "Pokes.", {"type": "object"})]
    catalog.update("srv", tools)
    executor = ToolExecutor(registry)
    for name in ("look", "poke"):
        spec = registry.spec(name)
        assert not (spec.read_only or spec.knowledge_search or spec.closed_by_enough or spec.core_in)
        assert not executor.is_read_only(name) and not executor.is_repeatable(name)
