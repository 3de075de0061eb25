"""What a browser's EventSource following a run sees when the run is let go for a
PostgreSQL outage (``Run._suspend``) and carried on once the database is back.

The client is the npm ``eventsource`` package (the WHATWG EventSource), driven by
``tests/js/sse_client.mjs`` against a served app whose database sits behind a relay
this test cuts. Before, the follower was handed an id-less ``error``
(``storage_unavailable``) and its stream ended; EventSource reconnected after the
stream's ``retry:`` (2 s) with ``Last-Event-ID``, and while the database was still away
that reconnect was answered 503 — which EventSource never retries: it closed for good,
and the run, carried on to ``completed`` once the database was back, was never seen.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
import orjson
import psycopg
import pytest

from tests.storage.test_postgres_outage_app import relayed_url
from tests.storage.test_postgres_outage_runs_app import let_go, outage_provider, settings_for
from tests.storage.test_reattach_elsewhere_app import Reader
from tests.storage.test_replica_ops_app import quick, replica
from tests.support.deadline import until
from tests.support.gated_provider import Gate, GatedTurn
from tests.support.postgres import TestPostgres
from tests.support.server import serve_app
from tests.support.tcp_cut import CuttableRelay, cuttable_relay
from tests.test_sse_clients import has_chunk, js_client, node, run_events

__all__ = ["node", "relayed_url"]  # the fixtures, used by name

#: How long a request waits for a connection while the database is away (``settings_for``
#: says 3 s): each write the run retries, and each look the follower takes at the log,
#: fails after it - the same failure, sooner. The follower's five looks took ~12 s at 3 s.
POOL_TIMEOUT_S = "1"

EVENTS = ["run_started", "tool_selection", "message_start", "content_chunk", "tool_call_start",
          "tool_call_result", "response", "error", "heartbeat", "run_resumed", "message_complete"]


async def test_an_eventsource_following_a_run_let_go_for_an_outage_reads_it_to_its_end(
    relayed_url: tuple[str, CuttableRelay], tmp_path: Path, node: str
) -> None:
    from app.factory import create_app

    url, relay = relayed_url
    gate = Gate()
    provider = outage_provider(gate)
    app = create_app(
        settings_for(url, tmp_path, AGENT_HEARTBEAT_S="0.5", AGENT_DB_POOL_TIMEOUT_S=POOL_TIMEOUT_S), provider=provider
    )
    async with serve_app(app) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
        started = await http.post("/v1/agent/runs", json={"message": "hello", "context_type": "workflow"})
        assert started.status_code == 201, started.text
        run_id, stream_url = started.json()["run_id"], started.json()["stream_url"]
        async with js_client(node, client="eventsource", url=f"{base}{stream_url}", events=EVENTS) as client:
            await client.until(has_chunk("before the outage "), "the text before the gate")
            await let_go(app, relay, gate)  # the answer goes on while nothing can be stored
            # The database stays away past the stream's retry: (2 s): until the client
            # gave up, or has been kept (heartbeats every 0.5 s) for twice that.
            at_let_go = len(client.records)
            await client.until(
                lambda recs: _closed(recs) or _heartbeats(recs[at_let_go:]) >= 8, "the client kept or closed", 60
            )
            relay.restore()

            async def completed() -> bool:
                got = await http.get(f"/v1/agent/runs/{run_id}")
                return got.status_code == 200 and got.json()["status"] == "completed"

            await until(completed, "the run carried on to its ending once the database is back", 60, step=0.1)
            records = await client.finish()
    assert [r["kind"] for r in records].count("open") == 1, "the stream was ended: the client had to reconnect"
    events = run_events(records)
    assert not [m for m in events if m["event"] == "error"], [m["data"] for m in events if m["event"] == "error"]
    ids = [int(m["id"]) for m in events]
    assert ids == list(range(1, len(ids) + 1)), f"every event once, in order: {ids}"
    assert events[-1]["event"] == "message_complete", [m["event"] for m in events]
    assert orjson.loads(events[-1]["data"])["status"] == "completed"
    assert any(m["event"] == "run_resumed" for m in events)


def _closed(records: list[dict[str, Any]]) -> bool:
    """EventSource closed for good (readyState 2) or the script ended."""
    return any(r["kind"] == "done" or r.get("readyState") == 2 for r in records)


def _heartbeats(records: list[dict[str, Any]]) -> int:
    return sum(1 for r in records if r["kind"] == "message" and r["event"] == "heartbeat")


async def test_a_follower_kept_through_an_outage_does_not_log_a_warning_per_look(
    relayed_url: tuple[str, CuttableRelay], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The follower says once that it waits for the database; each look at the log it
    takes meanwhile (a new tail every ``outage_pause_s``: 2 s, 0.1 s here) is not a
    warning. Before, every failed look logged 'reading a run followed here failed' at
    WARNING: one line per follower every 2 s for as long as the outage lasted."""
    from app.factory import create_app

    caplog.set_level(logging.INFO, logger="agentchat.runs")
    url, relay = relayed_url
    gate = Gate()
    provider = outage_provider(gate)
    app = create_app(
        settings_for(url, tmp_path, AGENT_HEARTBEAT_S="0.2", AGENT_DB_POOL_TIMEOUT_S=POOL_TIMEOUT_S), provider=provider
    )
    async with serve_app(app) as base, httpx.AsyncClient(base_url=base, timeout=30) as http:
        remote = app.state.services.remote
        remote.outage_pause_s = 0.1
        started = await http.post("/v1/agent/runs", json={"message": "hello", "context_type": "workflow"})
        assert started.status_code == 201, started.text
        run_id = started.json()["run_id"]
        follower = Reader(http, "GET", f"/v1/agent/runs/{run_id}/events")
        await until(lambda: follower.saw("before the outage "), "the text before the gate", 30)
        await let_go(app, relay, gate)

        def waiting() -> bool:
            return any("waits for the database" in r.getMessage() for r in caplog.records)

        await until(waiting, "the follower to wait for the database", 60)
        looked = remote.log_reads
        await until(lambda: remote.log_reads >= looked + 5, "the follower to look at the log again", 60)
        assert _beats(follower.lines) > 0
        relay.restore()
        lines = await follower.finished()
    assert any('"status":"completed"' in ln for ln in lines), lines[-6:]
    looks = [r for r in caplog.records if r.levelno >= logging.WARNING and "followed here failed" in r.getMessage()]
    assert not looks, f"{len(looks)} warnings, one per look at the log"
    assert len([r for r in caplog.records if "waits for the database" in r.getMessage()]) == 1


