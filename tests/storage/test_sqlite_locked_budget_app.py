"""SQLite's equivalent of a PostgreSQL outage: another process holds the file's write
lock. A request not yet acknowledged waits for it at most its one storage budget
(``AGENT_DB_POOL_TIMEOUT_S``) and is answered 503 ``storage_unavailable`` with
``Retry-After`` — not after ``AGENT_DB_WRITE_RETRY_S`` (left at its default) — and is
not stored; a run acknowledged before the lock rides it out with the write retry and
completes, nothing of it lost.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from tests.conftest import collect_sse, running_app
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn
from tests.support.sqlite_lock import sqlite_file_locked
from tests.test_cap_error_order import code, native, openai, ui
from tests.test_limits import settings

BUDGET_S = 1.0


async def test_a_locked_file_answers_new_runs_503_within_the_budget_and_acknowledged_runs_ride_it_out(
    tmp_path: Path,
) -> None:
    gate = Gate()
    provider = GatedProvider([GatedTurn(steps=("before the lock; ", gate, "after the lock")), GatedTurn(steps=("ok",))])
    cfg = settings(tmp_path, AGENT_DB_POOL_TIMEOUT_S=str(BUDGET_S))  # the setting under test: the request's budget
    write_retry_s = cfg.db_write_retry_s
    assert write_retry_s > 2 * BUDGET_S, "the default write retry must outlast the budget for this test to tell"
    body = {"message": "hi", "context_type": "knowledge"}
    async with (
        running_app(cfg, provider=provider, embedder=None) as (base, app),
        httpx.AsyncClient(base_url=base, timeout=3 * write_retry_s) as client,
    ):
        svc = app.state.services
        held = await client.post("/v1/agent/runs", json=body)
        assert held.status_code == 201, held.text
        run_id = held.json()["run_id"]
        await asyncio.wait_for(gate.reached.wait(), 10)  # acknowledged, and in the middle of its answer

        loop = asyncio.get_running_loop()
        async with sqlite_file_locked(cfg.db_path):
            retries_before = svc.storage.db.stats.retries
            gate.open()  # its next events meet the lock: the writer retries them
            began = loop.time()
            refused = await client.post("/v1/agent/runs", json={**body, "conversation_id": "another"})
            took = loop.time() - began
            assert refused.status_code == 503, (refused.status_code, refused.text)
            assert refused.json()["error"] == "storage_unavailable", refused.text
            assert refused.headers.get("retry-after")
            assert took < write_retry_s, f"503 after {took:.1f} s, not within the budget"
            for _ in range(200):  # the acknowledged run's write met the lock before it is lifted
                if svc.storage.db.stats.retries > retries_before:
                    break
                await asyncio.sleep(0.05)
            assert svc.storage.db.stats.retries > retries_before, "the acknowledged run never met the lock"

        events = await collect_sse(client, "GET", f"/v1/agent/runs/{run_id}/events")
        done = events[-1]
        assert done.event == "message_complete" and done.json()["status"] == "completed", [e.event for e in events]
        text = "".join(e.json()["chunk"] for e in events if e.event == "content_chunk")
        assert "after the lock" in text, text
        ids = [int(e.id) for e in events if e.id]
        assert ids == list(range(1, len(ids) + 1)), ids  # nothing shown is missing
        # The refused request left nothing behind: its run was never stored.
        stored = {r.id for r in await svc.run_store.unfinished()}
        assert not stored, stored
        again = await client.post("/v1/agent/runs", json={**body, "conversation_id": "another"})
        assert again.status_code == 201, again.text


async def test_requests_naming_buckets_are_503_within_the_budget_on_every_face_while_the_file_is_locked(
    tmp_path: Path,
) -> None:
    """A request whose ``context.buckets`` names buckets, on every face, while another
    process holds the file's write lock: the bucket lookup and the run-cap count before an
    import are reads (WAL lets them through), inside the request's one storage budget with
    its writes, so each request is 503 ``storage_unavailable`` with ``Retry-After`` in its
    face's error shape, within the budget and not the write retry; none is stored, nothing
    is imported. A name that is no bucket is still a 400 meanwhile: the lookup could read."""
    cfg = settings(tmp_path, AGENT_DB_POOL_TIMEOUT_S=str(BUDGET_S))  # the setting under test: the request's budget
    write_retry_s = cfg.db_write_retry_s
    assert write_retry_s > 2 * BUDGET_S, "the default write retry must outlast the budget for this test to tell"
    known = {"buckets": ["handbook"]}
    async with (
        running_app(cfg, provider=GatedProvider([GatedTurn(steps=("ok",))]), embedder=None) as (base, app),
        httpx.AsyncClient(base_url=base, timeout=3 * write_retry_s) as client,
    ):
        svc = app.state.services
        kb = svc.rooms.knowledge.kb
        await kb.ingest_documents([{"id": "h1", "title": "Streams", "text": "Resume with Last-Event-ID."}],
                                  bucket="handbook")
        loop = asyncio.get_running_loop()
        answers: dict[str, tuple[httpx.Response, float]] = {}
        async with sqlite_file_locked(cfg.db_path):
            for what, path, payload in [
                ("runs", "/v1/agent/runs", native(context=known)),
                ("chat", "/v1/agent/chat", native(context={"bucket": "handbook"})),
                ("openai, a transcript", "/v1/chat/completions", openai(context=known)),
                ("openai, a named conversation", "/v1/chat/completions",
                 openai(context=known, conversation_id="oai-locked")),
                ("ui, earlier turns", "/v1/agent/ui-stream", ui("ui-locked", context=known)),
            ]:
                began = loop.time()
                response = await client.post(path, json=payload)
                answers[what] = (response, loop.time() - began)
            unknown = await client.post("/v1/agent/runs", json=native(context={"buckets": ["handbook", "nope"]}))
        for what, (response, took) in answers.items():
            assert code(response) == (503, "storage_unavailable"), (what, response.status_code, response.text)
            assert response.headers.get("retry-after"), what
            assert took < write_retry_s, f"{what}: 503 after {took:.1f} s, not within the budget"
        assert code(unknown) == (400, "unknown_bucket"), unknown.text
        assert not await svc.run_store.unfinished(), "a run refused with 503 was stored all the same"
        for chat_id in ("oai-locked", "ui-locked"):  # no earlier turns imported
            assert (await client.get(f"/v1/agent/conversations/{chat_id}")).status_code == 404, chat_id
        again = await collect_sse(client, "POST", "/v1/agent/chat", json=native(context=known))
        assert again[-1].event == "message_complete" and again[-1].json()["status"] == "completed"
