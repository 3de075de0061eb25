"""The reference MCP servers from npm, as a user configures them, with the default policy.

The app, configured by an ``AGENT_MCP_SERVERS`` file as the README shows, talks to

* ``everything`` — ``@modelcontextprotocol/server-everything`` over stdio (started through
  ``sh`` so the test knows the server's pid and can kill it);
* ``web`` — the same server over streamable HTTP on a loopback port: every one of its
  tools clashes with ``everything``'s, so both are prefixed;
* ``files`` — ``@modelcontextprotocol/server-filesystem`` through ``npx``, serving a
  temporary directory.

The packages come from ``tests/js/package-lock.json`` (``npm ci`` on first use). The model
is the Ollama loopback fake, scripted per test; the mandatory flow is the default one.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import pytest_asyncio

from app.config import Settings
from llm.ollama import OllamaProvider
from tests.conftest import collect_sse, running_app
from tests.fakes import FakeOllama, ToolCall, running_fake
from tests.support.node import npm_ci
from tests.support.procs import ManagedProcess, child_env
from tests.support.server import free_port
from tests.support.sse import SSEEvent

pytestmark = pytest.mark.asyncio(loop_scope="module")

ROOT = Path(__file__).resolve().parent.parent
JS = ROOT / "tests" / "js"
EVERYTHING = JS / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
DOCS = [{"id": "doc-tools", "title": "Tools", "text": "The desk can add numbers and read the shared notes."}]

CONFIG = """
[servers.everything]
command = "sh"
args = ["-c", {script}]

[servers.web]
url = "http://127.0.0.1:{port}/mcp"

