"""A PostgreSQL outage longer than the pool's timeout, under a served app.

The app reaches PostgreSQL through a relay this test cuts (every connection closed,
every new one closed on arrival) for longer than ``AGENT_DB_POOL_TIMEOUT_S``. Meanwhile:
``/readyz`` answers 503 at once (checks.db.ok false), and every route that needs the
database — starting a run, reading a stored run's events, a conversation — answers 503
``storage_unavailable`` with ``Retry-After``, never 500. Once the relay is restored the
app is ready again and a run completes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import psycopg.conninfo
import pytest

from app.config import Settings
from llm.extractive import ExtractiveProvider
from storage.postgres.database import PostgresOptions
from tests.conftest import collect_sse, running_app
from tests.support.postgres import TestPostgres
from tests.support.tcp_cut import CuttableRelay, cuttable_relay
from tests.test_cap_error_order import code, native, openai, ui

POOL_TIMEOUT_S = 1.0


def budget_settings(
    url: str, tmp_path: Path, pool_timeout_s: float = POOL_TIMEOUT_S, **extra: str
) -> Settings:
    """The app on PostgreSQL at ``url`` with a request storage budget of
    ``pool_timeout_s`` (the setting under test), offline and without the sample KB;
    ``extra``: other settings of the test (``AGENT_RUN_LEASE_S="2"``)."""
    return Settings.from_env({
        "AGENT_DATABASE_URL": url,
        "AGENT_SECRET_KEY": "replicas-share-this-key-0123456789",  # PostgreSQL: a key the database does not hold
        "AGENT_DB_PATH": str(tmp_path / "unused.sqlite3"),
        "AGENT_DB_POOL_TIMEOUT_S": str(pool_timeout_s),
        "AGENT_INGEST_SAMPLE_KB": "false",
        "AGENT_EMBEDDER": "hashing",
        "AGENT_LLM_PROVIDER": "extractive",
        "OLLAMA_HOST": "http://127.0.0.1:9",
        **extra,
    })


@pytest.fixture
async def relayed_url(pg_server: TestPostgres) -> AsyncIterator[tuple[str, CuttableRelay]]:
    with pg_server.database() as url:
        params = psycopg.conninfo.conninfo_to_dict(url)
        async with cuttable_relay(str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432)) as relay:
            params["host"], params["port"] = "127.0.0.1", str(relay.port)
            yield "postgresql://{user}@{host}:{port}/{dbname}".format(**params), relay


async def test_an_outage_longer_than_the_pool_timeout_is_503_everywhere(
    relayed_url: tuple[str, CuttableRelay], tmp_path: Path
) -> None:
    url, relay = relayed_url
    settings = budget_settings(url, tmp_path)
    body = {"message": "How do I resume a stream?", "context_type": "knowledge"}
    async with (
        running_app(settings, provider=ExtractiveProvider()) as (base, app),
        httpx.AsyncClient(timeout=30) as client,
    ):
        assert app.state.services.storage.engine == "postgres"
        before = await collect_sse(client, "POST", f"{base}/v1/agent/chat", json=body)
        done = before[-1].json()
        assert before[-1].event == "message_complete" and done["status"] == "completed"
        assert (await client.get(f"{base}/readyz")).status_code == 200

        relay.cut()
        # /readyz does not wait for the pool: a client that gives up after 3 s (the
        # server's own bound is under one) still gets its answer, every time.
        for _ in range(3):
            ready = await client.get(f"{base}/readyz", timeout=3)
            assert ready.status_code == 503, ready.text
            assert ready.json()["checks"]["db"]["ok"] is False

        # Side by side: each waits its own budget (one after another they only added up).
        started, events, conversation = await asyncio.gather(
            client.post(f"{base}/v1/agent/runs", json=body),
            client.get(f"{base}/v1/agent/runs/run_unknown/events"),
            client.get(f"{base}/v1/agent/conversations/{done['conversation_id']}x"),
        )
        answers = {"start a run": started, "a stored run's events": events, "a conversation": conversation}
        assert relay.refused > 0, "the app never tried to reach the database during the outage"
        for what, response in answers.items():
            assert response.status_code == 503, (what, response.status_code, response.text)
            assert response.json()["error"] == "storage_unavailable", (what, response.text)
            assert response.headers.get("retry-after"), what

        relay.restore()
        statuses: list[int] = []

        async def ready_again() -> bool:
            statuses.append((await client.get(f"{base}/readyz", timeout=3)).status_code)
            return statuses[-1] == 200

        for _ in range(300):  # the pool reconnects in the background
            if await ready_again():
                break
            await asyncio.sleep(0.05)
        assert statuses[-1] == 200, statuses[-5:]
        after = await collect_sse(client, "POST", f"{base}/v1/agent/chat", json=body)
        assert after[-1].event == "message_complete" and after[-1].json()["status"] == "completed"


async def test_a_request_not_yet_acknowledged_waits_one_budget_for_all_its_storage_steps(
    relayed_url: tuple[str, CuttableRelay], tmp_path: Path
) -> None:
    """During an outage a new run is answered 503 ``storage_unavailable`` within the
    request's one storage budget (``AGENT_DB_POOL_TIMEOUT_S``) for all its steps — the
    shared rate-limit count, a transcript's import, the admission write — not after the
    write retry of each step (``AGENT_DB_WRITE_RETRY_S``, left at its default here: the
    first of those alone would have outlasted the answer). The rate-limit count falls
    back to the replica's own count, and says so; nothing is stored that a client was
    told was not."""
    url, relay = relayed_url
    settings = budget_settings(url, tmp_path)
    write_retry_s = settings.db_write_retry_s
    assert write_retry_s > 2 * POOL_TIMEOUT_S, "the default write retry must outlast the budget for this test to tell"
    body = {"message": "How do I resume a stream?", "context_type": "knowledge"}
    transcript = {
        "model": "agentchat-knowledge",
        "messages": [
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": "first answer"},
            {"role": "user", "content": "How do I resume a stream?"},
        ],
    }
    async with (
        running_app(settings, provider=ExtractiveProvider()) as (base, app),
        httpx.AsyncClient(timeout=3 * write_retry_s) as client,
    ):
        svc = app.state.services
        assert svc.limits.store is not None, "PostgreSQL counts requests in the database"
        # Before any cut, a loaded machine (the full suite beside other work) can take the
        # pool past the 1 s budget once: the warm-up is asked again, as a client would.
        for _ in range(10):
            warm = await client.post(f"{base}/v1/agent/runs", json=body)
            if warm.status_code != 503:
                break
        assert warm.status_code == 201, warm.text
        for _ in range(200):  # its ending stored, so the store holds no unfinished run
            if not await svc.run_store.unfinished():
                break
            await asyncio.sleep(0.05)
        assert not await svc.run_store.unfinished(), "the warm-up run never ended"

        relay.cut()
        loop = asyncio.get_running_loop()
        for what, path, payload in [
            ("a new run (rate count, then admission)", "/v1/agent/runs", body),
            ("again, the shared count now skipped", "/v1/agent/runs", body),
            ("a transcript to import first", "/v1/chat/completions", transcript),
        ]:
            began = loop.time()
            response = await client.post(f"{base}{path}", json=payload)
            took = loop.time() - began
            # The native error shape, or the OpenAI face's own (``{"error": {"code": ...}}``).
            assert code(response) == (503, "storage_unavailable"), (what, response.status_code, response.text)
            assert response.headers.get("retry-after"), what
            # Before: the rate count's write retry, then the admission's (~2 x 10 s).
            assert took < write_retry_s, f"{what}: 503 after {took:.1f} s, not within the budget"
        assert relay.refused > 0, "the app never tried to reach the database during the outage"
        assert svc.limits.shared_fallbacks >= 2, "the rate count did not fall back to this replica's count"
        rate = (await client.get(f"{base}/readyz", timeout=3)).json()["rate_limit"]
        assert rate["shared_fallbacks"] >= 2, rate  # the fallback is visible, not only in the log
        scraped = (await client.get(f"{base}/metrics", timeout=3)).text  # and in a metric
        [line] = [x for x in scraped.splitlines() if x.startswith("agentchat_rate_limit_shared_fallbacks_total ")]
        assert float(line.split()[-1]) >= 2, line

        relay.restore()
        for _ in range(300):  # the pool reconnects in the background
            if (await client.get(f"{base}/readyz", timeout=3)).status_code == 200:
                break
            await asyncio.sleep(0.05)
        assert not await svc.run_store.unfinished(), "a run refused with 503 was stored all the same"
        after = await collect_sse(client, "POST", f"{base}/v1/agent/chat", json=body)
        assert after[-1].event == "message_complete" and after[-1].json()["status"] == "completed"


async def test_a_request_naming_buckets_is_503_within_the_budget_on_every_face(
    relayed_url: tuple[str, CuttableRelay], tmp_path: Path
) -> None:
    """A request whose ``context.buckets`` must be looked up (a name this replica has not
    cached rereads the bucket list), and one importing earlier turns (the user's runs
    counted first, the conversation looked up), read the database before their run is
    acknowledged: during an outage each such read is inside the request's one storage
    budget, so every face answers 503 ``storage_unavailable`` with ``Retry-After`` in its
    own error shape, never 500 and never after the write retry. Nothing is stored, and
    once the database is back the same named bucket scopes a run that completes."""
    url, relay = relayed_url
    settings = budget_settings(url, tmp_path)
    write_retry_s = settings.db_write_retry_s
    assert write_retry_s > 2 * POOL_TIMEOUT_S, "the default write retry must outlast the budget for this test to tell"
    known = {"buckets": ["handbook"]}
    uncached = {"buckets": ["handbook", "made_elsewhere"]}  # not cached here: the bucket list is read again
    async with (
        running_app(settings, provider=ExtractiveProvider()) as (base, app),
        httpx.AsyncClient(base_url=base, timeout=3 * write_retry_s) as client,
    ):
        svc = app.state.services
        kb = svc.rooms.knowledge.kb
        await kb.ingest_documents([{"id": "h1", "title": "Streams", "text": "Resume a stream with Last-Event-ID."}],
                                  bucket="handbook")
        warm = await client.post("/v1/agent/runs", json=native(context=known))
        assert warm.status_code == 201, warm.text
        for _ in range(200):  # its ending stored, so the store holds no unfinished run
            if not await svc.run_store.unfinished():
                break
            await asyncio.sleep(0.05)
        assert not await svc.run_store.unfinished(), "the warm-up run never ended"

        relay.cut()
        loop = asyncio.get_running_loop()
        requests: list[tuple[str, str, dict[str, Any]]] = [
            ("runs, a bucket to look up", "/v1/agent/runs", native(context=uncached)),
            ("chat, a bucket to look up", "/v1/agent/chat", native(context=uncached)),
            ("runs, a cached bucket", "/v1/agent/runs", native(context=known)),
            ("openai, a bucket to look up", "/v1/chat/completions", openai(context=uncached)),
            ("openai, a transcript", "/v1/chat/completions", openai(context=known)),
            ("openai, a named conversation", "/v1/chat/completions",
             openai(context=known, conversation_id="oai-outage")),
            ("ui, a bucket to look up", "/v1/agent/ui-stream", ui("ui-outage-1", context=uncached)),
            ("ui, earlier turns to import", "/v1/agent/ui-stream", ui("ui-outage-2", context=known)),
        ]
        async def timed(path: str, payload: dict[str, Any]) -> tuple[httpx.Response, float]:
            began = loop.time()
            response = await client.post(path, json=payload)
            return response, loop.time() - began

        # Side by side: each request waits its own budget (one after another they only added up).
        answered = await asyncio.gather(*(timed(path, payload) for _, path, payload in requests))
        for (what, _, _), (response, took) in zip(requests, answered, strict=True):
            assert code(response) == (503, "storage_unavailable"), (what, response.status_code, response.text)
            assert response.headers.get("retry-after"), what
            assert took < write_retry_s, f"{what}: 503 after {took:.1f} s, not within the budget"
        assert relay.refused > 0, "the app never tried to reach the database during the outage"
        # A bucket list that could not be read is counted (agentchat_kb_bucket_list_failures_total):
        # runs', chat's and openai's first read is it (the ui face may fail on its conversation first).
        assert kb.status.bucket_list_failures >= 3

        relay.restore()
        for _ in range(300):  # the pool reconnects in the background
            if (await client.get("/readyz", timeout=3)).status_code == 200:
                break
            await asyncio.sleep(0.05)
        assert not await svc.run_store.unfinished(), "a run refused with 503 was stored all the same"
        for chat_id in ("oai-outage", "ui-outage-1", "ui-outage-2"):  # no earlier turns imported
            assert (await client.get(f"/v1/agent/conversations/{chat_id}")).status_code == 404, chat_id
        refused = await client.post("/v1/agent/runs", json=native(context=uncached))
        assert code(refused) == (400, "unknown_bucket"), refused.text  # read now: a name that is not a bucket
        after = await collect_sse(client, "POST", "/v1/agent/chat", json=native(context=known))
        assert after[-1].event == "message_complete" and after[-1].json()["status"] == "completed"


#: Requests whose reads before their run is acknowledged meet a locked table: a bucket
#: this replica has not cached (the bucket list, ``kb_buckets``), and earlier turns to
#: import (the user's runs counted first, or the run that answered a transcript: ``runs``).
UNCACHED = {"buckets": ["made_elsewhere"]}
EVERY = {"buckets": ["*"]}
LOCKED_READS: dict[str, list[tuple[str, str, dict[str, Any]]]] = {
    "kb_buckets": [
        ("runs", "/v1/agent/runs", native(context=UNCACHED)),
        ("chat", "/v1/agent/chat", native(context=UNCACHED)),
        ("openai", "/v1/chat/completions", openai(context=UNCACHED)),
        ("ui", "/v1/agent/ui-stream", ui("ui-locked", context=UNCACHED)),
    ],
    "runs": [
        # The admission transaction itself (no earlier turns, nothing to look up): it
        # waits for its lock on ``runs`` as long as the budget has left, not lock_timeout.
        ("runs, the admission write", "/v1/agent/runs", native(context=EVERY)),
        ("chat, the admission write", "/v1/agent/chat", native(context=EVERY)),
        ("openai, a transcript", "/v1/chat/completions", openai(context=EVERY)),
        ("openai, a named conversation", "/v1/chat/completions", openai(context=EVERY, conversation_id="oai-locked")),
        ("ui, earlier turns", "/v1/agent/ui-stream", ui("ui-locked", context=EVERY)),
    ],
}


@pytest.mark.parametrize("table", list(LOCKED_READS))
async def test_a_read_kept_waiting_by_a_lock_is_503_within_the_budget(
    pg_server: TestPostgres, tmp_path: Path, table: str
) -> None:
    """The database answers, but a table a request reads before its run is acknowledged
    cannot be read: another session holds it in ACCESS EXCLUSIVE (a migration of a
    rolling upgrade, an operator's ``ALTER TABLE``). The request waits for that read at
    most its storage budget, on every face: 503 ``storage_unavailable`` with
    ``Retry-After`` while the lock is still held — not after the server's
    ``lock_timeout`` (5 s by default), which is what the bucket lookup and the run-cap
    count waited while they were outside the budget. Nothing is stored; once the lock is
    gone an unknown name is refused as such."""
    lock_timeout_s = PostgresOptions().lock_timeout_ms / 1000
    assert lock_timeout_s >= 4 * POOL_TIMEOUT_S, "the lock timeout must outlast the budget for this test to tell"
    with pg_server.database() as url:
        settings = budget_settings(url, tmp_path)
        async with (
            running_app(settings, provider=ExtractiveProvider()) as (base, app),
            httpx.AsyncClient(base_url=base, timeout=6 * lock_timeout_s) as client,
            await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=10) as locker,
        ):
            svc = app.state.services
            loop = asyncio.get_running_loop()
            async with locker.transaction():
                await locker.execute("SET LOCAL lock_timeout = '30s'")  # a failure, never a hang
                await locker.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")

                async def timed(path: str, payload: dict[str, Any]) -> tuple[httpx.Response, float]:
                    began = loop.time()
                    response = await client.post(path, json=payload)
                    return response, loop.time() - began

                # Side by side: each waits its own budget (one after another they only added up).
                reads = LOCKED_READS[table]
                answered = await asyncio.gather(*(timed(path, payload) for _, path, payload in reads))
                answers = {what: got for (what, _, _), got in zip(reads, answered, strict=True)}
            for what, (response, took) in answers.items():
                assert code(response) == (503, "storage_unavailable"), (what, response.status_code, response.text)
                assert response.headers.get("retry-after"), what
                assert took < lock_timeout_s, f"{what}: 503 after {took:.1f} s, the lock's timeout, not the budget"
            assert not await svc.run_store.unfinished(), "a run refused with 503 was stored all the same"
            for chat_id in ("ui-locked", "oai-locked"):  # no earlier turns imported
                assert (await client.get(f"/v1/agent/conversations/{chat_id}")).status_code == 404, chat_id
            refused = await client.post("/v1/agent/runs", json=native(context=UNCACHED))
            assert code(refused) == (400, "unknown_bucket"), refused.text
