"""Reads of a server whose SQLite file was removed under it (operator review).

``rm agent.sqlite3`` under a running ``serve``: writes and ``/readyz`` answered 503
(``storage/sqlite/file_guard.py``), but the conversation list, the run list and a
conversation were still answered 200 from the deleted file — a run live at the deletion
listed ``running`` long after it had ended. ``docs/operations.md``: any route whose
database is away answers 503 ``storage_unavailable``. And since only a restart opens the
file at the path again, the refusal says so rather than "retry shortly" (a
``Retry-After`` stays: an orchestrator may restart the process meanwhile).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.procs import DEMO_AUTH, OFFLINE_SERVE_ENV, AgentServer, client

pytestmark = pytest.mark.slow  # a real server process, its database file removed under it


def _run_body(message: str) -> dict[str, Any]:
    return {"message": message, "context_type": "knowledge", "context": {}}


async def _run_ended(http: httpx.AsyncClient, base: str, run_id: str, timeout_s: float = 60) -> dict[str, Any]:
    """The run once it is no longer live; the timeout only guards against a hang."""
    deadline = time.monotonic() + timeout_s
    while True:
        response = await http.get(f"{base}/v1/agent/runs/{run_id}", headers=DEMO_AUTH)
        assert response.status_code == 200, response.text
        run: dict[str, Any] = response.json()
        if run["status"] not in ("queued", "running", "pending"):
            return run
        assert time.monotonic() < deadline, run
        await asyncio.sleep(0.05)


def _restart_refusal(response: httpx.Response) -> str:
    """The detail of a 503 ``storage_unavailable`` that says a restart is needed."""
    assert response.status_code == 503, (response.request.url, response.status_code, response.text)
    body = response.json()
    assert body["error"] == "storage_unavailable", body
    assert response.headers.get("retry-after"), response.headers
    detail = str(body["detail"])
    assert "restart" in detail and "retry shortly" not in detail, detail
    return detail


@pytest.mark.asyncio
async def test_reads_answer_503_once_the_database_file_is_removed(tmp_path: Path) -> None:
    server = AgentServer(tmp_path, OFFLINE_SERVE_ENV, name="removed-reads")
    server.start()
    try:
        await server.wait_healthy()
        async with client() as http:
            started = await http.post(f"{server.base}/v1/agent/runs", json=_run_body("hello there"), headers=DEMO_AUTH)
            assert started.status_code == 201, started.text
            run_id, conversation_id = started.json()["run_id"], started.json()["conversation_id"]
            await _run_ended(http, server.base, run_id)
            reads = [
                f"{server.base}/v1/agent/conversations",
                f"{server.base}/v1/agent/runs",
                f"{server.base}/v1/agent/conversations/{conversation_id}",
                f"{server.base}/v1/agent/runs/{run_id}",
            ]
            for url in reads:  # served from the file while it is there
                assert (await http.get(url, headers=DEMO_AUTH)).status_code == 200, url

            server.db_path.unlink()  # what the operator did: the main file only

            deadline = time.monotonic() + 30
            while (await server.readyz(http))[0] != 503:
                assert time.monotonic() < deadline, "the removed file was never noticed"
                await asyncio.sleep(0.05)

            for url in reads:
                _restart_refusal(await http.get(url, headers=DEMO_AUTH))
            again = await http.post(f"{server.base}/v1/agent/runs", json=_run_body("again"), headers=DEMO_AUTH)
            _restart_refusal(again)
            # The OpenAI-compatible face words its refusals in OpenAI's shape: the same words.
            completion = await http.post(
                f"{server.base}/v1/chat/completions",
                json={"model": "agentchat-knowledge", "messages": [{"role": "user", "content": "again"}]},
                headers=DEMO_AUTH,
            )
            assert completion.status_code == 503, completion.text
            assert completion.headers.get("retry-after"), completion.headers
            message = completion.json()["error"]["message"]
            assert "restart" in message and "retry shortly" not in message, message
            assert server.running, server.tail()
            assert not server.db_path.exists(), "the running server created a new database file"
    finally:
        server.close()
