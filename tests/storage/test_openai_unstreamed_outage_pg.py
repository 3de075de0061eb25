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
        assert f"/v1/agent/runs/{run_id}" in error["message"], error

        async def completed() -> bool:
            got = await http.get(f"/v1/agent/runs/{run_id}")
            return got.status_code == 200 and got.json()["status"] == "completed"

        # Not ended by the refusal: the run rides out the outage in its log.
        await until(completed, "the run carried on to its ending once the database is back", 60, step=0.1)


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
