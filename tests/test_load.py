"""A replica knows its load and says it (issue 23 item 4): ``/readyz`` and ``/metrics``
show live runs, model streams and the event loop's lag; while the lag stays above
``AGENT_MAX_LOOP_LAG_MS`` new runs get 503 ``replica_busy`` with ``Retry-After`` on every
face, and are admitted again once it stays below.

The loop is blocked for real (``time.sleep`` in the test, which runs on the server's
loop); each block is timed against a sample already asked for, so the lag it produces
is certain, and the test waits on the monitor's sample count, never on the clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx

from app.config import Settings
from app.ops.load import SUSTAINED_S, SUSTAINED_SAMPLES, LoopLagMonitor, ReplicaLoad
from tests.conftest import running_app
from tests.fakes import FakeOllama, Hold, Text, running_fake
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn

BLOCK_S = 0.3
QUESTION = "What does the knowledge base say?"

#: One new run on each face: (method, path, body).
FACES: list[tuple[str, str, dict[str, Any]]] = [
    ("POST", "/v1/agent/chat", {"message": QUESTION, "context_type": "workflow"}),
    ("POST", "/v1/agent/runs", {"message": QUESTION, "context_type": "workflow"}),
    (
        "POST",
        "/v1/chat/completions",
        {"model": "agentchat-workflow", "stream": True, "messages": [{"role": "user", "content": QUESTION}]},
    ),
    (
        "POST",
        "/v1/agent/ui-stream",
        {
            "id": "chat-busy",
            "context_type": "workflow",
            "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": QUESTION}]}],
        },
    ),
]


async def next_sample(monitor: LoopLagMonitor, seen: int) -> int:
    """Wait until the monitor has recorded a sample after ``seen`` (bounded)."""
    async with asyncio.timeout(30):
        while monitor.samples <= seen:
            await asyncio.sleep(0.01)
    return monitor.samples


async def block_loop_once(monitor: LoopLagMonitor, seen: int | None = None) -> tuple[float, int]:
    """Block the event loop for ``BLOCK_S`` while the monitor's next timer is pending
    (right after sample ``seen``, or a fresh one); return the lag it then recorded (at
    least ``BLOCK_S`` minus its period) and the sample count."""
    if seen is None:
        seen = await next_sample(monitor, monitor.samples)  # a sample just taken: the next one is asked for
    time.sleep(BLOCK_S)  # deliberately blocking: the loop cannot run the monitor's timer
    seen = await next_sample(monitor, seen)
    return monitor.lag_s, seen


async def keep_the_loop_late(load: ReplicaLoad) -> None:
    """Block the loop again right after each late sample, until the replica refuses
    (a slow machine may slip a free sample in between: then it simply takes longer)."""
    seen = None
    async with asyncio.timeout(60):
        while not load.overloaded:
            _, seen = await block_loop_once(load.monitor, seen)


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in /metrics")


async def test_the_monitor_reports_a_blocked_loop(settings: Settings) -> None:
    async with running_app(settings, embedder=None) as (base, app):
        load: ReplicaLoad = app.state.services.load
        lag, _ = await block_loop_once(load.monitor)
        assert lag >= BLOCK_S - load.monitor.every_s
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            ready = (await client.get("/readyz")).json()
            metrics = (await client.get("/metrics")).text
        shown = ready["load"]
        assert shown["loop_lag_recent_max_ms"] >= (BLOCK_S - load.monitor.every_s) * 1000
        assert shown["live_runs"] == 0 and shown["model_streams"] == 0 and shown["accepting"] is True
        assert shown["replica"] == app.state.services.runs.owner_id
        assert metric(metrics, "agentchat_event_loop_lag_recent_max_seconds") >= BLOCK_S - load.monitor.every_s
        assert metric(metrics, "agentchat_accepting_runs") == 1
        # One late wake is not overload (the default limit needs it to stay late).
        assert not load.overloaded


async def test_a_loop_that_stays_late_refuses_new_runs_on_every_face(settings: Settings) -> None:
    gate = Gate()
    provider = GatedProvider(lambda _request, _i: GatedTurn(["working ", gate, "done"]))
    cfg = settings.with_(max_loop_lag_ms=100)  # the setting under test; each block is 300 ms
    async with running_app(cfg, provider=provider, embedder=None) as (base, app):
        load: ReplicaLoad = app.state.services.load
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            live = await client.post("/v1/agent/runs", json=FACES[1][2])  # a stream to protect
            assert live.status_code == 201, live.text
        await keep_the_loop_late(load)
        assert load.monitor.lag_s > 0.1
        # Hold the decision still while the requests are answered: the monitor would
        # see a free loop now and (rightly) accept again after a few samples.
        await load.monitor.stop()
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            for method, path, body in FACES:
                answer = await client.request(method, path, json=body)
                assert answer.status_code == 503, (path, answer.text)
                assert answer.headers.get("retry-after") == "2", path
                text = answer.text
                assert "replica_busy" in text and "overloaded" in text, (path, text)
            ready = await client.get("/readyz")
            assert ready.status_code == 200  # busy, still ready: followers and other routes are served
            assert ready.json()["load"]["accepting"] is False
            assert ready.json()["load"]["refused"]["loop_lag"] == len(FACES)
            metrics = (await client.get("/metrics")).text
            assert metric(metrics, 'agentchat_runs_refused_total{reason="loop_lag"}') == len(FACES)
            assert metric(metrics, "agentchat_accepting_runs") == 0
            # Nothing was stored for the refused runs: the live one only.
            assert [r.id for r in await app.state.services.run_store.unfinished()] == [live.json()["run_id"]]

            # The lag back under the limit, and staying there as long: accepted again.
            now = time.monotonic()
            for i in range(SUSTAINED_SAMPLES):
                load.monitor.record(0.001, now=now + i * 0.1)
            assert load.overloaded  # not for long enough yet
            load.monitor.record(0.001, now=now + SUSTAINED_S + 0.2)
            assert not load.overloaded
            again = await client.post("/v1/agent/runs", json=FACES[1][2])
            assert again.status_code == 201, again.text
            gate.open()


async def test_live_runs_and_model_streams_are_shown(settings: Settings) -> None:
    gate = Gate()
    provider = GatedProvider(lambda _request, _i: GatedTurn(["working ", gate, "done"]))
    cfg = settings.with_(max_live_runs=1)
    async with running_app(cfg, provider=provider, embedder=None) as (base, app):
        load: ReplicaLoad = app.state.services.load
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            started = await client.post("/v1/agent/runs", json=FACES[1][2])
            assert started.status_code == 201, started.text
            async with asyncio.timeout(30):  # the run is inside its model stream, held by the gate
                while load.model_streams() < 1:
                    await asyncio.sleep(0.01)
            shown = (await client.get("/readyz")).json()["load"]
            assert shown["live_runs"] == 1 and shown["model_streams"] == 1
            assert shown["max_live_runs"] == 1 and shown["accepting"] is False
            full = await client.post("/v1/agent/runs", json=FACES[1][2])
            assert full.status_code == 503 and full.json()["error"] == "replica_busy"
            metrics = (await client.get("/metrics")).text
            assert metric(metrics, "agentchat_live_runs") == 1
            assert metric(metrics, "agentchat_model_streams") == 1
            assert metric(metrics, 'agentchat_runs_refused_total{reason="live_runs"}') == 1
            gate.open()
            async with client.stream("GET", f"/v1/agent/runs/{started.json()['run_id']}/events") as stream:
                async for _ in stream.aiter_lines():
                    pass
            async with asyncio.timeout(30):
                while load.model_streams() or load.live_runs():
                    await asyncio.sleep(0.01)


@dataclasses.dataclass
class HeldModel:
    """A served app on the fake Ollama (through the app's own provider and model pool),
    whose answers hold after their first token until ``release`` is set."""

    client: httpx.AsyncClient
    app: Any
    fake: FakeOllama
    load: ReplicaLoad
    release: asyncio.Event

    async def first_run_holds_a_connection(self) -> None:
        async with asyncio.timeout(30):
            await self.fake.stream_started.wait()
            while self.load.model_connections() < 1:
                await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def held_model(settings: Settings, connections: int) -> AsyncIterator[HeldModel]:
    """``HeldModel`` with a model pool of ``connections`` (the setting under test); on
    the way out the answers are released and every run is waited for, bounded."""
    release = asyncio.Event()
    fake = FakeOllama(lambda _body: [Text("working "), Hold(release), Text("done")])
    async with running_fake(fake.app) as url:
        cfg = settings.with_(ollama_host=url, ollama_model="llama3.2:latest", llm_max_connections=connections)
        async with running_app(cfg) as (base, app), httpx.AsyncClient(base_url=base, timeout=30) as client:
            load: ReplicaLoad = app.state.services.load
            try:
                yield HeldModel(client, app, fake, load, release)
            finally:
                release.set()
                async with asyncio.timeout(60):
                    while load.live_runs():
                        await asyncio.sleep(0.02)


async def test_a_full_model_pool_refuses_new_runs_instead_of_making_them_wait(settings: Settings) -> None:
    """A run started while the replica carries a live run for each connection to the
    model would wait at the pool's gate for another run's whole answer before its first
    token: it gets 503 ``replica_busy`` with ``Retry-After`` instead, on every face, and
    is admitted again once a run has ended. Through the app's own Ollama provider and its
    pool (the setting under test: one connection)."""
    async with held_model(settings, 1) as held:
        client, load = held.client, held.load
        live = await client.post("/v1/agent/runs", json=FACES[1][2])
        assert live.status_code == 201, live.text
        await held.first_run_holds_a_connection()
        for method, path, body in FACES:
            answer = await client.request(method, path, json=body)
            assert answer.status_code == 503, (path, answer.text)
            assert answer.headers.get("retry-after") == "2", path
            assert "replica_busy" in answer.text and "AGENT_LLM_MAX_CONNECTIONS" in answer.text, answer.text
        shown = (await client.get("/readyz")).json()["load"]
        assert shown["model_connections"] == 1 and shown["max_model_connections"] == 1
        assert shown["accepting"] is False and shown["refused"]["model_pool"] == len(FACES)
        metrics = (await client.get("/metrics")).text
        assert metric(metrics, 'agentchat_runs_refused_total{reason="model_pool"}') == len(FACES)
        assert metric(metrics, "agentchat_model_connections") == 1
        assert [r.id for r in await held.app.state.services.run_store.unfinished()] == [live.json()["run_id"]]

        held.release.set()
        async with (
            asyncio.timeout(30),
            client.stream("GET", f"/v1/agent/runs/{live.json()['run_id']}/events") as stream,
        ):
            async for _ in stream.aiter_lines():
                pass
        async with asyncio.timeout(30):  # the run ended: its slot is free
            while load.live_runs():
                await asyncio.sleep(0.01)
        again = await client.post("/v1/agent/runs", json=FACES[1][2])
        assert again.status_code == 201, again.text


def test_the_decision_needs_the_lag_to_stay_over_the_limit() -> None:
    live = [1]
    load = ReplicaLoad(live_runs=lambda: live[0], max_loop_lag_s=0.1)
    clock = [0.0]

    def sample(lag: float) -> None:  # a sample as the monitor takes it: 0.1 s plus its lag later
        clock[0] += load.monitor.every_s + lag
        load.monitor.record(lag, now=clock[0])

    for lag in (0.5, 0.5, 0.01, 0.5, 0.5):  # a good sample in between: not yet
        sample(lag)
    assert not load.overloaded and load.refusal() is None
    sample(0.5)  # three in a row, over 1.8 s
    assert load.overloaded and load.refusal() == "loop_lag" and not load.accepting()
    live[0] = 0  # no live run to protect: a new one is admitted
    assert load.refusal() is None and load.accepting()
    live[0] = 1
    for _ in range(SUSTAINED_SAMPLES):
        sample(0.01)
    assert load.overloaded  # three good samples within 0.33 s: not for long enough
    until = clock[0] + SUSTAINED_S
    while clock[0] < until:
        sample(0.01)
    assert not load.overloaded

    # A burst: three late samples within less than a second is not overload.
    burst = ReplicaLoad(live_runs=lambda: 1, max_loop_lag_s=0.1)
    for i in range(3):
        burst.monitor.record(0.15, now=0.25 * (i + 1))
    assert not burst.overloaded
    off = ReplicaLoad(live_runs=lambda: 1, max_loop_lag_s=0.0)
    for _ in range(10):
        off.monitor.record(5.0)
    assert not off.overloaded


def test_the_stream_counter_is_the_provider_for_every_other_attribute() -> None:
    """Tests and rooms set attributes on the provider they were given (the wrapped one)."""
    from app.ops.load import StreamCounter

    class Inner:
        name = "inner"
        turns: object = None

    inner = Inner()
    wrapped = StreamCounter(inner)
    wrapped.turns = "set through the wrapper"
    assert inner.turns == "set through the wrapper" and wrapped.name == "inner"
    assert wrapped.open == 0 and not hasattr(inner, "open")


def test_the_model_pool_caps_live_runs_only_when_it_has_a_size() -> None:
    """Counted in live runs, not connections in use: a burst of admitted runs has not
    reached the model yet. Other work (an upload) is never refused for it."""
    live = [0]
    load = ReplicaLoad(live_runs=lambda: live[0], model_connections=lambda: 0, max_model_connections=2)
    assert load.refusal() is None
    live[0] = 2
    assert load.refusal() == "model_pool" and not load.accepting()
    assert load.refusal(new_run=False) is None
    live[0] = 1
    assert load.refusal() is None and load.accepting()
    # A provider without a pool (the offline answerer): nothing to fill.
    assert ReplicaLoad(live_runs=lambda: 700).refusal() is None


async def test_a_burst_of_new_runs_is_admitted_only_up_to_the_model_pool(settings: Settings) -> None:
    """Concurrent requests all arrive before any run has reached the model: the slot is
    claimed atomically by admission (``app/runs/admission.py``), so exactly the pool's
    size is admitted and the rest get 503 ``replica_busy`` (found in review: a check of
    the connections in use admitted the whole burst, which then waited at the gate)."""
    async with held_model(settings, 2) as held:
        async with asyncio.timeout(60):
            answers = await asyncio.gather(*(held.client.post("/v1/agent/runs", json=FACES[1][2]) for _ in range(8)))
        statuses = sorted(a.status_code for a in answers)
        assert statuses == [201, 201] + [503] * 6, statuses
        assert all(a.json()["error"] == "replica_busy" for a in answers if a.status_code == 503)
        assert held.load.refused["model_pool"] == 6


async def test_an_upload_is_not_refused_for_a_full_model_pool(settings: Settings) -> None:
    """An attachment upload reads, chunks and embeds a file (the embedder's own pool):
    it holds no model connection, so the model pool's cap never refuses it (found in
    review: it was refused, saying every connection to the model is in use)."""
    from tests.test_attachment_overload import upload

    async with held_model(settings, 1) as held:
        live = await held.client.post("/v1/agent/runs", json=FACES[1][2])
        assert live.status_code == 201, live.text
        await held.first_run_holds_a_connection()
        answer = await upload(held.client, "pool-full-chat")
        assert answer.status_code == 201, answer.text
