"""The per-run start path (issue 23): work a run does not need is skipped, and what it
does need still happens — asserted on behaviour (queries made, what the model saw, the
events a client reads), never on time."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx

from app.config import Settings
from llm.types import ChatRequest
from tests.conftest import collect_sse, running_app
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn
from tests.test_compat_faces_owners import bearer, env

ALICE = bearer("alice")


async def test_a_new_conversation_skips_the_history_query_and_a_later_run_reads_it(tmp_path: Path) -> None:
    seen: list[list[str]] = []

    def turn(request: ChatRequest, _i: int) -> GatedTurn:
        seen.append([m.content for m in request.messages if isinstance(m.content, str)])
        return GatedTurn([f"answer {len(seen)}"])

    settings = Settings.from_env(env(tmp_path, AGENT_CONVERSATION_TITLES="off"))
    async with (
        running_app(settings, provider=GatedProvider(turn)) as (base, app),
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        store = app.state.services.conversations
        loads: list[str] = []
        real_load = store.load

        async def counting_load(conversation_id: str, user_id: str, **kw: Any) -> Any:
            loads.append(conversation_id)
            return await real_load(conversation_id, user_id, **kw)

        store.load = counting_load
        first = await collect_sse(
            http,
            "POST",
            "/v1/agent/chat",
            headers=ALICE,
            json={"message": "first question", "context_type": "workflow"},
        )
        assert first[0].event == "run_started" and first[-1].event == "message_complete"
        conversation = first[0].json()["conversation_id"]
        assert loads == []  # the run created the conversation: nothing to load
        second = await collect_sse(
            http,
            "POST",
            "/v1/agent/chat",
            headers=ALICE,
            json={"message": "second question", "context_type": "workflow", "conversation_id": conversation},
        )
        assert second[-1].event == "message_complete"
        assert loads == [conversation]
    assert seen[0] == ["first question"]
    assert seen[1] == ["first question", "answer 1", "second question"]


async def test_the_run_cap_counts_each_users_own_runs(tmp_path: Path) -> None:
    """Admission looks a user's runs up by user (issue 23): alice at her cap is refused,
    bob is not; alice's finished run, once forgotten, leaves nothing behind for her."""
    gate = Gate()
    provider = GatedProvider([GatedTurn(steps=("a", gate)), GatedTurn(steps=("b",)), GatedTurn(steps=("c",))])
    bob = bearer("bob")
    body = {"message": "hi", "context_type": "workflow"}
    settings = Settings.from_env(env(tmp_path, AGENT_MAX_RUNS_PER_USER="1", AGENT_CONVERSATION_TITLES="off"))
    async with (
        running_app(settings, provider=provider) as (base, app),
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        runs = app.state.services.runs
        first = await http.post("/v1/agent/runs", json=body, headers=ALICE)
        assert first.status_code == 201
        await asyncio.wait_for(gate.reached.wait(), 10)
        busy = await http.post("/v1/agent/runs", json=body, headers=ALICE)
        assert busy.status_code == 429 and busy.json()["error"] == "too_many_runs"
        other = await http.post("/v1/agent/runs", json=body, headers=bob)
        assert other.status_code == 201
        bobs = runs.get(other.json()["run_id"])
        await asyncio.wait_for(bobs.wait_finished(), 10)
        assert [r.id for r in runs.recent(bobs.user_id)] == [bobs.id]
        gate.open()
        alices = runs.get(first.json()["run_id"])
        await asyncio.wait_for(alices.wait_finished(), 10)
        while alices.durable < len(alices.events):  # its ending committed: swept, not kept
            await asyncio.sleep(0.01)
        assert runs.count_active(alices.user_id) == 0
        runs.sweep(now=time.time() + runs.finished_memory_s + 1)
        assert runs.get(alices.id) is None and runs.recent(alices.user_id) == []
        assert runs.recent(bobs.user_id) == []
        again = await http.post("/v1/agent/runs", json=body, headers=ALICE)
        assert again.status_code == 201
        assert [r.id for r in runs.recent(alices.user_id)] == [again.json()["run_id"]]
