"""An ``Idempotency-Key`` reused for a different request is refused, on both engines and
both native routes that take one (``POST /v1/agent/chat``, ``POST /v1/agent/runs``).

The key is stored with a fingerprint of its first request (message, context type,
context, conversation); a repeat with the same request resumes (or answers 200 with) the
run it started, ``Last-Event-ID`` included; another message, context type or context is
``422 idempotency_key_reused`` and starts nothing. A row without a fingerprint (stored
before migration 31) keeps the old rule. Keys are per user: two users' same key never
meet. Everything over a real uvicorn server; the model is a gated script.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
from app.server.auth import sign_hs256
from tests.conftest import collect_sse, running_app
from tests.support.gated_provider import GatedProvider, GatedTurn
from tests.support.postgres import TestPostgres
from tests.support.sse import SSEEvent
from tests.test_chat_idempotency import ids, registry

CONTEXT = {"workflow_id": "wf-1", "view": {"panel": "steps", "zoom": 2}}
BODY = {"message": "What is a bucket?", "context_type": "workflow", "context": CONTEXT}
REORDERED = {"context": {"view": {"zoom": 2, "panel": "steps"}, "workflow_id": "wf-1"},
             "context_type": "workflow", "message": "What is a bucket?"}
DIFFERENT = {
    "message": {**BODY, "message": "Something else entirely"},
    "context_type": {**BODY, "context_type": "tables"},
    "context": {**BODY, "context": {**CONTEXT, "workflow_id": "wf-2"}},
    "nested context": {**BODY, "context": {**CONTEXT, "view": {"panel": "steps", "zoom": 3}}},
}
REUSED = "this Idempotency-Key was used for a different request"
SECRET = "fingerprint-secret-0123456789abcdef"


@pytest.fixture(params=["sqlite", "postgres"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    """The app's settings on a fresh database of each engine."""
    base = {"AGENT_DB_PATH": str(tmp_path / "agent.sqlite3"), "AGENT_INGEST_SAMPLE_KB": "false",
            "OLLAMA_HOST": "http://127.0.0.1:9"}
    if request.param == "sqlite":
        yield Settings.from_env(base)
        return
    server: TestPostgres = request.getfixturevalue("pg_server")
    with server.database() as url:
        yield Settings.from_env({**base, "AGENT_DATABASE_URL": url,
                                 "AGENT_SECRET_KEY": "fingerprint-key-0123456789abcdefgh"})


def refused(response: httpx.Response) -> bool:
    return response.status_code == 422 and response.json() == {"error": "idempotency_key_reused", "detail": REUSED}


def run_ids(events: list[SSEEvent]) -> str:
    return str(events[0].json()["run_id"])


async def test_a_reused_key_with_another_request_is_refused_on_both_routes(engine: Settings) -> None:
    provider = GatedProvider([GatedTurn(["one ", "two ", "three"]), GatedTurn(["made"])])
    async with running_app(engine, provider=provider, registry=registry(), embedder=None) as (base, app):
        svc = app.state.services
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            chat_key = {"Idempotency-Key": "K"}
            first = await collect_sse(client, "POST", "/v1/agent/chat", json=BODY, headers=chat_key)
            run_id = run_ids(first)
            # The same request again (its context's keys in another order too): the same run.
            again = await collect_sse(client, "POST", "/v1/agent/chat", json=REORDERED, headers=chat_key)
            tail = await collect_sse(client, "POST", "/v1/agent/chat", json=BODY,
                                     headers={**chat_key, "Last-Event-ID": "3"})
            chat_refusals = {name: await client.post("/v1/agent/chat", json=body, headers=chat_key)
                             for name, body in DIFFERENT.items()}
            with_last_id = await client.post("/v1/agent/chat", json=DIFFERENT["message"],
                                             headers={**chat_key, "Last-Event-ID": "3"})
            # The runs API shares the keys: K with another request is refused there too.
            runs_refusal = await client.post("/v1/agent/runs", json=DIFFERENT["message"], headers=chat_key)
            runs_same = await client.post("/v1/agent/runs", json=BODY, headers=chat_key)
            runs_key = {"Idempotency-Key": "R"}
            made = await client.post("/v1/agent/runs", json=BODY, headers=runs_key)
            repeat = await client.post("/v1/agent/runs", json=REORDERED, headers=runs_key)
            runs_refusals = {name: await client.post("/v1/agent/runs", json=body, headers=runs_key)
                             for name, body in DIFFERENT.items()}
            chat_on_runs_key = await client.post("/v1/agent/chat", json=DIFFERENT["context_type"], headers=runs_key)
            count = (await svc.run_store.sql.fetchone("SELECT COUNT(*) FROM runs"))[0]
    assert first[-1].event == "message_complete" and first[-1].json()["status"] == "completed"
    assert [(e.id, e.data) for e in again] == [(e.id, e.data) for e in first]
    assert ids(tail) == [e.id for e in first][3:]
    assert all(refused(r) for r in chat_refusals.values()), {k: r.text for k, r in chat_refusals.items()}
    assert refused(with_last_id), with_last_id.text
    assert refused(runs_refusal), runs_refusal.text
    assert runs_same.status_code == 200 and runs_same.json()["run_id"] == run_id
    assert made.status_code == 201 and repeat.status_code == 200 and repeat.json()["run_id"] == made.json()["run_id"]
    assert all(refused(r) for r in runs_refusals.values()), {k: r.text for k, r in runs_refusals.items()}
    assert refused(chat_on_runs_key), chat_on_runs_key.text
    # Nothing was started by a refusal: the two keyed runs, two model calls.
    assert count == 2 and len(provider.requests) == 2


