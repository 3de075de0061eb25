"""A non-streamed completion whose run was parked for an approval or cancelled is not
sent again by the ``openai`` SDK itself.

The SDKs (Python and JS) retry a 409 by themselves, twice, and the same transcript sent
again is another run (``app.server.openai_compat``: a regeneration): one ``create()``
whose run parked for an approval left three runs waiting for three approvals of the same
call, and a cancelled question was asked again. The 409 says ``x-should-retry: false``,
which the SDKs obey before the status. Driven by the real SDK with its default retries.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import openai
from openai.types.chat import ChatCompletionUserMessageParam

from app.config import Settings
from llm.scripted import ScriptedCall, ScriptedProvider, ScriptedTurn
from tests.conftest import running_app
from tests.support.deadline import until
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn
from tests.test_approvals_faces import registry

QUESTION = [ChatCompletionUserMessageParam(role="user", content="Clear the stock table.")]


def counted_client(posted: list[int]) -> httpx.AsyncClient:
    """The SDK's HTTP client, noting the status of every response it is sent."""

    async def answered(response: httpx.Response) -> None:
        posted.append(response.status_code)

    return httpx.AsyncClient(timeout=30, event_hooks={"response": [answered]})


def sdk(base: str, http: httpx.AsyncClient) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="sk-local", http_client=http)  # default retries


async def test_a_completion_parked_for_an_approval_is_asked_once(settings: Settings) -> None:
    provider = ScriptedProvider(
        lambda request, index: ScriptedTurn(calls=[ScriptedCall("clear_table", {"table": "stock"})])
    )
    calls: list[dict[str, Any]] = []
    posted: list[int] = []
    async with (
        running_app(settings, provider=provider, registry=registry(calls), embedder=None) as (base, app),
        counted_client(posted) as http,
    ):
        try:
            await sdk(base, http).chat.completions.create(model="agentchat-workflow", messages=QUESTION)
        except openai.ConflictError as exc:
            assert exc.code == "approval_required", exc.body
        else:
            raise AssertionError("a completion parked for an approval was answered")
        assert posted == [409], posted
        assert app.state.services.runs.counters.started == 1
    assert calls == []


async def test_a_cancelled_completion_is_not_asked_again(settings: Settings) -> None:
    gate = Gate()
    provider = GatedProvider([GatedTurn(steps=("clearing ", gate, "done"))])
    posted: list[int] = []
    async with (
        running_app(settings, provider=provider) as (base, app),
        counted_client(posted) as http,
        httpx.AsyncClient(base_url=base, timeout=30) as native,
    ):
        asked = asyncio.create_task(
            sdk(base, http).chat.completions.create(model="agentchat-workflow", messages=QUESTION)
        )
        await until(gate.reached.is_set, "the run mid-answer", 30)
        [run] = (await native.get("/v1/agent/runs")).json()["runs"]
        cancelled = await native.post(f"/v1/agent/runs/{run['run_id']}/cancel")
        assert cancelled.status_code in (200, 202), cancelled.text
        try:
            await asked
        except openai.ConflictError as exc:
            assert exc.code == "cancelled", exc.body
        else:
            raise AssertionError("a cancelled completion was answered")
        assert posted == [409], posted
        assert app.state.services.runs.counters.started == 1
