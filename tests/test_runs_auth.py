"""Auth for runs and conversations with ``AGENT_AUTH=jwt``: bearer tokens, signed stream
tokens for ``EventSource``, and ownership (another user's run or conversation is 404)."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agenttools.core.registry import ToolRegistry
from app.config import Settings
from app.server.auth import sign_hs256
from tests.conftest import collect_sse, running_app
from tests.support.deadline import within
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn

SECRET = "test-secret-0123456789abcdef"
BODY = {"message": "Summarise my workflows", "context_type": "workflow", "context": {}}


def bearer(sub: str, *, secret: str = SECRET, exp_in: float = 3600) -> dict[str, str]:
    now = time.time()
    return {"Authorization": "Bearer " + sign_hs256({"sub": sub, "iat": int(now), "exp": int(now + exp_in)}, secret)}


ALICE, BOB = bearer("alice"), bearer("bob")


@pytest.fixture
def jwt_settings(tmp_path: Path) -> Settings:
    return Settings.from_env(
        {
            "AGENT_DB_PATH": str(tmp_path / "agent.sqlite3"),
            "AGENT_MANDATORY_CONTEXTS": "none",
            "AGENT_INGEST_SAMPLE_KB": "false",
            "AGENT_EMBEDDER": "none",
            "AGENT_LLM_PROVIDER": "extractive",
            "OLLAMA_HOST": "http://127.0.0.1:9",
            "AGENT_AUTH": "jwt",
            "AGENT_JWT_SECRET": SECRET,
        }
    )


class Served:
    def __init__(self, base: str, app: Any, client: httpx.AsyncClient, gate: Gate) -> None:
        self.base, self.app, self.client, self.gate = base, app, client, gate

    @property
    def svc(self) -> Any:
        return self.app.state.services

    async def start(self, headers: dict[str, str], body: dict[str, Any] = BODY) -> dict[str, Any]:
        response = await self.client.post("/v1/agent/runs", json=body, headers=headers)
        assert response.status_code == 201, response.text
        return response.json()


@pytest.fixture
async def served(jwt_settings: Settings) -> AsyncIterator[Served]:
    """An app whose first run is held at a gate (so it is running during the test) and
    whose later runs answer at once."""
    gate = Gate()
    provider = GatedProvider(lambda request, i: GatedTurn(["Held ", gate, "answer"] if i == 0 else ["Quick answer"]))
    async with running_app(jwt_settings, provider=provider, registry=ToolRegistry(), embedder=None) as (base, app):
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            yield Served(base, app, client, gate)
            gate.open()


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer"},
        {"Authorization": "Basic YWxpY2U6cHc="},
        {"Authorization": "Bearer not.a.jwt"},
        bearer("alice", secret="another-secret-0123456789"),
        bearer("alice", exp_in=-3600),
        {"Authorization": "Bearer " + sign_hs256({"exp": int(time.time()) + 60}, SECRET)},  # no subject
    ],
    ids=["none", "empty", "basic", "malformed", "wrong-secret", "expired", "no-sub"],
)
async def test_bad_bearer_tokens_are_401(served: Served, headers: dict[str, str]) -> None:
    for method, path in [
        ("POST", "/v1/agent/runs"),
        ("POST", "/v1/agent/chat"),
        ("GET", "/v1/agent/conversations/conv_x"),
        ("POST", "/v1/agent/runs/run_x/cancel"),
        ("GET", "/v1/agent/runs/run_x/events"),
    ]:
        response = await served.client.request(method, path, json=BODY if method == "POST" else None, headers=headers)
        assert response.status_code == 401, (method, path, response.text)
        assert response.json()["error"] == "unauthenticated"
        assert response.headers["www-authenticate"] == "Bearer"
    assert served.svc.runs.active() == []


async def test_stream_tokens(served: Served) -> None:
    created = await served.start(ALICE)
    run_id, url = created["run_id"], created["stream_url"]
    events_path = f"/v1/agent/runs/{run_id}/events"
    auth = served.svc.auth
    token = url.split("token=", 1)[1]

    # The owner's stream URL needs no header (EventSource cannot send one).
    first = await collect_sse(served.client, "GET", url, stop=lambda e: e.event == "content_chunk")
    assert first[0].event == "run_started" and first[0].json()["run_id"] == run_id

    rejected = {
        "no token, no header": await served.client.get(events_path),
        "tampered": await served.client.get(f"{events_path}?token={token[:-2]}xx"),
        "garbage": await served.client.get(f"{events_path}?token=abc"),
    }
    other = await served.start(BOB)
    rejected["another run's token"] = await served.client.get(f"{events_path}?token={other['stream_url'].split('token=')[1]}")
    for why, response in rejected.items():
        assert response.status_code == 401, why
        assert response.json()["error"] == "unauthenticated", why

    # An expired link: still good while its run is live (a reader back from a long
    # network drop resumes), refused once the run has left memory.
    expired = auth.stream_token(run_id, "alice", now=time.time() - auth.stream_ttl_s - 60)
    assert auth.verify_stream_token(expired, run_id, run_live=True) == "alice"
    await served.svc.storage.db.flush()
    live_run = served.svc.runs._runs.pop(run_id)
    gone = await served.client.get(f"{events_path}?token={expired}")
    assert gone.status_code == 401 and gone.json()["error"] == "unauthenticated"
    served.svc.runs._runs[run_id] = live_run

    # A token minted for this run but for another user reads nothing either.
    foreign = await served.client.get(f"{events_path}?token={auth.stream_token(run_id, 'bob')}")
    assert foreign.status_code == 404 and foreign.json()["error"] == "not_found"
    # The owner's bearer header works instead of a token; another user's does not.
    by_header = await collect_sse(
        served.client, "GET", events_path, headers=ALICE, stop=lambda e: e.event == "content_chunk"
    )
    assert [e.id for e in by_header] == [e.id for e in first]
    assert (await served.client.get(events_path, headers=BOB)).status_code == 404


async def test_another_users_run_and_conversation_are_404(served: Served) -> None:
    created = await served.start(ALICE)
    run_id, conversation_id = created["run_id"], created["conversation_id"]
    run = served.svc.runs.get(run_id)
    await within(served.gate.reached.wait(), "the model turn to reach its gate")

    assert (await served.client.get(f"/v1/agent/runs/{run_id}/events", headers=BOB)).status_code == 404
    cancel = await served.client.post(f"/v1/agent/runs/{run_id}/cancel", headers=BOB)
    assert cancel.status_code == 404 and cancel.json()["error"] == "not_found"
    assert not run.finished, "another user's cancel must not touch the run"
    unknown = await served.client.post("/v1/agent/runs/run_nope/cancel", headers=ALICE)
    assert unknown.status_code == 404

    served.gate.open()
    await run.wait_finished()
    assert run.status == "completed"

    # Bob may not read Alice's conversation; naming its id gives him his own (ids are
    # per user), which holds nothing of hers and adds nothing to hers.
    assert (await served.client.get(f"/v1/agent/conversations/{conversation_id}", headers=BOB)).status_code == 404
    bobs = await served.start(BOB, {**BODY, "message": "Bob's own", "conversation_id": conversation_id})
    assert bobs["conversation_id"] == conversation_id
    await served.svc.runs.get(bobs["run_id"]).wait_finished()
    his = await served.client.get(f"/v1/agent/conversations/{conversation_id}", headers=BOB)
    assert [m["content"] for m in his.json()["messages"]][:1] == ["Bob's own"] and len(his.json()["messages"]) == 2
    assert (await served.client.get("/v1/agent/conversations/conv_nope", headers=ALICE)).status_code == 404

    # The owner gets the history, and a follow-up continues it.
    history = await served.client.get(f"/v1/agent/conversations/{conversation_id}", headers=ALICE)
    assert history.status_code == 200
    assert [(m["role"], m["content"]) for m in history.json()["messages"]] == [
        ("user", BODY["message"]),
        ("assistant", "Held answer"),
    ]
    follow_up = await served.start(ALICE, {**BODY, "message": "And then?", "conversation_id": conversation_id})
    assert follow_up["conversation_id"] == conversation_id
    await served.svc.runs.get(follow_up["run_id"]).wait_finished()
    history = await served.client.get(f"/v1/agent/conversations/{conversation_id}", headers=ALICE)
    assert [m["content"] for m in history.json()["messages"]][-2:] == ["And then?", "Quick answer"]

    # After the run left memory, ownership is still enforced from the run log.
    await served.svc.storage.db.flush()
    served.svc.runs.sweep(now=time.time() + served.svc.runs.grace_s + 1)
    assert served.svc.runs.get(run_id) is None
    assert (await served.client.get(f"/v1/agent/runs/{run_id}/events", headers=BOB)).status_code == 404
    assert (await served.client.post(f"/v1/agent/runs/{run_id}/cancel", headers=BOB)).status_code == 404
    replay = await collect_sse(served.client, "GET", created["stream_url"])
    assert replay[-1].event == "message_complete"


async def test_tokens_never_reach_the_logs(served: Served, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    created = await served.start(ALICE)
    served.gate.open()
    await collect_sse(served.client, "GET", created["stream_url"])
    await served.client.get("/v1/agent/runs/run_x/events", headers=bearer("alice", secret="wrong-secret-0123456789"))
    jwt = ALICE["Authorization"].split(" ", 1)[1]
    stream_token = created["stream_url"].split("token=", 1)[1]
    # The test's own HTTP client (httpx/httpcore) logs its URLs; only the server's side counts.
    server_side = [r for r in caplog.records if not r.name.startswith(("httpx", "httpcore"))]
    text = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in server_side)
    assert server_side, "expected the server to log something"
    assert jwt not in text and stream_token not in text and SECRET not in text
