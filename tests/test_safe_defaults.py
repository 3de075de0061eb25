"""Safe by default with ``AGENT_AUTH=none``: rate limits per client address (one noisy
client cannot lock everyone out), admin routes closed unless ``AGENT_ADMIN_OPEN=true``,
and caps on what a model may put in one chunk and one answer (``app/agent/output_caps.py``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from agenttools.core.registry import ToolRegistry
from app.agent.output_caps import TurnTextCap, answer_notice, cap_chunk, cap_text, chunk_notice
from app.config import Settings
from app.server.auth import sign_hs256
from llm.scripted import ScriptedProvider
from tests.conftest import running_app

BAD = {"message": "", "context_type": "knowledge"}  # refused after the rate limit counted it
SECRET = "safe-defaults-secret-0123456789-abcdef"


def settings(tmp_path: Path, **env: str) -> Settings:
    return Settings.from_env(
        {"AGENT_DB_PATH": str(tmp_path / "a.db"), "AGENT_INGEST_SAMPLE_KB": "false", "AGENT_EMBEDDER": "none",
         "AGENT_LLM_PROVIDER": "extractive", "OLLAMA_HOST": "http://127.0.0.1:9", **env}
    )


def from_address(address: str, **kwargs: Any) -> httpx.AsyncClient:
    """A client whose connections come from ``address`` (any of 127.0.0.0/8 on Linux)."""
    return httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(local_address=address), timeout=10, **kwargs)


async def test_without_auth_each_client_address_has_its_own_rate_limit(tmp_path: Path) -> None:
    async with running_app(settings(tmp_path, AGENT_REQUESTS_PER_MINUTE="3"), provider=ScriptedProvider([]),
                           registry=ToolRegistry(), embedder=None) as (base, _):
        async with from_address("127.0.0.1") as noisy, from_address("127.0.0.2") as other:
            flood = [(await noisy.post(f"{base}/v1/agent/chat", json=BAD)).status_code for _ in range(5)]
            others = [(await other.post(f"{base}/v1/agent/chat", json=BAD)).status_code for _ in range(3)]
            limited = await other.post(f"{base}/v1/agent/chat", json=BAD)
    assert flood == [400, 400, 400, 429, 429]
    assert others == [400, 400, 400]  # not locked out by the noisy client
    assert limited.status_code == 429 and limited.json()["error"] == "rate_limited"


async def test_with_jwt_the_rate_limit_follows_the_user_not_the_address(tmp_path: Path) -> None:
    s = settings(tmp_path, AGENT_REQUESTS_PER_MINUTE="2", AGENT_AUTH="jwt", AGENT_JWT_SECRET=SECRET)

    def bearer(user: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {sign_hs256({'sub': user, 'exp': time.time() + 60}, SECRET)}"}

    async with running_app(s, provider=ScriptedProvider([]), registry=ToolRegistry(), embedder=None) as (base, _):
        async with from_address("127.0.0.1") as one, from_address("127.0.0.2") as two:
            alice = [(await c.post(f"{base}/v1/agent/chat", json=BAD, headers=bearer("alice"))).status_code
                     for c in (one, two, one)]
            bob = (await one.post(f"{base}/v1/agent/chat", json=BAD, headers=bearer("bob"))).status_code
    assert alice == [400, 400, 429]  # one budget across both addresses
    assert bob == 400


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("/v1/kb/documents", {"documents": [{"title": "T", "text": "some text"}]}),
        ("/v1/admin/keywords/prune", {"min_usage": 1, "older_than_days": 0}),
    ],
)
async def test_admin_routes_are_closed_without_auth_unless_opened(tmp_path: Path, route: str, body: Any) -> None:
    async with running_app(settings(tmp_path / "closed"), provider=ScriptedProvider([]), embedder=None) as (base, _):
        async with httpx.AsyncClient(timeout=10) as client:
            closed = await client.post(f"{base}{route}", json=body)
    opened_settings = settings(tmp_path / "open", AGENT_ADMIN_OPEN="true")
    async with running_app(opened_settings, provider=ScriptedProvider([]), embedder=None) as (base, _):
        async with httpx.AsyncClient(timeout=10) as client:
            opened = await client.post(f"{base}{route}", json=body)
    assert closed.status_code == 403 and closed.json()["error"] == "forbidden"
    assert "AGENT_ADMIN_OPEN" in closed.json()["detail"]
    assert opened.status_code == 200


def test_admin_open_is_off_by_default_and_read_from_the_environment(tmp_path: Path) -> None:
    assert settings(tmp_path).admin_open is False
    assert settings(tmp_path, AGENT_ADMIN_OPEN="true").admin_open is True
    with pytest.raises(Exception, match="AGENT_ADMIN_OPEN"):
        settings(tmp_path, AGENT_ADMIN_OPEN="maybe")


# --- output caps ---------------------------------------------------------------------------------


def test_a_chunk_over_the_cap_is_cut_with_a_notice() -> None:
    assert cap_chunk("short", 10) == "short"
    assert cap_chunk("x" * 10, 10) == "x" * 10
    assert cap_chunk("x" * 5_000_000, 100) == "x" * 100 + chunk_notice(100)
    assert cap_text("y" * 300, 256) == "y" * 256 + answer_notice(256)


def test_a_turn_keeps_at_most_the_answer_cap_and_says_so_once() -> None:
    cap = TurnTextCap(max_chunk_chars=100, max_answer_chars=250)
    kept = [cap.admit("a" * 80), cap.admit("b" * 500), cap.admit("c" * 60), cap.admit("d" * 50), cap.admit("e")]
    assert kept[0] == "a" * 80
    assert kept[1] == "b" * 100 + chunk_notice(100)  # the 5 MB line problem, in small
    assert kept[2] == "c" * 60
    assert kept[3] == "d" * 10 + answer_notice(250)  # 80 + 100 + 60 + 10 = 250
    assert kept[4] == ""  # the answer is full: later chunks are dropped
    assert cap.full and cap.cut and cap.chunks_cut == 1
    assert cap.chars_dropped == 400 + 40 + 1
    text = "".join(kept)
    assert text.count(answer_notice(250)) == 1


def test_an_answer_exactly_at_the_cap_is_not_marked_cut() -> None:
    cap = TurnTextCap(max_chunk_chars=100, max_answer_chars=200)
    assert cap.admit("a" * 100) + cap.admit("b" * 100) == "a" * 100 + "b" * 100
    assert not cap.cut
    assert cap.admit("c") == answer_notice(200)  # one more character is one too many


def _agent_applies_caps() -> bool:
    from dataclasses import fields

    from app.agent.deps import AgentSettings

    return {"max_chunk_chars", "max_answer_chars"} <= {f.name for f in fields(AgentSettings)}


@pytest.mark.skipif(
    not _agent_applies_caps(),
    reason="waiting for the agent loop to apply app/agent/output_caps.py (AgentSettings.max_chunk_chars/max_answer_chars)",
)
async def test_a_huge_model_line_is_cut_in_the_stream_and_in_the_stored_answer(tmp_path: Path) -> None:
    from tests.conftest import collect_sse
    from tests.support.gated_provider import GatedProvider, GatedTurn

    huge = "z" * 5_000_000
    provider = GatedProvider([GatedTurn(["Intro. ", huge, "y" * 900, "w" * 900, " tail"])])
    s = settings(tmp_path, AGENT_MANDATORY_CONTEXTS="none", AGENT_MAX_CHUNK_CHARS="1000",
                 AGENT_MAX_ANSWER_CHARS="1500")
    body = {"message": "Say a lot.", "context_type": "workflow", "context": {}}
    async with running_app(s, provider=provider, registry=ToolRegistry(), embedder=None) as (base, app):
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            events = await collect_sse(client, "POST", "/v1/agent/chat", json=body)
            await app.state.services.storage.db.flush()
            conversation_id = events[0].json()["conversation_id"]
            stored = (await client.get(f"/v1/agent/conversations/{conversation_id}")).json()["messages"]
    chunks = [e.json()["chunk"] for e in events if e.event == "content_chunk"]
    assert chunks[0] == "Intro. "
    assert chunks[1] == "z" * 1000 + chunk_notice(1000)  # the 5 MB line, cut
    assert chunks[2] == "y" * 493 + answer_notice(1500)  # 7 + 1000 + 493 = the answer cap
    assert len(chunks) == 3  # the rest is dropped
    streamed = "".join(chunks)
    [answer] = [m["content"] for m in stored if m["role"] == "assistant"]
    assert answer == streamed
    assert events[-1].json()["status"] == "completed"
