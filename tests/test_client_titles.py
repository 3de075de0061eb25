"""The client names the conversation (issue 23): a ``title`` in the chat body
(``POST /v1/agent/chat``, ``POST /v1/agent/runs``) is stored with the run's admission
when the conversation has no title yet, and then no model call writes one — counted as
``agentchat_conversation_titles_total{source="client"}``. A titled conversation keeps
its title (an earlier one, or the user's rename); a bad title is a 400 naming the field.
Over a real uvicorn server, two JWT users, the Ollama fake recording every request."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
from tests.conftest import collect_sse, running_app
from tests.fakes import FakeOllama, Text, running_fake
from tests.fakes._script import is_title_request
from tests.test_compat_faces_owners import bearer, env

ALICE, BOB = bearer("alice"), bearer("bob")
#: How long a background title may take to appear (bounded polling, then a clear failure).
TITLE_DEADLINE_S = 20.0


async def titles(http: httpx.AsyncClient, who: dict[str, str]) -> dict[str, str | None]:
    """The caller's conversations: id -> title."""
    r = await http.get("/v1/agent/conversations", headers=who)
    assert r.status_code == 200, r.text
    return {c["id"]: c["title"] for c in r.json()["conversations"]}


async def title_once_set(http: httpx.AsyncClient, who: dict[str, str], conversation_id: str) -> str:
    """The conversation's title once the background titler has set it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TITLE_DEADLINE_S
    while loop.time() < deadline:
        title = (await titles(http, who)).get(conversation_id)
        if title:
            return title
        await asyncio.sleep(0.02)
    raise AssertionError(f"{conversation_id!r} got no title within {TITLE_DEADLINE_S} s")


async def chat(http: httpx.AsyncClient, who: dict[str, str], **body: Any) -> None:
    events = await collect_sse(http, "POST", "/v1/agent/chat", json={"context_type": "workflow", **body}, headers=who)
    assert [e.event for e in events].count("message_complete") == 1, [e.event for e in events]
    assert events[-1].event == "message_complete" and '"completed"' in events[-1].data


async def test_a_client_title_takes_the_place_of_the_model_call(tmp_path: Path) -> None:
    """The default configuration with a real model (Ollama): a run that brings a title
    makes no title call — through either route — and one that does not still gets the
    model's title; alice's title never lands on bob's conversation of the same id."""
    fake = FakeOllama(lambda _body: [Text("An answer.")])
    fake.turns.title_turn = [Text("Stock alerts by mail")]
    async with running_fake(fake.app) as url:
        provider_env = {"AGENT_LLM_PROVIDER": "ollama", "OLLAMA_HOST": url, "OLLAMA_MODEL": "llama3.2"}
        settings = Settings.from_env(env(tmp_path, **provider_env))
        assert settings.conversation_titles == "auto"
        async with (
            running_app(settings) as (base, _),
            httpx.AsyncClient(base_url=base, timeout=30) as http,
        ):
            await chat(
                http,
                ALICE,
                message="Mail ops when stock runs low",
                conversation_id="thread",
                title="  Quarterly stock report ",
            )
            # The runs API: the title is there as soon as the run is admitted.
            body = {"message": "And the weekly digest?", "context_type": "workflow", "title": "Weekly digest"}
            r = await http.post("/v1/agent/runs", json=body, headers=ALICE)
            assert r.status_code == 201, r.text
            started = r.json()
            assert (await titles(http, ALICE))[started["conversation_id"]] == "Weekly digest"
            events = await collect_sse(http, "GET", started["stream_url"])
            assert events[-1].event == "message_complete"
            # Bob, same conversation id, no title: the model writes his.
            await chat(http, BOB, message="Why did my stock alert not fire?", conversation_id="thread")
            bobs = await title_once_set(http, BOB, "thread")
            alices = await titles(http, ALICE)
            metrics = (await http.get("/metrics")).text
    assert bobs == "Stock alerts by mail"
    assert alices == {"thread": "Quarterly stock report", started["conversation_id"]: "Weekly digest"}
    # Bob's run ended after both of alice's: a title call of theirs would have come first.
    asked = [r.body for r in fake.requests if r.method == "POST" and is_title_request(r.body)]
    assert len(asked) == 1, asked
    assert "Why did my stock alert not fire?" in str(asked[0])
    assert 'agentchat_conversation_titles_total{source="client"} 2.0' in metrics
    assert 'agentchat_conversation_titles_total{source="model"} 1.0' in metrics


