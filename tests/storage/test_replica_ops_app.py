"""Replicas on one database (a SQLite file, and PostgreSQL): a ``stream_url`` issued by
one replica is accepted by every other (the signing key is kept in the database), and
run ownership is visible on ``/metrics`` — leases held, runs taken over from a dead
replica and how long after its lease expired, runs lost to another replica, leases
handed back at shutdown."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from prometheus_client.parser import text_string_to_metric_families

from agenttools.core.registry import ToolRegistry
from app.config import Settings
from app.runs.records import Caller, ChatInput, encode_run_input
from app.server.auth import LOCAL_USER
from storage.open import open_storage
from storage.records import NewRun
from tests.conftest import collect_sse, running_app
from tests.storage.conftest import ENGINES
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn
from tests.support.postgres import TestPostgres
from tests.support.sqlite_lock import sqlite_file_locked

pytestmark = pytest.mark.slow  # replicas per test, leases waited out

BODY = {"message": "hi", "context_type": "knowledge"}


@pytest.fixture(params=ENGINES)
async def database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[dict[str, str]]:
    """The environment that points a replica at one shared database of each engine."""
    if request.param == "sqlite":
        yield {"AGENT_DB_PATH": str(tmp_path / "shared.sqlite3")}
    else:
        server: TestPostgres = request.getfixturevalue("pg_server")
        with server.database() as url:
            # PostgreSQL replicas share a key the database does not hold (app/keyring.py).
            yield {"AGENT_DATABASE_URL": url, "AGENT_DB_PATH": str(tmp_path / "unused.sqlite3"),
                   "AGENT_SECRET_KEY": "replicas-share-this-key-0123456789"}


def replica_settings(db: dict[str, str], **env: str) -> Settings:
    return Settings.from_env({
        **db,
        "AGENT_MANDATORY_CONTEXTS": "none",
        "AGENT_INGEST_SAMPLE_KB": "false",
        "AGENT_EMBEDDER": "none",
        "OLLAMA_HOST": "http://127.0.0.1:9",
        **env,
    })


async def replica(stack: AsyncExitStack, settings: Settings, turn: Callable[[Any, int], GatedTurn],
                  **overrides: Any) -> tuple[str, Any]:
    provider = GatedProvider(turn)
    return await stack.enter_async_context(
        running_app(settings, provider=provider, registry=ToolRegistry(), embedder=None, **overrides))


def quick(_request: Any, _i: int) -> GatedTurn:
    return GatedTurn(steps=("Quick answer",))


# --- stream tokens -----------------------------------------------------------------------


def rsa_identity(tmp_path: Path) -> tuple[Path, Callable[[str], dict[str, str]]]:
    """An identity provider's key pair: the public PEM the replicas verify with (no
    shared HMAC secret they could sign stream tokens with), and a bearer-token maker."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = tmp_path / "idp.pem"
    pem.write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))

    def bearer(sub: str) -> dict[str, str]:
        token = jwt.encode({"sub": sub, "exp": int(time.time()) + 600}, key, algorithm="RS256")
        return {"Authorization": f"Bearer {token}"}

    return pem, bearer


async def finished_run(client: httpx.AsyncClient, base: str, app: Any, headers: dict[str, str]) -> str:
    """Start a run on one replica, wait until its log is stored; its ``stream_url``."""
    created = await client.post(f"{base}/v1/agent/runs", json=BODY, headers=headers)
    assert created.status_code == 201, created.text
    svc = app.state.services
    run = svc.runs.get(created.json()["run_id"])
    await asyncio.wait_for(run.wait_finished(), 10)
    await svc.storage.db.flush()
    return str(created.json()["stream_url"])


async def test_a_stream_url_from_one_replica_is_accepted_by_another(
    database: dict[str, str], tmp_path: Path
) -> None:
    pem, bearer = rsa_identity(tmp_path)
    jwt_env = {"AGENT_AUTH": "jwt", "AGENT_JWT_PUBLIC_KEY": str(pem)}
    async with AsyncExitStack() as stack:
        (a, app_a), (b, app_b) = [await replica(stack, replica_settings(database, **jwt_env), quick) for _ in "ab"]
        (elsewhere, _) = await replica(
            stack, replica_settings({"AGENT_DB_PATH": str(tmp_path / "other.sqlite3")}, **jwt_env), quick)
        client = await stack.enter_async_context(httpx.AsyncClient(timeout=30))
        from_a = await finished_run(client, a, app_a, bearer("alice"))
        from_b = await finished_run(client, b, app_b, bearer("alice"))
        for base, url in [(b, from_a), (a, from_b)]:
            events = await collect_sse(client, "GET", base + url)  # no Authorization: the token alone
            assert [e.event for e in events][-1] == "message_complete"
        # The key is the database's: a replica on another database refuses the link (the
        # run is unknown there too, but the token is refused first).
        refused = await client.get(elsewhere + from_a)
        assert refused.status_code == 401 and refused.json()["error"] == "unauthenticated"


async def test_a_configured_stream_token_secret_is_used_as_it_is(tmp_path: Path) -> None:
    pem, bearer = rsa_identity(tmp_path)
    env = {"AGENT_AUTH": "jwt", "AGENT_JWT_PUBLIC_KEY": str(pem), "AGENT_STREAM_TOKEN_SECRET": "s" * 32}
    async with AsyncExitStack() as stack:
        (a, app_a) = await replica(stack, replica_settings({"AGENT_DB_PATH": str(tmp_path / "a.db")}, **env), quick)
        (b, _) = await replica(stack, replica_settings({"AGENT_DB_PATH": str(tmp_path / "b.db")}, **env), quick)
        client = await stack.enter_async_context(httpx.AsyncClient(timeout=30))
        url = await finished_run(client, a, app_a, bearer("alice"))
        # Another database, the same configured secret: the token verifies (the run is
        # not there, so the answer is 404, not 401).
        response = await client.get(b + url)
        assert response.status_code == 404 and response.json()["error"] == "not_found"


