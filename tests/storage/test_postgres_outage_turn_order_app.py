"""A conversation's next turn waits for a run let go for a PostgreSQL outage.

A run whose durable write the store gave up on during an outage is let go
(``Run._suspend``: ``lost``) and carried on by a claim once the database is back. A
later turn of its conversation, queued behind it on the same replica, waited on the
copy here (``Run.wait_settled``), which returns as soon as the copy is let go: the later
turn's agent started while the earlier one had not ended, and once both were claimed
the earlier turn's new copy waited for the later one (``RunCarrier.carry_on``): the later
turn must start only once the earlier one's ending is stored, and see its answer in the
history, and the earlier one's claim here must not wait for it.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from llm.types import ChatRequest
from tests.storage.test_postgres_outage_app import relayed_url
from tests.storage.test_postgres_outage_runs_app import settings_for
from tests.support.deadline import until
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn, last_user_text
from tests.support.server import serve_app
from tests.support.tcp_cut import CuttableRelay

__all__ = ["relayed_url"]  # the fixture, used by name


@pytest.mark.parametrize("let_go", ["with its ending unstored", "mid-answer"])
async def test_a_turn_queued_behind_a_run_let_go_for_an_outage_waits_for_its_ending(
    relayed_url: tuple[str, CuttableRelay], tmp_path: Path, let_go: str
) -> None:
    """``with its ending unstored``: the first answer ends during the outage, its ending
    dropped with the copy let go here; ``mid-answer``: a chunk's write is given up while the
    answer waits at a second gate, the copy let go is unfinished (its claim here must
    not wait for it)."""
    from app.factory import create_app

    url, relay = relayed_url
    gate, never = Gate(), Gate()
    tail: tuple[str | Gate, ...] = ("first, after the outage",)
    if let_go == "mid-answer":
        tail = ("first, during the outage ", never, "first, after the outage")
    first_answers = 0

    def turn(request: ChatRequest, index: int) -> GatedTurn:
        nonlocal first_answers
        if last_user_text(request) == "first":
            first_answers += 1
            if first_answers == 1:
                return GatedTurn(steps=("first, before the outage ", gate, *tail))
            return GatedTurn(steps=("first, carried on",))
        return GatedTurn(steps=("second answered",))

    provider = GatedProvider(turn)
    app = create_app(settings_for(url, tmp_path), provider=provider)
    async with serve_app(app) as base, httpx.AsyncClient(base_url=base, timeout=30) as client:
        first = await client.post("/v1/agent/runs", json={"message": "first", "context_type": "workflow"})
        assert first.status_code == 201, first.text
        first_id, conversation_id = first.json()["run_id"], first.json()["conversation_id"]
        await until(gate.reached.is_set, "the first run mid-answer", 30)
        second = await client.post(
            "/v1/agent/runs",
            json={"message": "second", "context_type": "workflow", "conversation_id": conversation_id},
        )
        assert second.status_code == 201, second.text
        second_id = second.json()["run_id"]
        counters = app.state.services.runs.counters

        relay.cut()
        gate.open()  # the first answer goes on while nothing can be stored
        await until(lambda: counters.outage_suspended >= 1, "the first run let go for the outage", 60)
        relay.restore()

        async def ended(run_id: str) -> bool:
            got = await client.get(f"/v1/agent/runs/{run_id}")
            return got.status_code == 200 and got.json()["status"] not in ("queued", "running")

        await until(lambda: ended(first_id), "the first run carried on to its ending", 60, step=0.1)
        await until(lambda: ended(second_id), "the second run ended", 60, step=0.1)
        statuses = [(await client.get(f"/v1/agent/runs/{rid}")).json()["status"] for rid in (first_id, second_id)]

    assert statuses == ["completed", "completed"], statuses
    asked = [last_user_text(r) for r in provider.requests]
    assert asked.count("second") == 1, asked
    second_request = provider.requests[asked.index("second")]
    assert asked.index("second") > max(i for i, q in enumerate(asked) if q == "first"), (
        f"the second turn was answered before the first ended: {asked}"
    )
    history = [m.content for m in second_request.messages if m.role == "assistant"]
    assert any("first" in (text or "") for text in history), (
        f"the second turn did not see the first one's answer: {history}"
    )