async def test_a_titled_conversation_keeps_its_title(tmp_path: Path) -> None:
    """A title sent on a later run never overwrites the conversation's (here the user's
    rename); an untitled conversation of the same user takes it."""
    settings = Settings.from_env(env(tmp_path))
    async with (
        running_app(settings) as (base, _),
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        await chat(http, ALICE, message="How do I resume a stream?", conversation_id="t", title="First name")
        assert (await titles(http, ALICE))["t"] == "First name"
        r = await http.patch("/v1/agent/conversations/t", json={"title": "Renamed"}, headers=ALICE)
        assert r.status_code == 200, r.text
        await chat(http, ALICE, message="And after a restart?", conversation_id="t", title="Another name")
        assert (await titles(http, ALICE))["t"] == "Renamed"
        # Bob's conversation "t" is his own: alice's titles are not his.
        await chat(http, BOB, message="Hello", conversation_id="t", title="Bob's")
        assert (await titles(http, BOB))["t"] == "Bob's"
        assert (await titles(http, ALICE))["t"] == "Renamed"
        metrics = (await http.get("/metrics")).text
    assert 'agentchat_conversation_titles_total{source="client"} 2.0' in metrics


@pytest.mark.parametrize("route", ["/v1/agent/chat", "/v1/agent/runs"])
@pytest.mark.parametrize(
    ("title", "says"),
    [
        ("", "title must be 1-200 characters, not only white space"),
        ("  \n\t ", "title must be 1-200 characters, not only white space"),
        ("x" * 201, "title must be 1-200 characters, not only white space"),
        (7, "title must be a string"),
        (["a title"], "title must be a string"),
    ],
)
async def test_a_bad_title_is_a_clear_400(tmp_path: Path, route: str, title: Any, says: str) -> None:
    settings = Settings.from_env(env(tmp_path))
    async with (
        running_app(settings) as (base, _),
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        body = {"message": "Hello", "context_type": "workflow", "title": title}
        r = await http.post(route, json=body, headers=ALICE)
        assert r.status_code == 400, r.text
        assert r.json() == {"error": "invalid_field", "detail": says}
        assert await titles(http, ALICE) == {}  # nothing was admitted


async def test_the_python_client_sends_the_title(tmp_path: Path) -> None:
    """``AgentClient.start_run(title=…)`` and ``chat(title=…)`` name the conversation."""
    from client import AgentClient

    settings = Settings.from_env(env(tmp_path))
    token = ALICE["Authorization"].removeprefix("Bearer ")
    async with running_app(settings) as (base, _), AgentClient(base, token=token) as agent:
        run = await agent.start_run("How do I resume a stream?", "workflow", title="Resuming streams")
        events = [e async for e in agent.stream(run.run_id)]
        streamed = [e async for e in agent.chat("And the retries?", "workflow", conversation_id="c2", title="Retries")]
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            listed = await titles(http, ALICE)
    assert events and streamed
    assert listed == {run.conversation_id: "Resuming streams", "c2": "Retries"}


async def test_titles_off_still_takes_the_clients_title(tmp_path: Path) -> None:
    """``AGENT_CONVERSATION_TITLES=off`` turns the automatic titles off, not the user's own."""
    settings = Settings.from_env(env(tmp_path, AGENT_CONVERSATION_TITLES="off"))
    async with (
        running_app(settings) as (base, _),
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        await chat(http, ALICE, message="How do I resume a stream?", conversation_id="named", title="Named")
        await chat(http, ALICE, message="How do I resume a stream?", conversation_id="unnamed")
        listed = await titles(http, ALICE)
        metrics = (await http.get("/metrics")).text
    assert listed == {"named": "Named", "unnamed": None}
    assert 'agentchat_conversation_titles_total{source="client"} 1.0' in metrics
