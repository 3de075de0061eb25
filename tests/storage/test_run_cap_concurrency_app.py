"""The per-user run cap holds under concurrency (issue 21, item 4): 50 simultaneous
requests of one user over two replicas on one database of each engine, with the default
cap of 8 — exactly 8 runs are admitted, the rest get 429 ``too_many_runs``.

(Before, the cap was a read ahead of the insert, so concurrent requests all saw free
slots: 22, 50 and 26 of 50 were admitted.)"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from typing import Any

import httpx

from storage.records import UNFINISHED
from tests.storage.test_replica_ops_app import BODY, replica, replica_settings
from tests.support.gated_provider import Gate, GatedTurn

REQUESTS = 50
DEFAULT_CAP = 8


async def test_fifty_concurrent_requests_over_two_replicas_admit_exactly_the_cap(
    shared_db: dict[str, str],
) -> None:
    gate = Gate()

    def held(_request: Any, _i: int) -> GatedTurn:
        return GatedTurn(steps=("held ", gate, "done"))

    async with AsyncExitStack() as stack:
        apps = [await replica(stack, replica_settings(shared_db), held) for _ in "ab"]
        assert apps[0][1].state.services.settings.max_runs_per_user == DEFAULT_CAP
        client = await stack.enter_async_context(
            httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=REQUESTS)))
        answers = await asyncio.gather(*(
            client.post(f"{apps[i % 2][0]}/v1/agent/runs", json=BODY) for i in range(REQUESTS)))
        admitted = [(i % 2, r.json()["run_id"]) for i, r in enumerate(answers) if r.status_code == 201]
        refused = [r for r in answers if r.status_code != 201]
        assert len(admitted) == DEFAULT_CAP, [r.status_code for r in answers]
        assert {(r.status_code, r.json()["error"]) for r in refused} == {(429, "too_many_runs")}
        assert all(r.headers["retry-after"] for r in refused)
        store = apps[0][1].state.services.run_store
        stored = [await store.get(run_id) for _, run_id in admitted]
        assert all(s is not None and s.status in UNFINISHED for s in stored)

        gate.open()
        # Replica b admits from the store: a run it did not carry counts until its ending
        # is *stored*, which is after it is finished in memory on its replica (the ending
        # is queued to the writer; ``wait_finished`` returns before it commits). Wait for
        # what the last request needs - every ending stored - not for the runs to finish.
        for replica_i, run_id in admitted:
            run = apps[replica_i][1].state.services.runs.get(run_id)
            if run is not None:  # else already forgotten here: its log is in the store
                await asyncio.wait_for(run.wait_settled(), 20)
        stored = [await store.get(run_id) for _, run_id in admitted]
        assert all(s is not None and s.status not in UNFINISHED for s in stored), [s and s.status for s in stored]
        again = await client.post(f"{apps[1][0]}/v1/agent/runs", json=BODY)
        assert again.status_code == 201, again.text
