"""An acknowledged run outlives a PostgreSQL outage longer than the writer's retry window.

Found walking two replicas through a 40 s PostgreSQL stop: 4 of 8 acknowledged runs
ended ``storage_unavailable`` — their writes were given up after
``AGENT_DB_WRITE_RETRY_S`` and the run ended itself — though "nothing acknowledged is
ever lost". Now such a run is let go without an ending (``Run._suspend``): its lease
lapses, and once the database is back a claim carries it on from its last checkpoint.
A client that followed it and reconnects by ``Last-Event-ID`` sees every event once and
exactly one ending, ``completed``.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import httpx

from app.config import Settings
from tests.conftest import collect_sse
from tests.storage.test_postgres_outage_app import relayed_url
from tests.support.deadline import until
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn
from tests.support.server import serve_app
from tests.support.tcp_cut import CuttableRelay

__all__ = ["relayed_url"]  # the fixture, used by name

#: The writer gives up this soon: the outage below outlasts it many times over.
WRITE_RETRY_S = 0.5
LEASE_S = 2.0


def settings_for(url: str, tmp_path: Path, **extra: str) -> Settings:
    """The app on PostgreSQL at ``url`` whose writer gives up after ``WRITE_RETRY_S``;
    ``extra``: a test's other settings."""
    return Settings.from_env({
        "AGENT_DATABASE_URL": url,
        "AGENT_SECRET_KEY": "replicas-share-this-key-0123456789",
        "AGENT_DB_PATH": str(tmp_path / "unused.sqlite3"),
        "AGENT_DB_POOL_TIMEOUT_S": "3",
        "AGENT_DB_WRITE_RETRY_S": str(WRITE_RETRY_S),
        "AGENT_RUN_LEASE_S": str(LEASE_S),
        "AGENT_INGEST_SAMPLE_KB": "false",
        "AGENT_EMBEDDER": "hashing",
        "OLLAMA_HOST": "http://127.0.0.1:9",
        **extra,
    })


def outage_provider(gate: Gate, *, ending: str = "after the outage") -> GatedProvider:
    """A model whose answer waits at ``gate`` after its first words (the outage begins
    there), ends with ``ending``, and whose next turn carries the run on after it."""
    return GatedProvider([
        GatedTurn(steps=("before the outage ", gate, ending)),
        GatedTurn(steps=("carried on after the outage",)),
    ])


async def let_go(app: Any, relay: CuttableRelay, gate: Gate) -> None:
    """Cut the database away from a run once it waits at ``gate`` and let the answer go on:
    the writes it cannot store are given up, and the run is let go for the outage."""
    counters = app.state.services.runs.counters
    await until(gate.reached.is_set, "the run mid-answer", 30)
    relay.cut()
    gate.open()
    await until(lambda: counters.outage_suspended >= 1, "the run let go for the outage", 60)


async def test_a_run_whose_writes_were_given_up_is_carried_on_once_the_database_is_back(
    relayed_url: tuple[str, CuttableRelay], tmp_path: Path
) -> None:
    from app.factory import create_app

    url, relay = relayed_url
    gate = Gate()
    app = create_app(settings_for(url, tmp_path), provider=outage_provider(gate))
    async with serve_app(app) as base, httpx.AsyncClient(base_url=base, timeout=30) as client:
        started = await client.post("/v1/agent/runs", json={"message": "hello", "context_type": "workflow"})
        assert started.status_code == 201, started.text
        run_id, stream_url = started.json()["run_id"], started.json()["stream_url"]
        counters = app.state.services.runs.counters

        seen = await collect_sse(
            client, "GET", stream_url, stop=lambda e: e.event == "content_chunk" and "before" in e.data
        )
        assert gate.reached.is_set()
        await let_go(app, relay, gate)  # the answer goes on while nothing can be stored
        assert counters.storage_failures == 0, "the run was ended for the outage"
        relay.restore()

        async def completed() -> bool:
            got = await client.get(f"/v1/agent/runs/{run_id}")
            return got.status_code == 200 and got.json()["status"] == "completed"

        await until(completed, "the run carried on to its ending once the database is back", 60, step=0.1)
        last_id = [e.id for e in seen if e.id is not None][-1]
        rest = await collect_sse(client, "GET", f"/v1/agent/runs/{run_id}/events", headers={"Last-Event-ID": last_id})

    shown = [e for e in [*seen, *rest] if e.id is not None]
    ids = [int(e.id) for e in shown if e.id is not None]
    assert ids == list(range(1, len(ids) + 1)), f"every event once, in order: {ids}"
    endings = [e for e in shown if e.event == "message_complete"]
    assert len(endings) == 1 and endings[0].json()["status"] == "completed", [e.data for e in endings]
    assert not [e for e in shown if e.event == "error"], [e.data for e in shown if e.event == "error"]
    assert any(e.event == "run_resumed" for e in shown), "the run was not carried on from its checkpoint"
    assert counters.taken_over >= 1


async def test_runs_on_two_replicas_outlive_an_outage_of_their_database(
    relayed_url: tuple[str, CuttableRelay], tmp_path: Path
) -> None:
    """The walk's case: every replica loses the database at once, each with a run in
    flight. Once it is back, each run is carried on (by either replica) to exactly one
    ending, ``completed``, its log numbered 1..n without a gap or a repeat."""
    from app.factory import create_app

    url, relay = relayed_url
    gates = [Gate(), Gate()]
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    apps = [
        create_app(
            settings_for(url, tmp_path / name),
            provider=GatedProvider([
                GatedTurn(steps=("before the outage ", gate, "after the outage")),
                *[GatedTurn(steps=("carried on after the outage",))] * 3,
            ]),
        )
        for name, gate in zip(("a", "b"), gates, strict=True)
    ]
    async with (
        serve_app(apps[0]) as base_a,
        serve_app(apps[1]) as base_b,
        httpx.AsyncClient(timeout=30) as client,
    ):
        run_ids = []
        for base in (base_a, base_b):
            started = await client.post(f"{base}/v1/agent/runs", json={"message": "hello", "context_type": "workflow"})
            assert started.status_code == 201, started.text
            run_ids.append(started.json()["run_id"])
        for gate in gates:
            await until(gate.reached.is_set, "a run mid-answer", 30)
        counters = [app.state.services.runs.counters for app in apps]

        relay.cut()
        for gate in gates:
            gate.open()
        await until(lambda: sum(c.outage_suspended for c in counters) >= 2, "both runs let go", 60)
        assert sum(c.storage_failures for c in counters) == 0, "a run was ended for the outage"
        relay.restore()

        async def completed(run_id: str) -> bool:
            got = await client.get(f"{base_a}/v1/agent/runs/{run_id}")
            return got.status_code == 200 and got.json()["status"] == "completed"

        for run_id in run_ids:
            await until(functools.partial(completed, run_id), f"{run_id} carried on to its ending", 60, step=0.1)
            log = await collect_sse(client, "GET", f"{base_b}/v1/agent/runs/{run_id}/events")
            ids = [int(e.id) for e in log if e.id is not None]
            assert ids == list(range(1, len(ids) + 1)), f"{run_id}: every event once, in order: {ids}"
            endings = [e.json()["status"] for e in log if e.event == "message_complete"]
            assert endings == ["completed"], (run_id, endings)
            assert not [e for e in log if e.event == "error"], (run_id, [e.data for e in log if e.event == "error"])
        assert sum(c.taken_over for c in counters) >= 2