def _beats(lines: list[str]) -> int:
    return sum(1 for ln in lines if ln == "event: heartbeat")


@pytest.fixture
async def direct_and_relayed(pg_server: TestPostgres) -> AsyncIterator[tuple[str, str, CuttableRelay]]:
    """One database, reached directly and through a relay the test cuts."""
    with pg_server.database() as url:
        params = psycopg.conninfo.conninfo_to_dict(url)
        async with cuttable_relay(str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432)) as relay:
            params["host"], params["port"] = "127.0.0.1", str(relay.port)
            yield url, "postgresql://{user}@{host}:{port}/{dbname}".format(**params), relay


async def test_a_follower_waiting_through_an_outage_ends_when_its_run_was_deleted_meanwhile(
    direct_and_relayed: tuple[str, str, CuttableRelay], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """B's follower of A's run waits while B cannot reach the database; meanwhile the run
    ends on A and its conversation is deleted. Once B reaches the database again the
    run's log never grows: before, the follower waited for ever (heartbeats until the
    client left); now it finds the run gone and its stream ends (a reconnect: 404)."""
    caplog.set_level(logging.INFO, logger="agentchat.runs")
    direct, relayed, relay = direct_and_relayed
    gate = Gate()
    held = GatedTurn(steps=("before the outage ", gate, "after the outage"))
    async with AsyncExitStack() as stack:
        a, app_a = await replica(stack, settings_for(direct, tmp_path, AGENT_HEARTBEAT_S="0.2"), lambda _r, _i: held)
        b, app_b = await replica(stack, settings_for(relayed, tmp_path, AGENT_HEARTBEAT_S="0.2"), quick)
        http = await stack.enter_async_context(httpx.AsyncClient(timeout=30))
        started = await http.post(f"{a}/v1/agent/runs", json={"message": "hello", "context_type": "workflow"})
        assert started.status_code == 201, started.text
        run_id, conversation_id = started.json()["run_id"], started.json()["conversation_id"]
        await until(gate.reached.is_set, "the run at the gate on A", 30)
        app_b.state.services.remote.outage_pause_s = 0.1
        follower = Reader(http, "GET", f"{b}/v1/agent/runs/{run_id}/events")
        await until(lambda: follower.saw("before the outage "), "B's follower to read the text before the gate", 30)
        relay.cut()  # B cannot reach the database; A can

        def waiting() -> bool:
            return any("waits for the database" in r.getMessage() for r in caplog.records)

        await until(waiting, "B's follower to wait for the database", 60)
        gate.open()
        run = app_a.state.services.runs.get(run_id)
        await until(lambda: run.finished and run.durable == len(run.events), "the run's ending stored on A", 30)
        deleted = await http.delete(f"{a}/v1/agent/conversations/{conversation_id}")
        assert deleted.status_code == 204, deleted.text
        relay.restore()
        lines = await follower.finished()
        assert not any("message_complete" in ln for ln in lines), "B made up an ending it never read"
        again = await http.get(f"{b}/v1/agent/runs/{run_id}/events")
    assert again.status_code == 404, again.text
