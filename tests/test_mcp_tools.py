"""MCP tools end to end: real MCP servers, the real app on loopback, the real agent loop.

One world is shared by the module (starting it is the slow part): the app, configured by
an ``AGENT_MCP_SERVERS`` TOML file, talks to

* ``ops`` — ``python -m tests.fakes.mcp_server ops`` over stdio, handshake-era protocol
  (so its list changes arrive as plain ``notifications/tools/list_changed``);
* ``desk`` — the same SDK's streamable HTTP app on a loopback port, 2026-era protocol
  (list changes on a ``subscriptions/listen`` stream), with a header from the environment;
* ``broken`` — a command that does not exist.

``ops`` and ``desk`` each list 250 generated tools and a few real ones. The model is the
Ollama loopback fake, scripted per test; the policy is the default (the mandatory flow:
``knowledge_base_search`` first, ``generate_response`` last).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import pytest_asyncio

from agenttools.core.untrusted import TRUST
from agenttools.mcp.catalog import assign_names
from agenttools.mcp.client import McpConnection
from agenttools.mcp.config import load_servers
from app.config import ConfigError, Settings
from llm.ollama import OllamaProvider
from tests.conftest import collect_sse, running_app
from tests.fakes import FakeOllama, ToolCall, running_fake
from tests.fakes.mcp_catalog import generate_tools, labelled_queries
from tests.fakes.mcp_server import DeskState, build_server
from tests.support.sse import SSEEvent
from tests.test_metrics import get_metrics, value

pytestmark = pytest.mark.asyncio(loop_scope="module")

ROOT = Path(__file__).resolve().parent.parent
DOCS = [{"id": "doc-orders", "title": "Orders and operations",
         "text": "Order numbers look like ORD-1234. Operations tools live on the ops and desk servers."}]

CONFIG = """
[servers.ops]
command = {python}
args = ["-m", "tests.fakes.mcp_server", "ops"]
cwd = {root}
protocol = "legacy"
connect_timeout_s = 60

[servers.desk]
url = "${{DESK_URL}}/mcp"
headers = {{ X-Desk-Token = "${{DESK_TOKEN}}" }}

