"""A run queued behind another turn of its conversation (``multitask: enqueue``) and
cancelled before it began still keeps the event contract: ``run_started`` first, then
exactly one ``message_complete`` (cancelled) — and its user message is kept.

Served by real uvicorn on loopback; the first turn waits at a gate, so the second is
provably still queued when it is cancelled.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from tests.support.procs import follow, until
from tests.test_durability_concurrency import (
    HeldModel,
    answer_to,
    conversation,
    serving,
    settings_for,
    traces_for,
    turns_of,
)


async def test_a_cancelled_queued_run_starts_with_run_started(tmp_path: Path) -> None:
    model = HeldModel()
    conversation_id = f"conv-queued-{uuid.uuid4().hex[:8]}"
    body = {"context_type": "knowledge", "conversation_id": conversation_id, "multitask": "enqueue"}
    async with serving(settings_for(tmp_path), model) as (base, http):
        first = await http.post("/v1/agent/runs", json={**body, "message": "the first turn"})
        assert first.status_code == 201, first.text
        await until(lambda: len(model.requests) == 1, "the first turn at the model", 10)
        second = await http.post("/v1/agent/runs", json={**body, "message": "the queued turn"})
        assert second.status_code == 201, second.text
        queued_id = second.json()["run_id"]
        cancelled = await http.post(f"/v1/agent/runs/{queued_id}/cancel")
        assert cancelled.status_code in (200, 202), cancelled.text
        queued_trace, first_trace = traces_for([second.json(), first.json()])
        await follow(http, base, queued_trace, deadline_s=30, headers={})
        model.gate.open()
        await follow(http, base, first_trace, deadline_s=30, headers={})
        messages = await conversation(http, conversation_id)

    names = queued_trace.names()
    assert names == ["run_started", "message_complete"], queued_trace.frames
    started = json.loads(queued_trace.frames[0][2])
    assert started == {"run_id": queued_id, "conversation_id": conversation_id}
    assert [f[0] for f in queued_trace.frames] == ["1", "2"]
    assert queued_trace.final_status == "cancelled"
    assert first_trace.final_status == "completed"
    assert len(model.requests) == 1  # the queued turn never reached the model
    users = [text for role, text in turns_of(messages) if role == "user"]
    assert sorted(users) == ["the first turn", "the queued turn"]
    assert ("assistant", answer_to("the first turn")) in turns_of(messages)
