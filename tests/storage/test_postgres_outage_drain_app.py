"""A replica shutting down hands back the lease of a run it let go for a PostgreSQL
outage, when the database answers by then.

A run whose durable write the store gave up on is let go (``Run._suspend``): its lease
is no longer renewed, and a claim carries it on once it lapses. A replica stopping in
the meantime released the leases of the runs it was executing (``app.runs.drain``) but
not that copy's (it is ``lost``), so another replica had to wait for the lease to lapse
(up to ``0.7 × AGENT_RUN_LEASE_S``) though nobody would renew it.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import psycopg

from tests.storage.test_postgres_outage_app import relayed_url
from tests.storage.test_postgres_outage_runs_app import let_go, settings_for
from tests.support.deadline import until
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn
from tests.support.server import serve_app
from tests.support.tcp_cut import CuttableRelay

__all__ = ["relayed_url"]  # the fixture, used by name

#: Long enough that the copy let go still holds its lease when the replica stops.
LEASE_S = 60.0


async def test_a_replica_stopping_releases_the_lease_of_a_run_it_let_go(
    relayed_url: tuple[str, CuttableRelay], tmp_path: Path
) -> None:
    from app.factory import create_app

    url, relay = relayed_url
    gate = Gate()
    provider = GatedProvider([GatedTurn(steps=("before the outage ", gate, "during the outage"))])
    app = create_app(settings_for(url, tmp_path, AGENT_RUN_LEASE_S=str(LEASE_S)), provider=provider)
    async with serve_app(app) as base, httpx.AsyncClient(base_url=base, timeout=30) as client:
        started = await client.post("/v1/agent/runs", json={"message": "hello", "context_type": "workflow"})
        assert started.status_code == 201, started.text
        run_id = started.json()["run_id"]
        counters = app.state.services.runs.counters
        await let_go(app, relay, gate)
        relay.restore()

        async def ready() -> bool:
            return (await client.get("/readyz")).status_code == 200

        await until(ready, "the database back", 30, step=0.1)
        leases = app.state.services.runs.leases
        await until(leases.store_answers, "the lease upkeep to reach the database again", 30, step=0.1)
        assert counters.taken_over == 0, "claimed before the stop: its lease lapsed already"
    # The replica has stopped (its drain ran as the server shut down).
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute("SELECT status, lease_until FROM runs WHERE id = %s", (run_id,))
        row = await cur.fetchone()
    assert row is not None and row[0] == "running", row
    assert row[1] is None, "the lease of the run let go was kept: another replica waits for it to lapse"


async def test_a_run_let_go_and_taken_over_elsewhere_is_not_counted_as_handed_back(
    relayed_url: tuple[str, CuttableRelay], tmp_path: Path
) -> None:
    """The copy let go is still here when the replica stops, but its lease lapsed and a
    sibling claimed the run meanwhile: ``release_leases`` leaves the sibling's row alone,
    and ``agentchat_run_leases_released_total`` must not count it (it counted every id it
    was given: 1 for none handed back)."""
    from app.factory import create_app

    url, relay = relayed_url
    gate = Gate()
    provider = GatedProvider([GatedTurn(steps=("before the outage ", gate, "during the outage"))])
    app = create_app(settings_for(url, tmp_path, AGENT_RUN_LEASE_S=str(LEASE_S)), provider=provider)
    async with serve_app(app) as base, httpx.AsyncClient(base_url=base, timeout=30) as client:
        started = await client.post("/v1/agent/runs", json={"message": "hello", "context_type": "workflow"})
        assert started.status_code == 201, started.text
        run_id = started.json()["run_id"]
        counters = app.state.services.runs.counters
        await until(gate.reached.is_set, "the run mid-answer", 30)
        relay.cut()
        gate.open()
        await until(lambda: counters.outage_suspended >= 1, "the run let go for the outage", 60)
        relay.restore()
        leases = app.state.services.runs.leases
        await until(leases.store_answers, "the lease upkeep to reach the database again", 30, step=0.1)
        async with await psycopg.AsyncConnection.connect(url) as conn:  # a sibling's claim, once the lease lapsed
            claimed = await conn.execute(
                "UPDATE runs SET lease_owner = 'sibling', lease_until = extract(epoch FROM now()) + 600, "
                "lease_epoch = lease_epoch + 1 WHERE id = %s AND lease_owner = %s",
                (run_id, leases.owner_id),
            )
            assert claimed.rowcount == 1, "the run was not this replica's to be claimed from"
        assert counters.taken_over == 0
        assert counters.leases_released == 0
    # The replica has stopped (its drain ran as the server shut down).
    assert counters.leases_released == 0, "a lease held by another replica was counted as handed back"
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute("SELECT lease_owner, lease_until FROM runs WHERE id = %s", (run_id,))
        row = await cur.fetchone()
    assert row is not None and row[0] == "sibling" and row[1] is not None, row