[servers.files]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-filesystem", {shared}]
cwd = {js}
connect_timeout_s = 60
"""


@dataclass(slots=True)
class World:
    base: str
    app: Any
    fake: FakeOllama
    pidfile: Path
    shared: Path

    @property
    def registry(self) -> Any:
        return self.app.state.services.agent.registry

    async def readyz(self) -> dict[str, Any]:
        async with httpx.AsyncClient(timeout=10) as client:
            return (await client.get(f"{self.base}/readyz")).json()  # type: ignore[no-any-return]

    async def until(self, what: str, check: Callable[[dict[str, Any]], bool], timeout_s: float = 90) -> dict[str, Any]:
        body: dict[str, Any] = {}
        try:
            async with asyncio.timeout(timeout_s):
                while not check(body := await self.readyz()):
                    await asyncio.sleep(0.05)
        except TimeoutError:
            raise AssertionError(f"never: {what}: {body.get('checks', {}).get('mcp')}") from None
        return body

    async def all_up(self) -> dict[str, Any]:
        def up(body: dict[str, Any]) -> bool:
            servers = body["checks"]["mcp"]["servers"]
            ready = body["checks"]["tool_index"]["status"] == "ready"
            return ready and all(s["state"] == "up" for s in servers.values())
        return await self.until("every server up", up)

    async def ask(self, message: str, steps: list[Callable[[dict[str, Any]], list[Any]]]) -> list[SSEEvent]:
        for step in steps:
            self.fake.add_turn(step)
        async with httpx.AsyncClient(timeout=120) as client:
            return await collect_sse(client, "POST", f"{self.base}/v1/agent/chat",
                                     json={"message": message, "context_type": "knowledge"})


def tool_results(body: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [orjson.loads(m["content"].removeprefix("ERROR: ")) for m in body["messages"]
            if m["role"] == "tool" and m.get("tool_name") == name]


def kb_search(body: dict[str, Any]) -> list[Any]:
    return [ToolCall("knowledge_base_search", {"query": "desk numbers notes"})]


def call(name: str, args: dict[str, Any]) -> Callable[[dict[str, Any]], list[Any]]:
    return lambda body: [ToolCall(name, args)]


def answer(body: dict[str, Any]) -> list[Any]:
    sources = [c["source_id"] for r in tool_results(body, "knowledge_base_search") for c in r.get("chunks", [])]
    return [ToolCall("generate_response", {"answer": "Done.", "sources": sources[:1], "confidence_score": 0.8,
                                           "used_internal_kb": True, "used_external_kb": False})]


def results(events: list[SSEEvent]) -> dict[str, dict[str, Any]]:
    return {e.json()["name"]: e.json() for e in events if e.event == "tool_call_result"}


def completed(events: list[SSEEvent]) -> bool:
    return [e.event for e in events].count("message_complete") == 1 and events[-1].json()["status"] == "completed"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    npm_ci(JS)
    tmp = tmp_path_factory.mktemp("mcp-real")
    shared = tmp / "shared"
    shared.mkdir()
    (shared / "notes.txt").write_text("Quarterly stock count: 42 pallets in bay 7.\n")
    pidfile = tmp / "everything.pid"
    port = free_port()
    web = ManagedProcess("server-everything-http", ["node", str(EVERYTHING), "streamableHttp"],
                         child_env({"PORT": str(port)}), tmp / "web.log")
    web.start()
    config = tmp / "mcp-servers.toml"
    script = f"echo $$ > '{pidfile}'; exec node '{EVERYTHING}' stdio"
    dump = lambda v: orjson.dumps(v).decode()  # noqa: E731 - TOML basic strings are JSON strings
    config.write_text(CONFIG.format(script=dump(script), port=port, shared=dump(str(shared)), js=dump(str(JS))))
    fake = FakeOllama([])
    try:
        async with asyncio.timeout(60):  # the HTTP server listens before the app needs it
            while "listening" not in web.text():
                assert web.running, web.tail()
                await asyncio.sleep(0.05)
        async with running_fake(fake.app) as ollama_url:
            settings = Settings.from_env({
                "AGENT_DB_PATH": str(tmp / "agent.db"),
                "AGENT_INGEST_SAMPLE_KB": "false",
                "AGENT_ADMIN_OPEN": "true",
                "AGENT_MCP_SERVERS": str(config),
            })
            provider = OllamaProvider(ollama_url, "llama3.2", timeout=60)
            async with running_app(settings, provider=provider) as (base, app):
                async with httpx.AsyncClient(timeout=30) as client:
                    r = await client.post(f"{base}/v1/kb/documents", json={"documents": DOCS})
                    assert r.status_code == 200, r.text
                w = World(base, app, fake, pidfile, shared)
                await w.all_up()
                yield w
    finally:
        web.close()


async def test_tools_appear_with_stable_names_and_results_are_summarised_in_the_stream(world: World) -> None:
    body = await world.all_up()
    registry = world.registry
    # Every tool of the two server-everything instances clashes: both are prefixed.
    assert {"everything__get-sum", "web__get-sum", "everything__trigger-long-running-operation",
            "web__trigger-long-running-operation"} <= set(registry.names())
    assert "get-sum" not in registry and "echo" not in registry
    assert {"read_text_file", "list_directory"} <= set(registry.names())  # no clash: own names
    assert body["checks"]["mcp"]["servers"]["files"]["tools"] >= 10

    notes = str(world.shared / "notes.txt")
    events = await world.ask(
        "What does the shared notes text file say about the stock count?",
        [kb_search, call("read_text_file", {"path": notes}), answer],
    )
    assert completed(events), [e.json() for e in events if e.event == "error"]
    done = results(events)
    assert not done["read_text_file"]["is_error"], done["read_text_file"]
    summary = done["read_text_file"]["summary"]
    assert summary.startswith("\u201c") and summary.endswith("\u201d") and len(summary) <= 200
    assert "42 pallets in bay 7" in summary
    # Every tool, not only MCP: the search in words, not its keys.
    assert re.match(r"(\d+ passages? from \d+ documents?|no passages found)", done["knowledge_base_search"]["summary"])


async def test_find_tools_reaches_a_tool_selection_left_out(world: World) -> None:
    await world.all_up()
    before = len(world.fake.chat_requests)
    wanted = "web__get-tiny-image"
    events = await world.ask(
        "Hello there, good morning.",
        [kb_search, call("find_tools", {"query": "tiny image picture"}), call(wanted, {}), answer],
    )
    assert completed(events), [e.json() for e in events if e.event == "error"]
    selection = next(e.json() for e in events if e.event == "tool_selection")
    assert "find_tools" in selection["core"] and wanted not in selection["tools"]
    found = tool_results(world.fake.chat_requests[before + 2], "find_tools")[0]
    assert wanted in [t["name"] for t in found["tools"]] and all(t["description"] for t in found["tools"])
    offered = [[t["function"]["name"] for t in r["tools"]] for r in world.fake.chat_requests[before:]]
    assert wanted not in offered[1] and wanted in offered[2]  # offered from the turn after the search
    assert not results(events)[wanted]["is_error"]


async def test_a_killed_stdio_server_is_down_at_once_and_the_other_names_stay(world: World) -> None:
    await world.all_up()
    pid = int(world.pidfile.read_text())
    os.kill(pid, signal.SIGKILL)
    # Noticed from the process's end, long before the 30 s probe would find it.
    body = await world.until("everything down", lambda b: b["checks"]["mcp"]["servers"]["everything"]["state"]
                             != "up", timeout_s=10)
    assert "exited" in body["checks"]["mcp"]["servers"]["everything"]["last_error"]
    registry = world.registry
    assert "everything__get-sum" not in registry
    assert "web__get-sum" in registry and "get-sum" not in registry  # not renamed to the bare name
    events = await world.ask("What is 4 plus 5?", [
        kb_search, call("find_tools", {"query": "sum of two numbers"}), call("web__get-sum", {"a": 4, "b": 5}), answer])
    assert completed(events)
    done = results(events)
    assert not done["web__get-sum"]["is_error"], done["web__get-sum"]
    assert "9" in done["web__get-sum"]["summary"]
    # The supervisor starts the server again; its tools come back under the same names.
    await world.until("everything up again", lambda b: b["checks"]["mcp"]["servers"]["everything"]["state"] == "up")
    assert "everything__get-sum" in world.registry
