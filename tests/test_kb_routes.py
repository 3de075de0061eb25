"""Documents and buckets over HTTP (``GET``/``DELETE /v1/kb/documents`` and
``/v1/kb/buckets``), guarded like ``POST /v1/kb/documents``; and a knowledge chat that
stays on the default buckets, with sources that never show a server path."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
from app.server.auth import sign_hs256
from llm.scripted import ScriptedProvider
from tests.conftest import collect_sse, running_app

SECRET = "kb-route-secret-0123456789abcdef"


def settings(tmp_path: Path, **env: str) -> Settings:
    return Settings.from_env({
        "AGENT_DB_PATH": str(tmp_path / "a.db"), "AGENT_INGEST_SAMPLE_KB": "false", "AGENT_ADMIN_OPEN": "true", **env,
    })


@asynccontextmanager
async def client_for(s: Settings, **headers: str) -> AsyncIterator[httpx.AsyncClient]:
    async with running_app(s, provider=ScriptedProvider([]), embedder=None) as (base, _), \
            httpx.AsyncClient(base_url=base, headers=headers) as client:
        yield client


def docs(prefix: str, n: int) -> list[dict[str, Any]]:
    return [{"id": f"{prefix}-{i:02d}", "title": f"{prefix} {i}", "text": f"{prefix} text number {i}",
             "source": f"{prefix}/{i}.md"} for i in range(n)]


async def test_list_page_and_delete_documents_and_buckets(tmp_path: Path) -> None:
    async with client_for(settings(tmp_path)) as client:
        assert (await client.get("/v1/kb/buckets")).json() == {"buckets": []}
        await client.post("/v1/kb/documents", json={"documents": docs("alpha", 5), "bucket": "alpha"})
        await client.post("/v1/kb/documents", json={"documents": docs("beta", 2), "bucket": "beta"})

        buckets = (await client.get("/v1/kb/buckets")).json()["buckets"]
        assert [(b["name"], b["documents"], b["chunks"]) for b in buckets] == [("alpha", 5, 5), ("beta", 2, 2)]

        page = (await client.get("/v1/kb/documents", params={"bucket": "alpha", "limit": 2})).json()
        ids = [d["doc_id"] for d in page["documents"]]
        while page["next_after"]:
            page = (await client.get("/v1/kb/documents",
                                     params={"bucket": "alpha", "limit": 2, "after": page["next_after"]})).json()
            ids += [d["doc_id"] for d in page["documents"]]
        assert ids == [f"alpha-{i:02d}" for i in range(5)]
        everything = (await client.get("/v1/kb/documents")).json()
        assert len(everything["documents"]) == 7 and everything["next_after"] is None
        first = everything["documents"][0]
        assert first == {**first, "bucket": "alpha", "title": "alpha 0", "source": "alpha/0.md", "chunks": 1}
        assert "text" not in first

        assert (await client.delete("/v1/kb/documents/alpha-01")).json() == {"deleted": "alpha-01"}
        assert (await client.delete("/v1/kb/documents/alpha-01")).status_code == 404
        assert (await client.delete("/v1/kb/documents/..%2F..")).status_code == 404
        gone = await client.delete("/v1/kb/buckets/beta")
        assert gone.json() == {"bucket": "beta", "deleted_documents": 2}
        assert (await client.delete("/v1/kb/buckets/beta")).status_code == 404
        assert (await client.get("/v1/kb/documents", params={"bucket": "beta"})).status_code == 404
        left = (await client.get("/v1/kb/documents")).json()["documents"]
        assert [d["doc_id"] for d in left] == ["alpha-00", "alpha-02", "alpha-03", "alpha-04"]


@pytest.mark.parametrize(
    "params",
    [{"limit": "0"}, {"limit": "1001"}, {"limit": "abc"}, {"limit": "99999999999999999999999"},
     {"after": "../etc"}, {"bucket": "Bad Name"}],
)
async def test_list_parameters_are_range_checked(tmp_path: Path, params: dict[str, str]) -> None:
    async with client_for(settings(tmp_path)) as client:
        r = await client.get("/v1/kb/documents", params=params)
    assert r.status_code == 400 and r.json()["error"] == "invalid_field"


async def test_document_and_bucket_routes_are_admin_only(tmp_path: Path) -> None:
    env = {"AGENT_AUTH": "jwt", "AGENT_JWT_SECRET": SECRET, "AGENT_ADMIN_USERS": "root"}
    user = sign_hs256({"sub": "someone", "exp": time.time() + 600}, SECRET)
    admin = sign_hs256({"sub": "root", "exp": time.time() + 600}, SECRET)
    async with client_for(settings(tmp_path, **env), Authorization=f"Bearer {user}") as client:
        for method, path in [("GET", "/v1/kb/documents"), ("DELETE", "/v1/kb/documents/x"),
                             ("GET", "/v1/kb/buckets"), ("DELETE", "/v1/kb/buckets/x")]:
            assert (await client.request(method, path)).status_code == 403, path
        r = await client.get("/v1/kb/buckets", headers={"Authorization": f"Bearer {admin}"})
        assert r.status_code == 200
    closed = Settings.from_env({"AGENT_DB_PATH": str(tmp_path / "b.db"), "AGENT_INGEST_SAMPLE_KB": "false"})
    async with client_for(closed) as client:
        assert (await client.get("/v1/kb/buckets")).status_code == 403  # `none` mode: closed by default


async def test_knowledge_chat_stays_on_the_default_buckets_and_shows_no_server_paths(tmp_path: Path) -> None:
    env = {"AGENT_INGEST_SAMPLE_KB": "true", "AGENT_LLM_PROVIDER": "extractive", "AGENT_EMBEDDER": "hashing",
           "OLLAMA_HOST": "http://127.0.0.1:9"}
    question = {"message": "How do I resume a stream after a disconnect?", "context_type": "knowledge"}
    unrelated = [{"id": f"resume-{i}", "title": f"Resume writing {i}",
                  "text": "To resume a stream of job applications after a disconnect from work, write a resume."}
                 for i in range(20)]
    async with running_app(settings(tmp_path, **env)) as (base, app):
        await app.state.services.rooms.knowledge.tasks[0]
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            before = await collect_sse(client, "POST", "/v1/agent/chat", json=question)
            r = await client.post("/v1/kb/documents", json={"documents": unrelated, "bucket": "careers"})
            assert r.json()["added"] == 20
            after = await collect_sse(client, "POST", "/v1/agent/chat", json=question)
            scoped = await collect_sse(client, "POST", "/v1/agent/chat",
                                       json={**question, "context": {"buckets": ["careers"]}})

    def sources(events: list[Any]) -> list[dict[str, Any]]:
        return next(e.json() for e in events if e.event == "response")["sources"]

    assert sources(before) and all(s["metadata"].get("bucket") == "default" for s in sources(before))
    assert all(s["metadata"].get("bucket") == "default" for s in sources(after))
    for s in sources(before) + sources(after):
        location = s.get("location") or ""
        assert location.startswith("sample_kb/") and str(tmp_path) not in location and not location.startswith("/")
    assert sources(scoped) and {s["metadata"].get("bucket") for s in sources(scoped)} == {"careers"}
