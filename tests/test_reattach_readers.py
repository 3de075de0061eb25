"""A keyless chat's re-attach timer counts every client that reads its run, whatever kind.

A chat without an ``Idempotency-Key`` (and every AI SDK or streamed OpenAI chat) is
cancelled when its last client leaves and none comes back within
``AGENT_CHAT_REATTACH_S`` (docs/http-api.md, "Retrying a chat": any client reading it,
``GET /v1/agent/runs/{run_id}/events`` included, holds it). Before, a reader of
``/events`` that attached after the chat's own client left and then left too reset
``last_detached_at`` without starting a timer: the chat's timer stood down, and the run
went on until the 600 s abandoned-run sweep.

Everything over a real uvicorn server on loopback; the model is a gated script that
never opens its gate, so only the timer can end the run.
"""

from __future__ import annotations

import asyncio

import httpx

from app.config import Settings
from tests.conftest import collect_sse, running_app
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn
from tests.support.sse import SSEEvent
from tests.test_chat_idempotency import BODY, chunk, registry, until

#: The re-attach window (s); the ending is awaited far longer than it, never timed.
WINDOW_S = 0.5
END_BOUND_S = 15.0


def first_id(events: list[SSEEvent]) -> str:
    """The run's id from its ``run_started`` - not the first event: at a 0.1 s heartbeat
    on a loaded machine a heartbeat can come before it (a CI failure: KeyError)."""
    return str(next(e for e in events if e.event == "run_started").json()["run_id"])


async def test_a_reader_that_comes_and_goes_after_the_chat_left_starts_the_timer_again(settings: Settings) -> None:
    gate = Gate()
    provider = GatedProvider([GatedTurn(["partial", gate, " never"])])
    async with (
        running_app(
            settings.with_(chat_reattach_s=WINDOW_S), provider=provider, registry=registry(), embedder=None
        ) as (base, app),
        httpx.AsyncClient(base_url=base, timeout=30) as client,
    ):
        seen = await collect_sse(client, "POST", "/v1/agent/chat", json=BODY, stop=chunk("partial"))
        run = app.state.services.runs.get(first_id(seen))
        await until(lambda: run.followers == 0, "the chat's client to leave")
        # A reader of /events attaches within the window and leaves again.
        read = await collect_sse(client, "GET", f"/v1/agent/runs/{run.id}/events", stop=chunk("partial"))
        assert read[-1].json()["chunk"] == "partial"
        await until(lambda: run.followers == 0, "the reader to leave")
        await asyncio.wait_for(run.wait_finished(), END_BOUND_S)
    assert run.status == "cancelled"


async def test_a_reader_holding_the_run_past_the_window_then_leaving_starts_the_timer(settings: Settings) -> None:
    gate = Gate()
    provider = GatedProvider([GatedTurn(["partial", gate, " never"])])
    async with (
        running_app(
            settings.with_(chat_reattach_s=WINDOW_S, heartbeat_s=0.1),
            provider=provider,
            registry=registry(),
            embedder=None,
        ) as (base, app),
        httpx.AsyncClient(base_url=base, timeout=30) as client,
    ):
        seen = await collect_sse(client, "POST", "/v1/agent/chat", json=BODY, stop=chunk("partial"))
        run = app.state.services.runs.get(first_id(seen))
        await until(lambda: run.followers == 0, "the chat's client to leave")
        loop = asyncio.get_running_loop()
        window_over = loop.time() + 2 * WINDOW_S
        # The reader stays past the window (the chat's timer finds it attached and
        # stands down; heartbeats every 0.1 s let it look at the clock), then leaves.
        await collect_sse(client, "GET", f"/v1/agent/runs/{run.id}/events", stop=lambda _e: loop.time() > window_over)
        await until(lambda: run.followers == 0, "the reader to leave")
        assert not run.finished
        await asyncio.wait_for(run.wait_finished(), END_BOUND_S)
    assert run.status == "cancelled"


async def test_a_keyed_run_a_reader_leaves_is_not_cancelled(settings: Settings) -> None:
    """The rule is the chat's: a run started with an ``Idempotency-Key`` outlives its
    readers (it is swept only as abandoned, after ``AGENT_RUN_GRACE_S``)."""
    gate = Gate()
    provider = GatedProvider([GatedTurn(["partial", gate, " and the rest."])])
    async with (
        running_app(settings.with_(chat_reattach_s=0), provider=provider, registry=registry(), embedder=None) as (
            base,
            app,
        ),
        httpx.AsyncClient(base_url=base, timeout=30) as client,
    ):
        seen = await collect_sse(
            client, "POST", "/v1/agent/chat", json=BODY, headers={"Idempotency-Key": "k-1"}, stop=chunk("partial")
        )
        run = app.state.services.runs.get(first_id(seen))
        await collect_sse(client, "GET", f"/v1/agent/runs/{run.id}/events", stop=chunk("partial"))
        await until(lambda: run.followers == 0, "the reader to leave")
        assert not run.finished
        gate.open()
        await asyncio.wait_for(run.wait_finished(), END_BOUND_S)
    assert run.status == "completed"
