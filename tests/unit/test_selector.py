"""The tool selector (``app/agent/selector.py``) in-process: the hashing embedder and a
``ToolIndex`` over a small catalog of test tools, the catalog's context filter. Stage by
stage: context filter, top-k by cosine (both sides L2-normalised), core tools merged
first, the fallback to every context tool, and the ``tool_selection`` record."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import orjson
import pytest

from agenttools.core.catalog import tools_for_context
from agenttools.core.registry import ToolRegistry, ToolSpec
from app.agent.selector import IndexState, Selection, ToolSelector
from events import ToolSelection
from tests.support.agent_kit import tool
from toolindex.embedder import EmbeddingError, EmbedTask, Matrix, Vector
from toolindex.hashing import HashingEmbedder
from toolindex.index import ToolIndex

WF, TB, KN = frozenset({"workflow"}), frozenset({"tables"}), frozenset({"knowledge"})
CATALOG: list[ToolSpec] = [
    tool("list_rules", groups=WF, description="List the workflow rules of the account."),
    tool("create_rule", groups=WF, description="Create a new workflow rule that fires on an event."),
    tool("delete_rule", groups=WF, description="Delete a workflow rule by its id."),
    tool("send_alert_email", groups=WF, description="Send an alert email to a user when a rule fires."),
    tool("schedule_rule", groups=WF, description="Run a workflow rule on a schedule, daily or weekly."),
    tool("list_table_configs", groups=TB, description="List the saved table configurations."),
    tool("add_table_column", groups=TB, description="Add a column to a table configuration."),
    tool("search_docs", groups=KN | WF | TB, description="Search the documentation knowledge base."),
]
WORKFLOW_TOOLS = [s.name for s in CATALOG if "workflow" in s.groups]


class Scaled(HashingEmbedder):
    """Hashing vectors multiplied by a different factor per row (and for queries): only
    an index that normalises both sides scores them as cosines."""

    async def embed(self, text: str, *, task: EmbedTask = "query") -> Vector:
        return (await super().embed(text, task=task)) * np.float32(7.0)

    async def embed_batch(self, texts: list[str], *, task: EmbedTask = "document") -> Matrix:
        rows = await super().embed_batch(texts, task=task)
        return rows * np.arange(1, len(texts) + 1, dtype=np.float32)[:, None] * np.float32(3.0)


class FailingQueries(HashingEmbedder):
    async def embed(self, text: str, *, task: EmbedTask = "query") -> Vector:
        raise EmbeddingError("embedding service timed out")


async def ready_state(embedder: HashingEmbedder, specs: Sequence[ToolSpec] = CATALOG) -> IndexState:
    index = await ToolIndex.build([(s.name, s.embedding_text()) for s in specs], embedder)
    state = IndexState()
    state.ready(index, 1.0)
    return state


def selector(
    state: IndexState, *, core: Sequence[str] = (), top_k: int = 3, min_score: float = 0.0
) -> ToolSelector:
    def core_tools(context_type: str, context: Mapping[str, Any] | None) -> list[str]:
        return list(core)

    return ToolSelector(
        registry=ToolRegistry(CATALOG),
        index_state=state,
        core_tools=core_tools,
        context_filter=tools_for_context,
        top_k=top_k,
        min_score=min_score,
    )


async def cosines(query: str) -> dict[str, float]:
    """Cosine of the query with every tool text, from the plain hashing vectors."""
    plain = HashingEmbedder(dim=256)
    q = await plain.embed(query)
    rows = await plain.embed_batch([s.embedding_text() for s in CATALOG])
    q, rows = q / np.linalg.norm(q), rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return {s.name: float(v) for s, v in zip(CATALOG, rows @ q, strict=True)}


async def test_only_tools_of_the_context_are_ranked_and_offered() -> None:
    pick = selector(await ready_state(HashingEmbedder(dim=256)), top_k=0)
    # The query names a tables tool word for word; the workflow context never sees it.
    selection = await pick.select("workflow", {}, "add a column to a table configuration")
    assert {n for n, _ in selection.rag} <= set(WORKFLOW_TOOLS)
    assert set(selection.tools) <= set(WORKFLOW_TOOLS)
    assert "add_table_column" not in selection.tools and selection.fallback is None
    tables = await pick.select("tables", {}, "add a column to a table configuration")
    assert tables.rag[0][0] == "add_table_column"
    assert {n for n, _ in tables.rag} == {"list_table_configs", "add_table_column", "search_docs"}


async def test_top_k_ranks_by_cosine_with_both_sides_normalised() -> None:
    query = "send an email alert when the rule fires"
    selection = await selector(await ready_state(Scaled(dim=256)), top_k=3).select("workflow", {}, query)
    expected = await cosines(query)
    ranked = sorted(WORKFLOW_TOOLS, key=lambda n: -expected[n])
    assert [n for n, _ in selection.rag] == ranked[:3]
    assert selection.rag[0][0] == "send_alert_email"
    for name, score in selection.rag:
        assert score == pytest.approx(expected[name], abs=1e-4)
        assert -1.0 <= score <= 1.0
    scores = [s for _, s in selection.rag]
    assert scores == sorted(scores, reverse=True)


async def test_min_score_drops_weak_matches() -> None:
    query = "delete a workflow rule"
    expected = await cosines(query)
    threshold = sorted((expected[n] for n in WORKFLOW_TOOLS), reverse=True)[1]  # the second best
    selection = await selector(await ready_state(HashingEmbedder(dim=256)), top_k=0, min_score=threshold - 1e-6).select(
        "workflow", {}, query
    )
    assert [n for n, _ in selection.rag] == sorted(WORKFLOW_TOOLS, key=lambda n: -expected[n])[:2]


async def test_core_tools_come_first_then_search_results_without_duplicates() -> None:
    pick = selector(await ready_state(HashingEmbedder(dim=256)), core=["list_rules", "add_table_column", "search_docs"])
    selection = await pick.select("workflow", {}, "send an email alert when the rule fires")
    assert selection.core == ["list_rules", "search_docs"]  # a core tool of another context is dropped
    assert selection.tools[:2] == ["list_rules", "search_docs"]
    rest = [n for n, _ in selection.rag if n not in selection.core]
    assert selection.tools[2:] == rest and rest
    assert len(selection.tools) == len(set(selection.tools))


@pytest.mark.parametrize(
    ("make_state", "reason"),
    [
        (lambda: IndexState(), "index disabled"),
        (lambda: IndexState(status="building", reason="building the tool index"), "index building"),
    ],
)
async def test_no_ready_index_falls_back_to_every_context_tool(make_state: Any, reason: str) -> None:
    selection = await selector(make_state(), core=["list_rules"]).select("workflow", {}, "list my rules")
    assert selection.fallback is not None and selection.fallback.startswith(reason)
    assert selection.tools == WORKFLOW_TOOLS and selection.rag == []


async def test_a_failing_embedder_falls_back_to_every_context_tool_with_the_reason() -> None:
    state = await ready_state(FailingQueries(dim=256))
    selection = await selector(state, core=["list_rules"]).select("workflow", {}, "list my rules")
    assert selection.fallback is not None
    assert selection.fallback.startswith("search failed") and "timed out" in selection.fallback
    assert selection.tools == WORKFLOW_TOOLS  # all of them, not only the core ones
    assert selection.core == ["list_rules"] and selection.rag == []


async def test_an_empty_message_falls_back() -> None:
    selection = await selector(await ready_state(HashingEmbedder(dim=256))).select("workflow", {}, "   ")
    assert selection.fallback == "empty message" and selection.tools == WORKFLOW_TOOLS


async def test_the_tool_selection_record(caplog: pytest.LogCaptureFixture) -> None:
    pick = selector(await ready_state(HashingEmbedder(dim=256)), core=["list_rules"])
    with caplog.at_level(logging.INFO, logger="agentchat.selector"):
        selection = await pick.select("workflow", {}, "send an email alert when the rule fires")
    event = selection.event()
    assert isinstance(event, ToolSelection) and event.name == "tool_selection"
    wire = orjson.loads(event.to_json())
    assert wire["context_type"] == "workflow" and wire["core"] == ["list_rules"]
    assert wire["fallback"] is None and wire["tools"] == selection.tools
    assert [r["name"] for r in wire["rag"]] == [n for n, _ in selection.rag]
    assert [r["score"] for r in wire["rag"]] == [round(s, 4) for _, s in selection.rag]
    final = [r for r in caplog.records if getattr(r, "stage", None) == "tool_selection"]
    assert len(final) == 1
    record: Any = final[0]
    assert record.core == ["list_rules"] and record.final == selection.tools
    assert record.rag == [n for n, _ in selection.rag] and record.fallback is None
    fallback = await selector(IndexState()).select("workflow", {}, "x")
    assert isinstance(fallback, Selection)
    assert orjson.loads(fallback.event().to_json())["fallback"] == fallback.fallback


async def test_the_context_filter_follows_the_catalog_as_it_changes(caplog: pytest.LogCaptureFixture) -> None:
    """Stage 1 is cached per context (issue 23) but a tool added or removed later (an MCP
    server coming up or going away) is in, or out of, the next selection; one log
    record per selection."""
    pick = selector(IndexState())  # no index: every context tool is offered
    with caplog.at_level(logging.INFO, logger="agentchat.selector"):
        assert (await pick.select("workflow", {}, "x")).tools == WORKFLOW_TOOLS
        pick.registry.add_spec(tool("mcp_rule_audit", groups=WF, description="Audit the rules (MCP)."))
        assert (await pick.select("workflow", {}, "x")).tools == [*WORKFLOW_TOOLS, "mcp_rule_audit"]
        pick.registry.remove("mcp_rule_audit")
        pick.registry.remove("delete_rule")
        assert (await pick.select("workflow", {}, "x")).tools == [n for n in WORKFLOW_TOOLS if n != "delete_rule"]
    assert [r.getMessage() for r in caplog.records] == ["tool selection: final"] * 3
