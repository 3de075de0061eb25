"""Review check: a `serve --workers 2` on a file a lone serve holds waits in its
supervisor (no worker spawned), SIGTERM stops it at once; after the lone serve is
SIGKILLed a waiting group takes over with both workers."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import httpx

from tests.support.procs import PYTHON, AgentServer, ManagedProcess, child_env, until
from tests.support.server import free_port


async def _ready_status(http: httpx.AsyncClient, port: int) -> tuple[int, dict | None]:
    try:
        r = await http.get(f"http://127.0.0.1:{port}/readyz", timeout=5)
    except httpx.HTTPError:
        return 0, None
    return r.status_code, r.json()


async def test_group_waits_then_sigterm_and_takeover(tmp_path: Path) -> None:
    db = tmp_path / "agent.sqlite3"
    env = {"AGENT_LLM_PROVIDER": "extractive", "AGENT_EMBEDDER": "none", "AGENT_INGEST_SAMPLE_KB": "false",
           "AGENT_AUTH": "none", "AGENT_DB_PATH": str(db)}
    lone = AgentServer(tmp_path, env, name="lone")
    groups = []
    try:
        lone.start()
        await lone.wait_ready()
        async with httpx.AsyncClient() as http:
            for attempt in ("sigterm", "takeover"):
                port = free_port()
                argv = [PYTHON, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
                        "--no-backend", "--workers", "2"]
                g = ManagedProcess(f"group-{attempt}", argv, child_env(env), tmp_path / f"group-{attempt}.log")
                groups.append(g)
                g.start()
                for _ in range(600):
                    status, body = await _ready_status(http, port)
                    if status == 503 and body and "writer" in body.get("checks", {}):
                        break
                    assert g.running, g.tail()
                    await asyncio.sleep(0.1)
                assert status == 503, (status, body, g.tail())
                assert not g.grep("serving on"), g.tail()
                if attempt == "sigterm":
                    g.send(signal.SIGTERM)
                    code = await g.wait_exit(30)
                    print("waiting group after SIGTERM exit:", code)
                    assert code in (0, 143), g.tail()
                else:
                    await lone.kill()
                    await until(lambda: len(g.grep("serving on")) >= 2 or not g.running, "both workers serving", 90)
                    status, body = await _ready_status(http, port)
                    print("group after takeover /readyz:", status)
                    assert len(g.grep("serving on")) >= 2 and status == 200, g.tail()
    finally:
        lone.close()
        for g in groups:
            g.close()