[servers.broken]
command = "/nonexistent/mcp-server"
contexts = ["knowledge"]
"""


@dataclass(slots=True)
class World:
    base: str
    app: Any
    fake: FakeOllama
    desk: DeskState
    desk_headers: list[dict[str, str]] = field(default_factory=list)

    @property
    def registry(self) -> Any:
        return self.app.state.services.agent.registry

    async def readyz(self) -> dict[str, Any]:
        async with httpx.AsyncClient(timeout=10) as client:
            return (await client.get(f"{self.base}/readyz")).json()  # type: ignore[no-any-return]

    async def until(self, what: str, check: Callable[[dict[str, Any]], bool], timeout_s: float = 60) -> dict[str, Any]:
        """Poll ``/readyz`` until ``check`` holds (a behaviour, not a time, is asserted)."""
        body: dict[str, Any] = {}
        async with asyncio.timeout(timeout_s):
            while True:
                body = await self.readyz()
                if check(body):
                    return body
                await asyncio.sleep(0.05)
        raise AssertionError(f"never: {what}: {body}")

    async def servers_up(self) -> dict[str, Any]:
        def up(body: dict[str, Any]) -> bool:
            servers = body["checks"]["mcp"]["servers"]
            return (servers["ops"]["state"] == "up" and servers["desk"]["state"] == "up"
                    and body["checks"]["tool_index"]["status"] == "ready"
                    and all(name in self.registry for name in ("word_stats", "lookup_order")))
        return await self.until("ops and desk up", up)

    async def ask(self, message: str, steps: list[Callable[[dict[str, Any]], list[Any]]]) -> list[SSEEvent]:
        for step in steps:
            self.fake.add_turn(step)
        async with httpx.AsyncClient(timeout=60) as client:
            return await collect_sse(client, "POST", f"{self.base}/v1/agent/chat",
                                     json={"message": message, "context_type": "knowledge"})

    def sent(self) -> list[dict[str, Any]]:
        return [r for r in self.fake.chat_requests if r.get("messages")]


def tool_results(body: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [orjson.loads(m["content"].removeprefix("ERROR: ")) for m in body["messages"]
            if m["role"] == "tool" and m.get("tool_name") == name]


def kb_search(body: dict[str, Any]) -> list[Any]:
    return [ToolCall("knowledge_base_search", {"query": "order numbers operations"})]


def call(name: str, args: dict[str, Any]) -> Callable[[dict[str, Any]], list[Any]]:
    return lambda body: [ToolCall(name, args)]


def answer(text: str | Callable[[dict[str, Any]], str]) -> Callable[[dict[str, Any]], list[Any]]:
    def step(body: dict[str, Any]) -> list[Any]:
        sources = [c["source_id"] for r in tool_results(body, "knowledge_base_search") for c in r.get("chunks", [])]
        return [ToolCall("generate_response", {
            "answer": text(body) if callable(text) else text, "sources": sources[:1], "confidence_score": 0.8,
            "used_internal_kb": True, "used_external_kb": False})]
    return step


def results(events: list[SSEEvent]) -> list[dict[str, Any]]:
    return [e.json() for e in events if e.event == "tool_call_result"]


def selection(events: list[SSEEvent]) -> dict[str, Any]:
    return next(e.json() for e in events if e.event == "tool_selection")  # type: ignore[no-any-return]


def assert_one_completion(events: list[SSEEvent]) -> None:
    assert [e.event for e in events].count("message_complete") == 1
    assert events[-1].event == "message_complete" and events[-1].json()["status"] == "completed"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    tmp = tmp_path_factory.mktemp("mcp")
    desk_server, desk = build_server("desk")
    desk_app = desk_server.streamable_http_app()
    headers_seen: list[dict[str, str]] = []

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers_seen.append({k.decode(): v.decode() for k, v in scope["headers"]})
        await desk_app(scope, receive, send)

    fake = FakeOllama([])
    config = tmp / "mcp-servers.toml"
    config.write_text(CONFIG.format(python=orjson.dumps(sys.executable).decode(),
                                    root=orjson.dumps(str(ROOT)).decode()))
    async with running_fake(recording) as desk_url, running_fake(fake.app) as ollama_url:
        settings = Settings.from_env({
            "AGENT_DB_PATH": str(tmp / "agent.db"),
            "AGENT_INGEST_SAMPLE_KB": "false",
            "AGENT_ADMIN_OPEN": "true",
            "AGENT_EMBEDDER": "hashing",
            "AGENT_CACHE_DIR": str(tmp / "cache"),
            "AGENT_TOOL_TIMEOUT_S": "3",
            "AGENT_MAX_TOOL_CALLS": "20",
            "AGENT_MCP_SERVERS": str(config),
            "DESK_URL": desk_url,
            "DESK_TOKEN": "desk-secret-1",
        })
        async with running_app(settings, provider=OllamaProvider(ollama_url, "llama3.2", timeout=30)) as (base, app):
            async with httpx.AsyncClient(timeout=30) as client:
                r = await client.post(f"{base}/v1/kb/documents", json={"documents": DOCS})
                assert r.status_code == 200, r.text
            w = World(base, app, fake, desk, headers_seen)
            await w.servers_up()
            yield w


async def test_an_mcp_tool_is_selected_called_and_its_result_reaches_the_model(world: World) -> None:
    await world.servers_up()
    before = len(world.sent())

    def reply(body: dict[str, Any]) -> str:
        order = tool_results(body, "lookup_order")[0]
        return f"Order ORD-1234 is {order['data']['status']}, total {order['data']['total_eur']} EUR."

    events = await world.ask(
        "What is the status of customer order ORD-1234? Look up the order by its order number.",
        [kb_search, call("lookup_order", {"order_id": "ORD-1234"}), answer(reply)],
    )
    assert_one_completion(events)
    sel = selection(events)
    assert sel["fallback"] is None
    assert "lookup_order" in [r["name"] for r in sel["rag"]] and "lookup_order" in sel["tools"]
    assert [(r["name"], r["is_error"]) for r in results(events)] == [
        ("knowledge_base_search", False), ("lookup_order", False), ("generate_response", False)]
    sent = world.sent()[before:]
    offered = {t["function"]["name"]: t["function"] for t in sent[1]["tools"]}
    assert offered["lookup_order"]["parameters"]["properties"]["order_id"]["pattern"] == r"^ORD-\d{4}$"
    seen = tool_results(sent[2], "lookup_order")[0]  # what the model was sent back
    assert seen["data"] == {"order_id": "ORD-1234", "status": "packing", "items": 3, "total_eur": 1542.5}
    assert seen["quoted_from"] == "mcp:desk/lookup_order" and seen["trust"]
    response = next(e.json() for e in events if e.event == "response")
    assert response["answer"] == "Order ORD-1234 is packing, total 1542.5 EUR."
    assert ("lookup_order", {"order_id": "ORD-1234"}) in world.desk.calls
    assert any(h.get("x-desk-token") == "desk-secret-1" for h in world.desk_headers)
    db = world.app.state.services.storage.db
    await db.flush()
    rows = await db.fetchall("SELECT status FROM tool_calls WHERE tool_name = 'lookup_order'")
    assert ("success",) in rows
    async with httpx.AsyncClient() as client:
        metrics = (await client.get(f"{world.base}/metrics")).text
    assert 'tool="lookup_order"' in metrics


async def test_invalid_arguments_are_rejected_before_the_server_is_called(world: World) -> None:
    await world.servers_up()
    calls_before = list(world.desk.calls)
    before = len(world.sent())
    events = await world.ask(
        "Look up customer order ORD-77 by its order number and list the items of the order.",
        [
            kb_search,
            call("lookup_order", {"order_id": "ORD-77; DROP TABLE orders"}),  # pattern: the shared validator
            call("lookup_order", {"order_id": "ORD-0077", "include_items": "maybe"}),  # anyOf: the full schema
            answer("I could not look that order up."),
        ],
    )
    assert_one_completion(events)
    assert [(r["name"], r["is_error"]) for r in results(events)] == [
        ("knowledge_base_search", False), ("lookup_order", True), ("lookup_order", True), ("generate_response", False)]
    sent = world.sent()[before:]
    first, second = tool_results(sent[2], "lookup_order"), tool_results(sent[3], "lookup_order")
    assert first[0]["error"] == "invalid_parameters" and "order_id" in first[0]["reason"]
    assert second[-1]["error"] == "invalid_parameters" and "include_items" in second[-1]["reason"]
    assert world.desk.calls == calls_before  # neither call reached the server
    db = world.app.state.services.storage.db
    await db.flush()
    rows = await db.fetchall("SELECT status FROM tool_calls WHERE tool_name = 'lookup_order' ORDER BY id")
    assert rows[-2:] == [("rejected",), ("rejected",)]


@pytest.mark.slow  # waits out a real tool-call timeout and a dead server (~6 s)
async def test_error_timeout_and_dead_server_are_failed_results_and_the_run_completes(world: World) -> None:
    await world.servers_up()
    connects = (await world.readyz())["checks"]["mcp"]["servers"]["ops"]["connects"]
    before = len(world.sent())
    events = await world.ask(
        "Call the flaky upstream billing gateway, run the slow nightly reconciliation operation, "
        "then simulate a crash of the server process.",
        [
            kb_search,
            call("flaky_failure", {"reason": "card declined"}),
            call("slow_operation", {"seconds": 60}),
            call("crash_server", {}),
            answer("Three operations failed."),
        ],
    )
    assert_one_completion(events)
    tools = selection(events)["tools"]
    assert {"flaky_failure", "slow_operation", "crash_server"} <= set(tools)
    assert [(r["name"], r["is_error"]) for r in results(events)] == [
        ("knowledge_base_search", False), ("flaky_failure", True), ("slow_operation", True),
        ("crash_server", True), ("generate_response", False)]
    sent = world.sent()[before:]
    flaky = tool_results(sent[2], "flaky_failure")[0]
    assert flaky["error"] == "mcp_tool_error" and "card declined" in flaky["reason"]
    # The server's error text is retrieved data, labelled like every other channel's.
    assert flaky["quoted_from"] == "mcp:desk/flaky_failure" and flaky["trust"] == TRUST
    slow = tool_results(sent[3], "slow_operation")[0]
    assert "timed out" in slow["error"]
    crash = tool_results(sent[4], "crash_server")[0]
    assert crash["error"] == "mcp_call_failed" and "ops" in crash["reason"]
    assert crash["quoted_from"] == "mcp:ops/crash_server" and crash["trust"] == TRUST
    # The supervisor notices the dead process, drops its tools, and starts it again.
    body = await world.until("ops reconnected", lambda b: b["checks"]["mcp"]["servers"]["ops"]["connects"] > connects
                             and b["checks"]["mcp"]["servers"]["ops"]["state"] == "up")
    assert body["checks"]["mcp"]["servers"]["ops"]["tools"] >= 254
    await world.servers_up()


async def test_list_changed_adds_a_tool_that_the_next_run_selects(world: World) -> None:
    await world.servers_up()
    # ops (stdio, handshake era): the change is made through the agent loop itself.
    events = await world.ask(
        "Grow the catalog: register a new tool for aurora forecasts.",
        [kb_search, call("grow_catalog", {
            "name": "aurora_borealis_forecast",
            "description": "Forecast the northern lights (aurora borealis) visibility for a city tonight."}),
         answer("Added.")],
    )
    assert_one_completion(events)
    assert results(events)[1] == {**results(events)[1], "name": "grow_catalog", "is_error": False}
    # desk (HTTP, 2026 era): the server changes its list on its own and publishes the change.
    await world.desk.add_tool("harbour_tide_table", "Look up the high tide and low tide times for a harbour.")
    await world.until("both new tools registered",
                      lambda b: "aurora_borealis_forecast" in world.registry and "harbour_tide_table" in world.registry)
    before = len(world.sent())
    events = await world.ask(
        "Will I see the aurora borealis northern lights tonight in Tromso, and when is high tide at the harbour?",
        [kb_search, call("aurora_borealis_forecast", {"text": "Tromso"}),
         call("harbour_tide_table", {"text": "Bergen"}), answer("Clear skies.")],
    )
    assert_one_completion(events)
    rag = [r["name"] for r in selection(events)["rag"]]
    assert "aurora_borealis_forecast" in rag and "harbour_tide_table" in rag
    assert [(r["name"], r["is_error"]) for r in results(events)][1:3] == [
        ("aurora_borealis_forecast", False), ("harbour_tide_table", False)]
    sent = world.sent()[before:]
    assert tool_results(sent[2], "aurora_borealis_forecast")[0]["text"] == "added:Tromso"
    assert tool_results(sent[3], "harbour_tide_table")[0]["text"] == "added:Bergen"


async def test_clashes_are_prefixed_a_broken_server_is_reported_and_recall_is_measured(world: World) -> None:
    body = await world.servers_up()
    assert body["ready"] is True  # a server that cannot start does not hold the service back
    broken = body["checks"]["mcp"]["servers"]["broken"]
    assert broken["state"] == "down" and broken["tools"] == 0 and "nonexistent" in broken["last_error"]
    assert "desk-secret-1" not in orjson.dumps(body).decode()
    # The down server is on /metrics too, for an alert (it was only in /readyz).
    async with httpx.AsyncClient(timeout=10) as client:
        metrics = await get_metrics(client, world.base)
    assert value(metrics, "agentchat_mcp_servers", "agentchat_mcp_servers", state="down") == 1
    assert value(metrics, "agentchat_mcp_servers", "agentchat_mcp_servers", state="up") == 2
    # A state no server is in reads 0, not "no data": an alert on it can resolve.
    assert value(metrics, "agentchat_mcp_servers", "agentchat_mcp_servers", state="closed") == 0
    assert value(metrics, "agentchat_mcp_servers_unranked", "agentchat_mcp_servers_unranked") == 0
    registry = world.registry
    # A clash between servers prefixes both; a clash with a built-in prefixes the MCP tool.
    assert "echo" not in registry and {"ops__echo", "desk__echo"} <= set(registry.names())
    assert "desk__knowledge_base_search" in registry
    assert "mcp" not in registry.spec("knowledge_base_search").groups
    assert registry.spec("desk__echo").groups == frozenset({"mcp", "workflow", "tables", "knowledge"})

    # Tool recall on the generated catalog: one labelled request per generated tool, through
    # the app's own selector (context filter, hashing-embedding top 6, core merge).
    selector = world.app.state.services.agent.selector
    queries = labelled_queries(generate_tools())
    assert len(queries) == 500 and all(q["needed"] in registry for q in queries)
    hits: dict[str, list[int]] = {}
    for q in queries:
        sel = await selector.select("knowledge", None, q["message"])
        assert sel.fallback is None
        hits.setdefault(q["family"], []).append(q["needed"] in sel.tools)
    recall = sum(sum(v) for v in hits.values()) / len(queries)
    by_family = {k: round(sum(v) / len(v), 2) for k, v in hits.items()}
    print(f"\nMCP tool recall with core merge (hashing embedder, {len(registry)} tools): {recall:.3f} {by_family}")
    assert recall >= 0.8, by_family


# --- the servers file and the naming rule (no servers needed) ------------------------------


async def test_servers_file_toml_and_json_with_variables(tmp_path: Path) -> None:
    toml = tmp_path / "servers.toml"
    toml.write_text(
        '[servers.files]\ncommand = "npx"\nargs = ["-y", "server-filesystem", "${ROOT_DIR}"]\n'
        'contexts = ["knowledge"]\n\n'
        '[servers.tickets]\nurl = "https://mcp.example.com/mcp"\n'
        'headers = { Authorization = "Bearer ${TICKETS_TOKEN}" }\n'
    )
    servers = load_servers(toml, {"ROOT_DIR": "/srv/docs", "TICKETS_TOKEN": "t0ps3cret"})
    files, tickets = servers
    assert (files.transport, files.args, files.contexts) == ("stdio", ("-y", "server-filesystem", "/srv/docs"),
                                                            ("knowledge",))
    assert tickets.transport == "http" and tickets.headers == {"Authorization": "Bearer t0ps3cret"}
    assert tickets.contexts == ("workflow", "tables", "knowledge")
    assert "t0ps3cret" not in repr(servers)
    # The format Claude Desktop and Cursor use is read as it is.
    json_file = tmp_path / "servers.json"
    json_file.write_text(orjson.dumps({"mcpServers": {"git": {"command": "uvx", "args": ["mcp-server-git"]},
                                                      "remote": {"type": "streamable-http", "url": "http://h/mcp"}}})
                         .decode())
    assert [(s.name, s.transport) for s in load_servers(json_file, {})] == [("git", "stdio"), ("remote", "http")]


async def test_every_problem_of_a_bad_servers_file_is_reported_at_start_up(tmp_path: Path) -> None:
    bad = tmp_path / "servers.toml"
    bad.write_text(
        '[servers.a]\nurl = "ftp://x"\n\n[servers.b]\ntransport = "sse"\nurl = "http://x"\n\n'
        '[servers.c]\ncommand = "x"\ncontexts = ["nowhere"]\nheaders = { A = "${UNSET_VAR}" }\n'
    )
    with pytest.raises(ConfigError) as info:
        Settings.from_env({"AGENT_MCP_SERVERS": str(bad), "AGENT_DB_PATH": str(tmp_path / "a.db")})
    message = str(info.value)
    for expected in ("'a': an HTTP server needs an http(s) url", "'b': transport must be stdio or http",
                     "'c': contexts must be", "${UNSET_VAR} is not set"):
        assert expected in message
    good = tmp_path / "good.toml"
    good.write_text('[servers.t]\nurl = "https://u:pw@mcp.example.com/mcp"\nheaders = { K = "hidden-value" }\n')
    settings = Settings.from_env({"AGENT_MCP_SERVERS": str(good)})
    assert settings.redacted()["mcp_servers"] == ["t: https://mcp.example.com/mcp"]


async def test_names_are_assigned_deterministically() -> None:
    builtin = {"knowledge_base_search", "discover"}
    pairs = [("desk", "echo"), ("ops", "echo"), ("desk", "knowledge_base_search"), ("ops", "word.stats"),
             ("ops", "lookup")]
    names = assign_names(builtin, pairs)
    assert names == assign_names(builtin, list(reversed(pairs)))  # order never matters
    assert names[("desk", "echo")] == "desk__echo" and names[("ops", "echo")] == "ops__echo"
    assert names[("desk", "knowledge_base_search")] == "desk__knowledge_base_search"
    assert names[("ops", "word.stats")] == "word_stats" and names[("ops", "lookup")] == "lookup"
    long = assign_names(set(), [("s", "x" * 100)])[("s", "x" * 100)]
    assert len(long) <= 64


async def test_a_stdio_server_has_a_minute_to_start_and_an_http_one_ten_seconds(tmp_path: Path) -> None:
    """An ``npx -y`` server downloads its package at its first start (19-22 s on a fresh
    machine), and an ``npx`` ended mid-install leaves npm's cache broken for every later
    start: the README's first start did that with the old 10 s for every server. A value
    given is kept."""
    toml = tmp_path / "servers.toml"
    toml.write_text(
        '[servers.files]\ncommand = "npx"\nargs = ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]\n'
        '[servers.remote]\nurl = "http://127.0.0.1:9/mcp"\n'
        '[servers.quick]\ncommand = "npx"\nconnect_timeout_s = 5\n'
    )
    timeouts = {s.name: s.connect_timeout_s for s in load_servers(toml, {})}
    assert timeouts == {"files": 60.0, "remote": 10.0, "quick": 5.0}


async def test_a_start_over_its_time_says_which_timeout_it_was(tmp_path: Path) -> None:
    """``/readyz``'s ``last_error`` for a server that did not answer in time named no
    setting ("TimeoutError: timed out"): now it names ``connect_timeout_s`` and its value,
    the one thing to change."""
    toml = tmp_path / "servers.toml"
    silent = f'[servers.mute]\ncommand = "{sys.executable}"\nargs = ["-c", "import time; time.sleep(60)"]\n'
    toml.write_text(silent + "connect_timeout_s = 0.5\n")
    [config] = load_servers(toml, {})

    async def on_tools(server: str, tools: Any) -> None:
        return None

    conn = McpConnection(config, on_tools)
    conn.start()
    try:
        await asyncio.wait_for(conn.first_attempt.wait(), 30)
    finally:
        await conn.close()
    assert conn.last_error == "TimeoutError: not connected within connect_timeout_s (0.5 s)", conn.last_error
