"""Deleting a conversation whose run is parked for an approval (issue 25 items 1 and 3
together): the parked run is cancelled — the call it waited on never runs — and the
conversation is gone, its run with it."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.conftest import collect_sse
from tests.test_approvals import ALICE, ASK, BOB, cancel_call, desk_world, parked, say


async def test_delete_cancels_a_run_waiting_for_approval(tmp_path: Path) -> None:
    async with desk_world(tmp_path) as w:
        w.fake.add_turn(cancel_call)
        w.fake.add_turn(say("never said"))
        async with httpx.AsyncClient(base_url=w.base, timeout=60) as http:
            body = {"message": ASK, "context_type": "workflow", "conversation_id": "parked"}
            events = await collect_sse(http, "POST", "/v1/agent/chat", json=body, headers=ALICE)
            parked(events)
            run_id = events[0].json()["run_id"]
            assert (await http.get(f"/v1/agent/runs/{run_id}", headers=ALICE)).json()["status"] == (
                "waiting_approval"
            )
            assert (await http.delete("/v1/agent/conversations/parked", headers=BOB)).status_code == 404
            deleted = await http.delete("/v1/agent/conversations/parked", headers=ALICE)
            assert deleted.status_code == 204, deleted.text
            assert (await http.get(f"/v1/agent/runs/{run_id}", headers=ALICE)).status_code == 404
            assert (await http.get("/v1/agent/conversations", headers=ALICE)).json()["conversations"] == []
        assert await w.app.state.services.run_store.get(run_id) is None
    assert [name for name, _ in w.desk.calls if name == "cancel_order"] == []