async def test_a_run_stored_before_the_fingerprint_keeps_the_old_rule(engine: Settings) -> None:
    provider = GatedProvider([GatedTurn(["old"])])
    async with running_app(engine, provider=provider, registry=registry(), embedder=None) as (base, app):
        svc = app.state.services
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            key = {"Idempotency-Key": "before-31"}
            made = await client.post("/v1/agent/runs", json=BODY, headers=key)
            run_id = made.json()["run_id"]
            # As a row migrated from before step 31 is: the key, no fingerprint.
            await svc.run_store.sql.execute([("UPDATE runs SET request_fingerprint = NULL WHERE id = ?", (run_id,))])
            stored = await svc.run_store.find_by_idempotency_key("local", "before-31")
            other = await client.post("/v1/agent/runs", json=DIFFERENT["message"], headers=key)
            chat = await collect_sse(client, "POST", "/v1/agent/chat", json=DIFFERENT["context"], headers=key)
            elsewhere = await client.post("/v1/agent/chat", json={**BODY, "conversation_id": "another"}, headers=key)
    assert made.status_code == 201 and stored is not None and stored.request_fingerprint is None
    assert other.status_code == 200 and other.json()["run_id"] == run_id
    assert run_ids(chat) == run_id and chat[-1].event == "message_complete"
    assert elsewhere.status_code == 422 and elsewhere.json()["error"] == "idempotency_key_reused"
    assert len(provider.requests) == 1


def bearer(sub: str) -> dict[str, str]:
    now = int(time.time())
    return {"Authorization": "Bearer " + sign_hs256({"sub": sub, "iat": now, "exp": now + 3600}, SECRET)}


async def test_two_users_with_one_key_never_collide(settings: Settings) -> None:
    provider = GatedProvider([GatedTurn(["alice's"]), GatedTurn(["bob's"])])
    cfg = settings.with_(auth="jwt", jwt_secret=SECRET)
    alice, bob = bearer("alice"), bearer("bob")
    bobs_body: dict[str, Any] = {**BODY, "message": "Something else entirely", "context_type": "tables"}
    async with (
        running_app(cfg, provider=provider, registry=registry(), embedder=None) as (base, _app),
        httpx.AsyncClient(base_url=base, timeout=30) as client,
    ):
        a1 = await client.post("/v1/agent/runs", json=BODY, headers={**alice, "Idempotency-Key": "K"})
        b1 = await client.post("/v1/agent/runs", json=bobs_body, headers={**bob, "Idempotency-Key": "K"})
        a2 = await client.post("/v1/agent/runs", json=BODY, headers={**alice, "Idempotency-Key": "K"})
        b2 = await client.post("/v1/agent/runs", json=bobs_body, headers={**bob, "Idempotency-Key": "K"})
        a3 = await client.post("/v1/agent/runs", json=bobs_body, headers={**alice, "Idempotency-Key": "K"})
    assert (a1.status_code, b1.status_code) == (201, 201) and a1.json()["run_id"] != b1.json()["run_id"]
    assert a2.status_code == 200 and a2.json()["run_id"] == a1.json()["run_id"]
    assert b2.status_code == 200 and b2.json()["run_id"] == b1.json()["run_id"]
    assert refused(a3), a3.text
