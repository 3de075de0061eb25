"""Concurrent turns in one conversation, under each ``multitask`` policy, and the race of
two users for one new conversation id.

Served by real uvicorn on loopback (in this process). The model is a gated script: the
first turn of the conversation waits at a gate until every concurrent request has been
answered, so the requests provably arrive while a run of the conversation is live.

- ``enqueue`` (the default): every request is accepted; the runs go one after another,
  so the conversation reads user, assistant, user, assistant… with every message once,
  each run completed, and each run's model request carried every earlier turn.
- ``reject``: one accepted, the others 409 ``conversation_busy``; the accepted turn is
  whole; a request after it has ended is accepted again.
- ``interrupt``: every request accepted; each cancels the one before it, so all but the
  newest end ``cancelled`` and the newest completes; every user message is stored.
- Two JWT users start a run on one new conversation id at the same moment: exactly one
  owns it, the other gets 404 — at once and afterwards — and the owner's turn is whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agenttools.core.registry import ToolRegistry
from app.config import Settings
from app.server.auth import sign_hs256
from tests.conftest import running_app
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn, last_user_text
from tests.support.procs import Trace, follow, until

SECRET = "durability-secret-0123456789"


def settings_for(tmp_path: Path, **extra: str) -> Settings:
    return Settings.from_env(
        {
            "AGENT_DB_PATH": str(tmp_path / "agent.sqlite3"),
            "AGENT_MANDATORY_CONTEXTS": "none",
            "AGENT_INGEST_SAMPLE_KB": "false",
            "AGENT_EMBEDDER": "none",
            "AGENT_LLM_PROVIDER": "extractive",
            "OLLAMA_HOST": "http://127.0.0.1:9",
            "AGENT_MAX_RUNS_PER_USER": "1000",
            "AGENT_REQUESTS_PER_MINUTE": "100000",
            **extra,
        }
    )


def answer_to(message: str) -> str:
    return f"answer to <{message}>"


class HeldModel:
    """Every turn waits at one gate (opened once, it stays open), then answers its question."""

    def __init__(self) -> None:
        self.gate = Gate()
        self.provider = GatedProvider(lambda request, index: GatedTurn([self.gate, answer_to(last_user_text(request))]))

    @property
    def requests(self) -> list[Any]:
        return self.provider.requests


@contextlib.asynccontextmanager
async def serving(settings: Settings, model: HeldModel) -> AsyncIterator[tuple[str, httpx.AsyncClient]]:
    app = running_app(settings, provider=model.provider, registry=ToolRegistry(), embedder=None)
    async with app as (base, _app), httpx.AsyncClient(base_url=base, timeout=30) as http:
        yield base, http


async def post_all(
    http: httpx.AsyncClient, bodies: list[dict[str, Any]], headers: list[dict[str, str]] | None = None
) -> list[httpx.Response]:
    """Send every request at once, each on its own connection."""
    heads = headers or [{} for _ in bodies]

    async def one(body: dict[str, Any], head: dict[str, str]) -> httpx.Response:
        return await http.post("/v1/agent/runs", json=body, headers={**head, "Connection": "close"})

    return list(await asyncio.gather(*(one(b, h) for b, h in zip(bodies, heads, strict=True))))


def traces_for(accepted: list[dict[str, Any]]) -> list[Trace]:
    return [Trace(tag=c["run_id"], run_id=c["run_id"], stream_url=c["stream_url"]) for c in accepted]


async def finish(
    base: str, http: httpx.AsyncClient, accepted: list[dict[str, Any]], headers: dict[str, str] | None = None
) -> list[Trace]:
    """Read each run to its end (reconnecting if needed)."""
    traces = traces_for(accepted)
    await asyncio.gather(*(follow(http, base, t, deadline_s=60, headers=headers or {}) for t in traces))
    return traces


async def conversation(
    http: httpx.AsyncClient, conversation_id: str, headers: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    response = await http.get(f"/v1/agent/conversations/{conversation_id}", headers=headers or {})
    assert response.status_code == 200, response.text
    return list(response.json()["messages"])


def turns_of(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["role"], m.get("content") or "") for m in messages]


def bodies_for(conversation_id: str, n: int, policy: str | None) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        body: dict[str, Any] = {
            "message": f"turn {i:02d} of {conversation_id}",
            "context_type": "knowledge",
            "conversation_id": conversation_id,
        }
        if policy is not None:
            body["multitask"] = policy
        out.append(body)
    return out


@pytest.mark.parametrize("n", [2, 5, 20])
@pytest.mark.parametrize("policy", [None, "enqueue"], ids=["default", "explicit"])
async def test_enqueue_keeps_every_turn_in_order(tmp_path: Path, n: int, policy: str | None) -> None:
    model = HeldModel()
    conversation_id = f"conv-enqueue-{uuid.uuid4().hex[:8]}"
    bodies = bodies_for(conversation_id, n, policy)
    async with serving(settings_for(tmp_path), model) as (base, http):
        responses = await post_all(http, bodies)
        model.gate.open()
        assert [r.status_code for r in responses] == [201] * n, [r.text for r in responses]
        traces = await finish(base, http, [r.json() for r in responses])
        messages = await conversation(http, conversation_id)

    assert [t.final_status for t in traces] == ["completed"] * n, [(t.outcome, t.error_codes) for t in traces]
    turns = turns_of(messages)
    users = [text for role, text in turns if role == "user"]
    assert sorted(users) == sorted(b["message"] for b in bodies), turns
    # One turn after another: each question directly followed by its own answer.
    expected: list[tuple[str, str]] = []
    for question in users:
        expected += [("user", question), ("assistant", answer_to(question))]
    assert turns == expected
    # Each run's model request carried every earlier turn, in the stored order.
    assert len(model.requests) == n
    for request in model.requests:
        asked = [m.content for m in request.messages if m.role == "user" and m.content]
        k = users.index(asked[-1])
        assert asked == users[: k + 1]
        answers = [m.content for m in request.messages if m.role == "assistant"]
        assert answers == [answer_to(q) for q in users[:k]]


@pytest.mark.parametrize("n", [2, 5, 20])
async def test_reject_answers_409_and_keeps_the_accepted_turn(tmp_path: Path, n: int) -> None:
    model = HeldModel()
    conversation_id = f"conv-reject-{uuid.uuid4().hex[:8]}"
    bodies = bodies_for(conversation_id, n, "reject")
    async with serving(settings_for(tmp_path), model) as (base, http):
        responses = await post_all(http, bodies)
        model.gate.open()
        statuses = [r.status_code for r in responses]
        assert statuses.count(201) == 1 and statuses.count(409) == n - 1, [(r.status_code, r.text) for r in responses]
        for r in responses:
            if r.status_code == 409:
                assert r.headers["content-type"].startswith("application/json")
                assert r.json()["error"] == "conversation_busy"
        winner = next(i for i, r in enumerate(responses) if r.status_code == 201)
        traces = await finish(base, http, [responses[winner].json()])
        after = await http.post("/v1/agent/runs", json={**bodies[0], "message": "after the first ended"})
        assert after.status_code == 201, after.text
        traces += await finish(base, http, [after.json()])
        messages = await conversation(http, conversation_id)

    assert [t.final_status for t in traces] == ["completed", "completed"]
    question = bodies[winner]["message"]
    assert turns_of(messages) == [
        ("user", question),
        ("assistant", answer_to(question)),
        ("user", "after the first ended"),
        ("assistant", answer_to("after the first ended")),
    ]


@pytest.mark.parametrize("n", [2, 5, 20])
async def test_interrupt_cancels_the_earlier_runs_and_keeps_every_message(tmp_path: Path, n: int) -> None:
    model = HeldModel()
    conversation_id = f"conv-interrupt-{uuid.uuid4().hex[:8]}"
    bodies = bodies_for(conversation_id, n, "interrupt")
    async with serving(settings_for(tmp_path), model) as (base, http):
        responses = await post_all(http, bodies)
        assert [r.status_code for r in responses] == [201] * n, [r.text for r in responses]
        traces = traces_for([r.json() for r in responses])
        followers = asyncio.gather(*(follow(http, base, t, deadline_s=60, headers={}) for t in traces))
        # The interrupted runs end while the newest still waits at the gate (bounded: an
        # implementation that lets them run on is caught by the asserts below).
        with contextlib.suppress(TimeoutError):
            await until(lambda: sum(t.outcome != "pending" for t in traces) >= n - 1, "the interrupted runs", 10)
        model.gate.open()
        await followers
        messages = await conversation(http, conversation_id)

    statuses = [t.final_status for t in traces]
    assert statuses.count("completed") == 1 and statuses.count("cancelled") == n - 1, statuses
    for t in traces:
        assert t.names().count("message_complete") == 1
    newest = bodies[statuses.index("completed")]["message"]
    users = [text for role, text in turns_of(messages) if role == "user"]
    assert sorted(users) == sorted(b["message"] for b in bodies), turns_of(messages)
    assert users[-1] == newest
    assert turns_of(messages)[-2:] == [("user", newest), ("assistant", answer_to(newest))]


def bearer(sub: str) -> dict[str, str]:
    now = int(time.time())
    return {"Authorization": "Bearer " + sign_hs256({"sub": sub, "iat": now, "exp": now + 3600}, SECRET)}


async def test_two_users_race_for_one_new_conversation(tmp_path: Path) -> None:
    """Issue 21: ids are a namespace per user. Two users sending their first message to
    one new id at once both get a run and each their own conversation; neither is shut
    out of it afterwards, nor sees the other's turns."""
    model = HeldModel()
    model.gate.open()
    alice, bob = bearer("alice"), bearer("bob")
    settings = settings_for(tmp_path, AGENT_AUTH="jwt", AGENT_JWT_SECRET=SECRET)
    async with serving(settings, model) as (base, http):
        for round_ in range(10):
            conversation_id = f"conv-race-{round_}-{uuid.uuid4().hex[:8]}"
            users = [("alice", alice), ("bob", bob)] if round_ % 2 == 0 else [("bob", bob), ("alice", alice)]
            bodies = [
                {
                    "message": f"{name} writes in round {round_}",
                    "context_type": "knowledge",
                    "conversation_id": conversation_id,
                }
                for name, _ in users
            ]
            responses = await post_all(http, bodies, [head for _, head in users])
            assert [r.status_code for r in responses] == [201, 201], [(r.status_code, r.text) for r in responses]
            for (_, head), body, response in zip(users, bodies, responses, strict=True):
                assert response.json()["conversation_id"] == conversation_id
                traces = await finish(base, http, [response.json()], headers=head)
                assert traces[0].final_status == "completed", traces[0].frames[-3:]
                question = body["message"]
                messages = await conversation(http, conversation_id, headers=head)
                assert turns_of(messages) == [("user", question), ("assistant", answer_to(question))]
            # Each one's next turn is still theirs, and only theirs.
            for (_, head), body in zip(users, bodies, strict=True):
                more = await http.post(
                    "/v1/agent/runs", json={**body, "message": f"and again, {body['message']}"}, headers=head
                )
                assert more.status_code == 201, more.text
                await finish(base, http, [more.json()], headers=head)
                turns = [t for _, t in turns_of(await conversation(http, conversation_id, headers=head))]
                assert turns == [body["message"], answer_to(body["message"]), f"and again, {body['message']}",
                                 answer_to(f"and again, {body['message']}")]
