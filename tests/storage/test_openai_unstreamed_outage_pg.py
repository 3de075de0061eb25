"""A non-streamed OpenAI completion whose database goes away mid-run is answered 503
``storage_unavailable`` with ``Retry-After``, not held for the whole outage; the run
itself is let go and carried on once the database is back, to its one ending in the log.

An ``openai`` SDK client waits 600 s for a non-streamed answer, then sends the request
again (twice): held through an outage, it saw nothing for as long, and a non-streamed
completion has no way to resume. Before, the request waited for the database to answer
again.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import collect_sse
from tests.storage.test_postgres_outage_app import relayed_url
from tests.storage.test_postgres_outage_runs_app import let_go, outage_provider, settings_for
from tests.support.deadline import until
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn
from tests.support.server import serve_app
from tests.support.tcp_cut import CuttableRelay

__all__ = ["relayed_url"]  # the fixture, used by name

#: How long the test keeps the database away while it waits for the answer: many times
#: the app's AGENT_DB_POOL_TIMEOUT_S (3 s in ``settings_for``), so an answer that only
#: comes once the database is back is told apart from a 503 during the outage.
OUTAGE_LIMIT_S = 60


async def test_a_non_streamed_completion_is_503_during_an_outage_and_its_run_is_carried_on(
    relayed_url: tuple[str, CuttableRelay], tmp_path: Path
) -> None:
    from app.factory import create_app

    url, relay = relayed_url
    gate = Gate()
    app = create_app(settings_for(url, tmp_path), provider=outage_provider(gate))
    body = {"model": "agentchat-workflow", "stream": False, "messages": [{"role": "user", "content": "hello"}]}
    async with serve_app(app) as base, httpx.AsyncClient(base_url=base, timeout=OUTAGE_LIMIT_S + 30) as http:
        asked = asyncio.create_task(http.post("/v1/chat/completions", json=body))
        await let_go(app, relay, gate)  # the database away mid-answer, the run let go
        try:
            answered, _ = await asyncio.wait({asked}, timeout=OUTAGE_LIMIT_S)
            during_outage = bool(answered)
        finally:
            relay.restore()
        response = await asked
        assert during_outage, f"answered only once the database was back: {response.status_code} {response.text}"
        assert response.status_code == 503, response.text
        error = response.json()["error"]
        assert error["code"] == "storage_unavailable" and error["type"] == "server_error", error
        assert int(response.headers["retry-after"]) > 0
        run_id = response.headers["x-run-id"]
        events_url = f"/v1/agent/runs/{run_id}/events"
        assert events_url in error["message"], error

        # Not ended by the refusal: the run rides out the outage in its log, and the
        # address the message names gives its answer (GET /v1/agent/runs/{id} has none).
        answer = await collect_sse(http, "GET", events_url, deadline_s=60)
        assert answer[-1].event == "message_complete" and answer[-1].json()["status"] == "completed"
        assert any("carried on after the outage" in e.data for e in answer if e.event == "content_chunk"), answer


async def test_a_non_streamed_completion_waits_for_a_slow_model_while_the_database_answers(
    relayed_url: tuple[str, CuttableRelay], tmp_path: Path
) -> None:
    """The check between events is a read the database answers: a model silent for longer
    than AGENT_DB_POOL_TIMEOUT_S is waited for, and its answer is the 200. (The
    request's admission budget, spent by then, must not cut that read.)"""
    from app.factory import create_app

    url, _ = relayed_url
    gate = Gate()
    app = create_app(
        settings_for(url, tmp_path), provider=GatedProvider([GatedTurn(steps=("slow ", gate, "but here"))])
    )
    checked: list[str] = []
    body = {"model": "agentchat-workflow", "stream": False, "messages": [{"role": "user", "content": "hello"}]}
    async with serve_app(app) as base, httpx.AsyncClient(base_url=base, timeout=60) as http:
        store = app.state.services.run_store
        real_get = store.get

        async def get(run_id: str) -> Any:  # the real read, counted when answered
            found = await real_get(run_id)
            checked.append(run_id)
            return found

        store.get = get
        asked = asyncio.create_task(http.post("/v1/chat/completions", json=body))
        await until(gate.reached.is_set, "the model silent mid-answer", 30)
        seen = len(checked)
        # Two checks answered while the model is silent (each after 3 s without an event),
        # or the request over: either way the test goes on and reads the answer.
        await until(lambda: len(checked) >= seen + 2 or asked.done(), "the database checked twice", 60, step=0.05)
        gate.open()
        response = await asked
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "slow but here"


async def test_the_openai_sdk_does_not_send_the_completion_again_after_the_outage_503(
    relayed_url: tuple[str, CuttableRelay], tmp_path: Path
) -> None:
    """The ``openai`` SDKs retry a 503 by themselves (twice, after ``Retry-After``), and
    the same transcript sent again is another run (a regeneration), while the first one
    is carried on: the 503 says ``x-should-retry: false``, which both SDKs obey. Before,
    a database back within those retries ran the question twice (tools included)."""
    from app.factory import create_app

    url, relay = relayed_url
    gate = Gate()
    app = create_app(settings_for(url, tmp_path), provider=outage_provider(gate))
    posted: list[int] = []

    async def answered(response: httpx.Response) -> None:
        posted.append(response.status_code)
        if response.status_code == 503:
            relay.restore()  # the database back before the SDK could send the request again

    async with (
        serve_app(app) as base,
        httpx.AsyncClient(timeout=OUTAGE_LIMIT_S + 30, event_hooks={"response": [answered]}) as http,
    ):
        sdk = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="sk-local", http_client=http)  # default retries
        asked = asyncio.create_task(
            sdk.chat.completions.create(model="agentchat-workflow", messages=[{"role": "user", "content": "hello"}])
        )
        try:
            await until(gate.reached.is_set, "the run mid-answer", 30)
            relay.cut()  # the database away mid-answer (back at the 503, maybe before the run is let go)
            gate.open()
            with pytest.raises(openai.InternalServerError) as refused:
                await asyncio.wait_for(asked, OUTAGE_LIMIT_S)
        finally:
            relay.restore()
        assert posted == [503], posted
        assert refused.value.response.headers["x-should-retry"] == "false"
