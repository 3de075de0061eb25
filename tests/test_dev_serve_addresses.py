"""``make dev`` (``agentchat serve --reload``) shows one address, the agent's. Walking the
README as a newcomer: the reference backend it starts beside the agent logged at INFO
there (at WARNING without ``--reload``), so the first address on the terminal was the
backend's ``Uvicorn running on http://127.0.0.1:8001 (Press CTRL+C to quit)``, ahead of
``agentchat: starting on http://127.0.0.1:8000`` - the one to open was the second."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from app.cli.serving import PROJECT_ROOT
from tests.support.deadline import reap, until, within
from tests.support.procs import child_env
from tests.support.server import free_port


@pytest.mark.slow  # a real `agentchat serve --reload` with its reference backend
async def test_with_reload_the_only_address_shown_is_the_agents(tmp_path: Path) -> None:
    port, backend_port = free_port(), free_port()
    env = child_env({
        "AGENT_DB_PATH": str(tmp_path / "agent.sqlite3"),
        "AGENT_INGEST_SAMPLE_KB": "false",
        "AGENT_EMBEDDER": "none",
        "AGENT_LLM_PROVIDER": "extractive",
        "AGENT_LOG_FORMAT": "text",
        "OLLAMA_HOST": "http://127.0.0.1:9",
    })  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
        "--backend-port", str(backend_port), "--reload",
        env=env, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    lines: list[str] = []

    async def pump() -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            lines.append(raw.decode(errors="replace"))

    reader = asyncio.create_task(pump())
    try:
        await until(lambda: "agentchat: serving on" in "".join(lines) or reader.done(),
                    "agentchat serve --reload serving", timeout=90)  # fmt: skip
        async with httpx.AsyncClient(timeout=5) as client:  # the backend runs, and is used
            assert (await client.get(f"http://127.0.0.1:{backend_port}/healthz")).status_code == 200
            ready = (await client.get(f"http://127.0.0.1:{port}/readyz")).json()
        assert ready["checks"]["backend"]["url"] == f"http://127.0.0.1:{backend_port}", ready
    finally:
        await reap(proc, "agentchat serve --reload", grace=30)
        await within(reader, "the end of agentchat serve's output", 10)
    log = "".join(lines)
    assert f"agentchat: serving on http://127.0.0.1:{port}" in log, log
    assert f"127.0.0.1:{backend_port} (Press CTRL+C" not in log, log  # the backend's own address line
    assert "GET /healthz HTTP/1.1" not in log, log  # nor its access lines
