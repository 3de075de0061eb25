"""Deleting a conversation from one replica while its run is live on another (issue 25
item 1), on a SQLite file shared by two apps and on PostgreSQL: the run is cancelled
where it executes, ends once, and nothing of the conversation is left for either replica."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from typing import Any

import httpx
import orjson
import pytest

from tests.storage.test_replica_ops_app import replica, replica_settings
from tests.support.gated_provider import Gate, GatedTurn

pytestmark = pytest.mark.slow  # two replicas per test


async def test_delete_on_one_replica_cancels_the_run_on_the_other(shared_db: dict[str, str]) -> None:
    gate = Gate()

    def held(_request: Any, _i: int) -> GatedTurn:
        return GatedTurn(steps=("Partial ", gate, "never sent"))

    async with AsyncExitStack() as stack:
        a, app_a = await replica(stack, replica_settings(shared_db), held)
        b, app_b = await replica(stack, replica_settings(shared_db), held)
        http = await stack.enter_async_context(httpx.AsyncClient(timeout=30))
        body = {"message": "hi", "context_type": "knowledge", "conversation_id": "shared-conv"}
        created = await http.post(f"{a}/v1/agent/runs", json=body)
        assert created.status_code == 201, created.text
        run_id = created.json()["run_id"]
        run = app_a.state.services.runs.get(run_id)
        await asyncio.wait_for(gate.reached.wait(), 10)

        deleted = await http.delete(f"{b}/v1/agent/conversations/shared-conv")
        assert deleted.status_code == 204, deleted.text
        await asyncio.wait_for(run.wait_finished(), 10)
        assert run.status == "cancelled"
        assert [e.event for e in run.events].count("message_complete") == 1
        assert orjson.loads(run.events[-1].data)["status"] == "cancelled"
        for base in (a, b):
            assert (await http.get(f"{base}/v1/agent/conversations/shared-conv")).status_code == 404
            assert (await http.get(f"{base}/v1/agent/runs/{run_id}")).status_code == 404
            # A still remembers the run it executed: its replay is refused all the same.
            assert (await http.get(f"{base}/v1/agent/runs/{run_id}/events")).status_code == 404
            assert (await http.get(f"{base}/v1/agent/conversations")).json()["conversations"] == []
        await app_a.state.services.storage.db.flush()
        assert await app_b.state.services.run_store.get(run_id) is None
        assert await app_b.state.services.run_store.events_after(run_id, 0) == []
