"""A run let go for a PostgreSQL outage with its ending unstored still counts as unfinished.

A run whose durable write the store gave up on is let go (``Run._suspend``): what was
never stored is dropped, and a claim carries the run on once the database is back. When
the dropped step held the run's ending, the copy let go here kept ``finished_at``, so
until the claim replaced it (its lease lapses first) or the sweep forgot it, it looked
ended to whoever asked this replica: the per-user run cap's read before a write
(``Admission.active_runs`` through ``RunRegistry.finished_here``) did not count it though
the store holds it unfinished, so a face that imports a client's earlier turns before
the run's admission (the AI SDK's) imported them for a run the admission then refused
with 429, and the imported conversation was left behind.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.conftest import collect_sse
from tests.storage.test_postgres_outage_app import relayed_url
from tests.storage.test_postgres_outage_runs_app import let_go, settings_for
from tests.support.deadline import until
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn
from tests.support.server import serve_app
from tests.support.tcp_cut import CuttableRelay

__all__ = ["relayed_url"]  # the fixture, used by name

#: Long enough that the copy let go is still the one this replica holds (its lease not
#: lapsed, so not claimed yet) when the database is back and the next request comes.
LEASE_S = 20.0

EARLIER = [
    {"id": "u0", "role": "user", "parts": [{"type": "text", "text": "first question"}]},
    {"id": "a0", "role": "assistant", "parts": [{"type": "text", "text": "first answer"}]},
    {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "second question"}]},
]


async def test_a_run_let_go_with_its_ending_unstored_counts_against_the_run_cap(
    relayed_url: tuple[str, CuttableRelay], tmp_path: Path
) -> None:
    from app.factory import create_app

    url, relay = relayed_url
    settings = settings_for(url, tmp_path, AGENT_RUN_LEASE_S=str(LEASE_S), AGENT_MAX_RUNS_PER_USER="1")
    gate = Gate()
    provider = GatedProvider([
        GatedTurn(steps=("before the outage ", gate, "ended during the outage")),
        GatedTurn(steps=("carried on after the outage",)),
        GatedTurn(steps=("the next chat",)),
    ])
    app = create_app(settings, provider=provider)
    async with serve_app(app) as base, httpx.AsyncClient(base_url=base, timeout=30) as client:
        started = await client.post("/v1/agent/runs", json={"message": "hello", "context_type": "workflow"})
        assert started.status_code == 201, started.text
        run_id = started.json()["run_id"]
        counters = app.state.services.runs.counters
        await let_go(app, relay, gate)  # the answer ends while nothing can be stored: its ending is dropped
        relay.restore()

        async def ready() -> bool:
            return (await client.get("/readyz")).status_code == 200

        await until(ready, "the database back", 30, step=0.1)

        # The store holds the run unfinished, and it is carried on: the user is at the cap.
        ui = await client.post("/v1/agent/ui-stream", json={"id": "chat-at-cap", "messages": EARLIER})
        imported = await client.get("/v1/agent/conversations/chat-at-cap")
        assert counters.taken_over == 0, "claimed before the request: the copy let go was not what it read"

        async def completed() -> bool:
            got = await client.get(f"/v1/agent/runs/{run_id}")
            return got.status_code == 200 and got.json()["status"] == "completed"

        await until(completed, "the run carried on to its ending once its lease lapsed", 60, step=0.1)
        log = await collect_sse(client, "GET", f"/v1/agent/runs/{run_id}/events")

    assert (ui.status_code, ui.json().get("error")) == (429, "too_many_runs"), (ui.status_code, ui.text)
    assert imported.status_code == 404, "the earlier turns were imported for a run refused at the cap"
    endings = [e.json()["status"] for e in log if e.event == "message_complete"]
    assert endings == ["completed"], endings
