"""An MCP server whose tools cannot be embedded has them offered but never ranked (only
a fallback offers them): said in ``/readyz``'s ``mcp`` (``unranked`` and its detail) and
counted by ``agentchat_mcp_servers_unranked``, where it was a per-server note only; the
servers' connection states are on ``/metrics`` too (``agentchat_mcp_servers{state}``)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types
import orjson

from agenttools.core.catalog import build_catalog
from agenttools.core.registry import ToolRegistry
from agenttools.mcp.config import McpServerConfig
from app.agent.selector import IndexState
from app.config import Settings
from app.mcp_room import McpRoom
from llm.extractive import ExtractiveProvider
from tests.conftest import running_app
from tests.test_kb_search_warnings import BreakableEmbedder
from tests.test_metrics import get_metrics, value
from toolindex.embedder import EmbeddingError, EmbedTask, Matrix
from toolindex.hashing import HashingEmbedder
from toolindex.index import ToolIndex

ROOT = Path(__file__).resolve().parent.parent
TOOLS = [types.Tool(name="get_sum", description="Add two numbers.", inputSchema={"type": "object"})]


class RefusesOpsTools(HashingEmbedder):
    """The hashing embedder, except that a batch of the ``ops`` server's tools is refused
    as a rate-limited embedding service refuses it."""

    async def embed_batch(self, texts: list[str], *, task: EmbedTask = "document") -> Matrix:
        if any("word_stats" in t for t in texts):
            raise EmbeddingError("embedding service answered HTTP 429")
        return await super().embed_batch(texts, task=task)


async def test_readyz_and_metrics_show_a_server_whose_tools_are_not_ranked(tmp_path: Path) -> None:
    config = tmp_path / "mcp.toml"
    config.write_text(
        f'[servers.ops]\ncommand = {orjson.dumps(sys.executable).decode()}\n'
        f'args = ["-m", "tests.fakes.mcp_server", "ops"]\ncwd = {orjson.dumps(str(ROOT)).decode()}\n'
        'protocol = "legacy"\nconnect_timeout_s = 60\n'
    )
    settings = Settings.from_env({
        "AGENT_DB_PATH": str(tmp_path / "a.db"),
        "AGENT_INGEST_SAMPLE_KB": "false",
        "AGENT_LLM_PROVIDER": "extractive",
        "AGENT_MCP_SERVERS": str(config),
        "OLLAMA_HOST": "http://127.0.0.1:9",
    })
    async with (
        running_app(settings, provider=ExtractiveProvider(), embedder=RefusesOpsTools()) as (base, app),
        httpx.AsyncClient(timeout=30) as client,
    ):
        body: dict[str, Any] = {}
        async with asyncio.timeout(90):
            while True:
                body = (await client.get(f"{base}/readyz")).json()
                mcp = body["checks"]["mcp"]
                if mcp["servers"]["ops"]["state"] == "up" and body["checks"]["tool_index"]["status"] == "ready" \
                        and "word_stats" in app.state.services.agent.registry:
                    break
                await asyncio.sleep(0.05)
        metrics = await get_metrics(client, base)
    assert mcp["unranked"] == ["ops"] and "not in the tool index" in mcp["detail"], mcp
    assert "429" in mcp["servers"]["ops"]["index"]
    assert value(metrics, "agentchat_mcp_servers_unranked", "agentchat_mcp_servers_unranked") == 1
    assert value(metrics, "agentchat_mcp_servers", "agentchat_mcp_servers", state="up") == 1


async def _web_room_unranked() -> tuple[ToolRegistry, BreakableEmbedder, IndexState, McpRoom]:
    """A room whose "web" server listed ``TOOLS`` while the embedder failed: offered,
    never ranked."""
    registry = ToolRegistry(build_catalog())
    embedder = BreakableEmbedder()
    state = IndexState()
    room = McpRoom([McpServerConfig("web", "stdio", command="/nonexistent/mcp")], registry, state, embedder, None)
    room.base_ready(await ToolIndex.build([(s.name, s.definition.description) for s in registry], embedder))
    embedder.broken = True
    await room.on_tools("web", TOOLS)
    return registry, embedder, state, room


async def test_the_next_tool_list_that_embeds_ranks_them_again() -> None:
    registry, embedder, state, room = await _web_room_unranked()
    assert "get_sum" in registry  # offered ...
    assert state.index is not None and "get_sum" not in state.index.names  # ... never ranked
    assert room.unranked == {"web"} and (await room.readiness())["unranked"] == ["web"]
    embedder.broken = False
    await room.on_tools("web", TOOLS)  # the next list (a reconnect, a change) embeds them
    assert "get_sum" in state.index.names
    assert room.unranked == set() and "unranked" not in await room.readiness()


async def test_a_server_that_goes_down_or_lists_no_tools_is_no_longer_unranked() -> None:
    """Unranked means tools offered but never ranked: a server that went down (its tools
    absent) or lists none has none to rank, so it leaves ``unranked`` (and the gauge) at
    once instead of staying there until a later list embeds."""
    registry, _embedder, _state, room = await _web_room_unranked()
    assert room.unranked == {"web"}
    await room.on_tools("web", None)  # the server went down: its tools are absent
    assert "get_sum" not in registry and room.unranked == set()
    assert "unranked" not in await room.readiness()
    await room.on_tools("web", TOOLS)  # back up, still not embeddable
    assert room.unranked == {"web"}
    await room.on_tools("web", [])  # it now lists nothing
    assert room.unranked == set()
