"""A non-streamed OpenAI completion whose run the SQLite database failed mid-answer (the
file removed under the server) is answered 503 ``storage_unavailable`` with
``Retry-After``, as every other 503 of the service is. Before, this one 503 came
without it: the ``openai`` SDK then retries after its own short backoff, and an
orchestrator or proxy that reads the header had nothing to go by."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from app.config import Settings
from tests.conftest import running_app
from tests.support.deadline import until
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn


async def test_a_non_streamed_completion_whose_database_file_went_is_503_with_retry_after(tmp_path: Path) -> None:
    db = tmp_path / "agent.sqlite3"
    settings = Settings.from_env({
        "AGENT_DB_PATH": str(db),
        "AGENT_INGEST_SAMPLE_KB": "false",
        "AGENT_EMBEDDER": "hashing",
        "OLLAMA_HOST": "http://127.0.0.1:9",
    })
    gate = Gate()
    provider = GatedProvider([GatedTurn(steps=("before ", gate, "after"))])
    body = {"model": "agentchat-workflow", "stream": False, "messages": [{"role": "user", "content": "hello"}]}
    async with running_app(settings, provider=provider) as (base, app), httpx.AsyncClient(timeout=60) as http:
        asked = asyncio.create_task(http.post(f"{base}/v1/chat/completions", json=body))
        await until(gate.reached.is_set, "the run mid-answer", 30)
        db.unlink()
        await until(lambda: app.state.services.storage.db.guard.lost is not None, "the removal seen", 30, step=0.05)
        gate.open()
        response = await asked
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "storage_unavailable", response.text
    assert int(response.headers["retry-after"]) > 0, response.headers
    assert response.headers["x-run-id"]
