"""``/readyz`` says how long to wait for an MCP server that is still connecting.

A server waiting to retry showed ``retry_in_s``, but one in the middle of a connection
attempt showed only ``"state": "connecting"``, while ``/readyz`` answered ``ok: false``
for it: a person or a probe watching readiness could not tell whether to wait a second
or a minute (a stdio server has 60 s by default). Now a connecting server shows its
``connect_timeout_s`` and ``timeout_in_s``, the most this attempt can still take, and
the detail says it. A real app on loopback, real stdio processes (one silent, one that
exits at once)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app.config import Settings
from llm.extractive import ExtractiveProvider
from tests.conftest import running_app

pytestmark = pytest.mark.slow  # stdio processes and an app

SILENT_TIMEOUT_S = 60


def servers_file(tmp_path: Path) -> Path:
    python = orjson.dumps(sys.executable).decode()
    config = tmp_path / "mcp.toml"
    config.write_text(
        f'[servers.silent]\ncommand = {python}\nargs = ["-c", "import time; time.sleep(600)"]\n'
        f"connect_timeout_s = {SILENT_TIMEOUT_S}\n"
        f'[servers.exits]\ncommand = {python}\nargs = ["-c", "raise SystemExit(1)"]\n'
    )
    return config


async def test_a_connecting_server_says_when_its_attempt_times_out(tmp_path: Path) -> None:
    settings = Settings.from_env({
        "AGENT_DB_PATH": str(tmp_path / "a.db"),
        "AGENT_INGEST_SAMPLE_KB": "false",
        "AGENT_LLM_PROVIDER": "extractive",
        "AGENT_MCP_SERVERS": str(servers_file(tmp_path)),
        "OLLAMA_HOST": "http://127.0.0.1:9",
    })
    async with (
        running_app(settings, provider=ExtractiveProvider()) as (base, _),
        httpx.AsyncClient(timeout=30) as client,
    ):
        mcp: dict[str, Any] = {}
        async with asyncio.timeout(50):  # the silent server's attempt lasts 60 s: seen before it ends
            while True:
                mcp = (await client.get(f"{base}/readyz")).json()["checks"]["mcp"]
                if mcp["servers"]["exits"]["state"] == "down":
                    break
                await asyncio.sleep(0.05)
    silent, exits = mcp["servers"]["silent"], mcp["servers"]["exits"]
    assert silent["state"] == "connecting", mcp
    assert silent["connect_timeout_s"] == SILENT_TIMEOUT_S, silent
    assert 0 < silent["timeout_in_s"] <= SILENT_TIMEOUT_S, silent
    # Only the attempt under way has a timeout; a server waiting to retry says when it retries.
    assert "timeout_in_s" not in exits and exits["retry_in_s"] >= 0, exits
    assert mcp["ok"] is False
    assert mcp["detail"] == f"connecting to MCP servers: silent (times out in {silent['timeout_in_s']:.0f} s)", mcp


async def test_a_server_whose_tools_are_being_embedded_has_no_timeout_left(tmp_path: Path) -> None:
    """Past its handshake and first tool list, a server stays "connecting" while its
    tools go into the catalog (embedded: with Ollama, a cold model takes seconds), but
    ``connect_timeout_s`` no longer applies: it ends "up" however long that takes. Before,
    ``timeout_in_s`` kept counting down to 0 there ("times out in 0 s") for an attempt
    that could not time out any more. A real stdio server; the catalog's side held."""
    from agenttools.mcp.client import McpConnection
    from agenttools.mcp.config import load_servers

    python = orjson.dumps(sys.executable).decode()
    toml = tmp_path / "servers.toml"
    toml.write_text(f'[servers.lean]\ncommand = {python}\nargs = ["-m", "tests.fakes.mcp_server", "lean"]\n'
                    f"cwd = {orjson.dumps(str(Path.cwd())).decode()}\nconnect_timeout_s = {SILENT_TIMEOUT_S}\n")
    [config] = load_servers(toml, {})
    reached, embedded = asyncio.Event(), asyncio.Event()

    async def on_tools(server: str, tools: Any) -> None:
        if tools:
            reached.set()
            await embedded.wait()

    conn = McpConnection(config, on_tools)
    conn.start()
    try:
        await asyncio.wait_for(reached.wait(), 50)
        status = conn.status()
        assert status["state"] == "connecting", status
        assert "timeout_in_s" not in status and "connect_timeout_s" not in status, status
        embedded.set()
        await asyncio.wait_for(conn.first_attempt.wait(), 30)
        assert conn.state == "up", conn.status()
    finally:
        embedded.set()
        await conn.close()
