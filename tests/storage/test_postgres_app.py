"""The whole service on the PostgreSQL engine (``AGENT_DATABASE_URL``): documents
ingested through the API land in PostgreSQL (full text and vectors), a knowledge
question is answered from them through the real agent loop over SSE, and the run, its
events and the conversation are stored there too."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import psycopg
import pytest

from app.config import Settings
from llm.extractive import ExtractiveProvider
from tests.conftest import collect_sse, running_app
from tests.support.postgres import GUARDED, TestPostgres

DOCS = [
    {"id": "doc-resume", "title": "Resuming a run",
     "text": "Runs outlive their connections. To resume a stream after a disconnect, reconnect to "
             "GET /v1/agent/runs/{run_id}/events with the Last-Event-ID header and the server replays "
             "every event you missed, then follows the run live."},
    {"id": "doc-shell", "title": "Shell environment",
     "text": "The shell environment lists PATH, HOME and SHELL variables."},
]


@pytest.fixture
async def pg_url(pg_server: TestPostgres) -> AsyncIterator[str]:
    with pg_server.database() as url:
        yield url


def test_settings_read_the_database_url() -> None:
    url = "postgresql://agent:pw@db:5432/agent"
    assert Settings.from_env({"AGENT_DATABASE_URL": url}).database_url == url
    assert Settings.from_env({}).database_url is None
    with pytest.raises(Exception, match="AGENT_DATABASE_URL") as caught:
        Settings.from_env({"AGENT_DATABASE_URL": "mysql://user:secret@db/agent"})
    assert "secret" not in str(caught.value)


async def test_a_knowledge_question_is_answered_from_postgresql(pg_url: str, tmp_path: Path) -> None:
    settings = Settings.from_env({
        "AGENT_DATABASE_URL": pg_url,
        "AGENT_SECRET_KEY": "replicas-share-this-key-0123456789",  # PostgreSQL: a key the database does not hold
        "AGENT_DB_PATH": str(tmp_path / "unused.sqlite3"),
        "AGENT_INGEST_SAMPLE_KB": "false",
        "AGENT_ADMIN_OPEN": "true",  # POST /v1/kb/documents in `none` mode
        "AGENT_EMBEDDER": "hashing",
        "AGENT_LLM_PROVIDER": "extractive",
        "OLLAMA_HOST": "http://127.0.0.1:9",
    })
    async with (
        running_app(settings, provider=ExtractiveProvider()) as (base, app),
        httpx.AsyncClient(timeout=30) as client,
    ):
        assert app.state.services.storage.engine == "postgres"
        assert (await client.post(f"{base}/v1/kb/documents", json={"documents": DOCS})).status_code == 200
        events = await collect_sse(client, "POST", f"{base}/v1/agent/chat", json={
            "message": "How do I resume a stream after a disconnect?", "context_type": "knowledge"})
        ready = (await client.get(f"{base}/readyz")).json()
        await app.state.services.storage.db.flush()
    done = events[-1].json()
    assert events[-1].event == "message_complete" and done["status"] == "completed"
    response = next(e.json() for e in events if e.event == "response")
    assert "Last-Event-ID" in response["answer"] and response["used_internal_kb"] is True
    assert "postgres" in str(ready)
    # Which pgvector answers, and whether its HNSW scans are iterative (0.8+): recall differs.
    index = ready["checks"]["knowledge"]["semantic_search"]["index"]
    assert index["pgvector"] and index["iterative_scans"] is (int(index["pgvector"].split(".")[1]) >= 8)
    assert not (tmp_path / "unused.sqlite3").exists()
    with psycopg.connect(pg_url, **GUARDED) as conn:
        chunks = conn.execute("SELECT count(*), count(embedding) FROM kb_chunks").fetchone()
        stored = conn.execute("SELECT count(*) FROM run_events WHERE run_id = %s", (done["run_id"],)).fetchone()
        messages = conn.execute("SELECT count(*) FROM messages WHERE conversation_id = %s",
                                (done["conversation_id"],)).fetchone()
    assert chunks is not None and chunks[0] >= 2 and chunks[0] == chunks[1]
    assert stored is not None and stored[0] == len(events)
    assert messages is not None and messages[0] >= 2