# --- lease metrics -------------------------------------------------------------------------


def metrics_of(body: str) -> dict[str, float]:
    """``name{labels}`` → value, read with Prometheus' own parser."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            out[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return out


async def scrape(client: httpx.AsyncClient, base: str) -> dict[str, float]:
    response = await client.get(f"{base}/metrics")
    assert response.status_code == 200
    return metrics_of(response.text)


async def until(check: Callable[[], Any], what: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_lease_and_take_over_metrics(database: dict[str, str]) -> None:
    gate = Gate()

    def turn(_request: Any, i: int) -> GatedTurn:
        return GatedTurn(steps=("held ", gate, "answer")) if i == 1 else GatedTurn(steps=("taken over",))

    settings = replica_settings(database, AGENT_RUN_LEASE_S="1")
    target = settings.database_url or settings.db_path
    async with AsyncExitStack() as stack:
        base, app = await replica(stack, settings, turn, shutdown_deadline_s=0.05)
        svc = app.state.services
        # Another process on the same database (a replica that is about to die).
        other = await open_storage(target)
        stack.push_async_callback(other.close)
        client = await stack.enter_async_context(httpx.AsyncClient(timeout=30))
        before = await scrape(client, base)
        assert before["agentchat_runs_taken_over_total"] == 0
        assert before["agentchat_run_leases_held"] == 0

        # 1. The dead replica's run: its lease expires, this replica carries it on.
        chat = ChatInput("from a dead replica", "knowledge", {})
        await other.runs.create(NewRun(
            id="run_dead", conversation_id="conv_dead", user_id=LOCAL_USER, context_type="knowledge",
            input=encode_run_input(chat, Caller(LOCAL_USER)), lease_owner="dead-replica", lease_s=0.05))

        async def taken() -> bool:
            run = svc.runs.get("run_dead")
            return run is not None and run.finished

        await until(taken, "the dead replica's run to be taken over and finished")
        after = await scrape(client, base)
        assert after["agentchat_runs_taken_over_total"] == 1
        assert after["agentchat_run_takeover_latency_seconds_count"] == 1
        assert 0 < after["agentchat_run_takeover_latency_seconds_sum"] < 15
        assert svc.runs.get("run_dead").status == "completed"

        # 2. A run of this replica, held at a gate: one lease held.
        created = await client.post(f"{base}/v1/agent/runs", json=BODY)
        assert created.status_code == 201
        run_id = created.json()["run_id"]
        await asyncio.wait_for(gate.reached.wait(), 10)
        assert (await scrape(client, base))["agentchat_run_leases_held"] == 1

        # 3. Another replica takes it (this one looked paused): the lease is lost here.
        stolen: list[str] = []

        async def steal() -> bool:  # (a row this replica is writing is skipped: try again)
            stolen.extend(r.id for r in await other.runs.claim("thief", 60, expired_only=False))
            return bool(stolen)

        await until(steal, "the other replica to take the run")
        assert stolen == [run_id]

        async def lost() -> bool:
            return (await scrape(client, base))["agentchat_run_leases_lost_total"] == 1

        await until(lost, "this replica to notice it lost the lease")
        assert (await scrape(client, base))["agentchat_run_leases_held"] == 0
        gate.open()

        # 4. Shutdown hands the leases of live runs back.
        held = Gate()
        svc.agent.provider.turns = lambda _r, _i: GatedTurn(steps=("held again ", held))
        again = await client.post(f"{base}/v1/agent/runs", json={**BODY, "message": "again"})
        assert again.status_code == 201
        await asyncio.wait_for(held.reached.wait(), 10)
        assert (await scrape(client, base))["agentchat_run_leases_released_total"] == 0
    # (the app has stopped: its registry is still readable)
    assert metrics_of(svc.metrics_body().decode())["agentchat_run_leases_released_total"] == 1


async def test_a_failed_lease_renewal_is_counted_and_the_run_goes_on(tmp_path: Path) -> None:
    """Another process holds the SQLite file's write lock: renewals fail (counted in
    ``agentchat_run_lease_renewals_failed_total``); once it lets go, the lease is renewed
    and the run — still this process's — finishes normally."""
    gate = Gate()
    db = {"AGENT_DB_PATH": str(tmp_path / "locked.sqlite3")}
    settings = replica_settings(db, AGENT_RUN_LEASE_S="1", AGENT_DB_WRITE_RETRY_S="0.2")
    async with AsyncExitStack() as stack:
        base, app = await replica(stack, settings, lambda _r, _i: GatedTurn(steps=("held ", gate, "done")))
        client = await stack.enter_async_context(httpx.AsyncClient(timeout=30))
        created = await client.post(f"{base}/v1/agent/runs", json=BODY)
        assert created.status_code == 201
        run = app.state.services.runs.get(created.json()["run_id"])
        await asyncio.wait_for(gate.reached.wait(), 10)
        assert (await scrape(client, base))["agentchat_run_lease_renewals_failed_total"] == 0
        async with sqlite_file_locked(db["AGENT_DB_PATH"]):

            async def failed() -> bool:
                return (await scrape(client, base))["agentchat_run_lease_renewals_failed_total"] >= 1

            await until(failed, "a renewal to fail while the file is locked")
        gate.open()
        await asyncio.wait_for(run.wait_finished(), 15)
        assert run.status == "completed"
        assert (await scrape(client, base))["agentchat_run_leases_lost_total"] == 0
