"""Issue 23: a run taken over before its first checkpoint starts again from its request.

A replica that lapses between ``run_started`` and its run's first step (history, tool
selection, the prompt: the step that stores the first checkpoint) leaves a run with a
log and no checkpoint. The replica that takes it over used to end it ``run_interrupted``
(``run_started, error, message_complete``: 11 of 1,000 runs in bench/workers_log_audit.py
at a 0.5 s lease). Its request is stored with it, and no tool ran, so the new owner runs
it from the start: the events already logged stay (they were delivered), ``run_resumed``
(``checkpoint_seq`` 0) follows them instead of a second ``run_started`` — ``discarded``
naming anything logged after ``run_started`` — and the run ends with one
``message_complete``. A run whose request was not kept still ends ``run_interrupted``,
saying so. On both engines, with a real replica (the agent loop over a scripted model)
and a follower that was reading the run before the take-over.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from agenttools.core.registry import ToolRegistry
from app.config import Settings
from app.runs.records import Caller, ChatInput, encode_run_input
from app.server.auth import LOCAL_USER
from events import ContentChunk, RunStarted
from storage.open import open_storage
from storage.records import NewRun, RunEvent, RunWrite
from tests.conftest import collect_sse, running_app
from tests.storage.conftest import ENGINES
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn
from tests.support.postgres import TestPostgres
from tests.support.procs import until

pytestmark = pytest.mark.slow  # a replica per test, a lease waited out

RUN, CONV = "run_no_checkpoint", "conv_no_checkpoint"
ANSWER = "answered after the take-over"


@pytest.fixture(params=ENGINES)
async def database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[dict[str, str]]:
    if request.param == "sqlite":
        yield {"AGENT_DB_PATH": str(tmp_path / "shared.sqlite3")}
    else:
        server: TestPostgres = request.getfixturevalue("pg_server")
        with server.database() as url:
            yield {
                "AGENT_DATABASE_URL": url,
                "AGENT_DB_PATH": str(tmp_path / "unused.sqlite3"),
                "AGENT_SECRET_KEY": "replicas-share-this-key-0123456789",
            }


def replica_settings(db: dict[str, str]) -> Settings:
    return Settings.from_env(
        {
            **db,
            "AGENT_MANDATORY_CONTEXTS": "none",
            "AGENT_INGEST_SAMPLE_KB": "false",
            "AGENT_EMBEDDER": "none",
            "OLLAMA_HOST": "http://127.0.0.1:9",
            "AGENT_RUN_LEASE_S": "1",  # a take-over within about a second of the lapse
        }
    )


async def leave_a_run_without_checkpoint(
    store: Any, *, partial: bool, keep_input: bool = True, lease_s: float = 1.5
) -> None:
    """What a replica that stalls past its lease between ``run_started`` and its first
    step leaves: the run (its request stored, unless ``keep_input`` is off), its
    ``run_started`` — and, with ``partial``, one more event no checkpoint covers."""
    chat = ChatInput("tell me again", "knowledge", {}, CONV)
    await store.create(
        NewRun(
            id=RUN,
            conversation_id=CONV,
            user_id=LOCAL_USER,
            context_type="knowledge",
            # Without: a row stored before runs kept their input (every run keeps it now).
            input=encode_run_input(chat, Caller(LOCAL_USER)) if keep_input else None,  # type: ignore[arg-type]
            lease_owner="stalled-replica",
            lease_s=lease_s,
        )
    )
    logged = [RunStarted(run_id=RUN, conversation_id=CONV)] + ([ContentChunk(chunk="half a tho")] if partial else [])
    await store.commit(
        RunWrite(
            RUN,
            CONV,
            LOCAL_USER,
            events=[RunEvent(i, e.name, e.to_json().decode()) for i, e in enumerate(logged, 1)],
        )
    )


def frames(events: list[Any]) -> list[tuple[int, str, str]]:
    return [(int(e.id), e.event, e.data) for e in events if e.id is not None]


@pytest.mark.parametrize("partial", [False, True], ids=["run_started only", "with a partial event"])
async def test_a_run_taken_over_before_its_first_checkpoint_starts_again(
    database: dict[str, str], partial: bool
) -> None:
    settings = replica_settings(database)
    async with AsyncExitStack() as stack:
        other = await open_storage(settings.database_url or settings.db_path)
        stack.push_async_callback(other.close)
        gate = Gate()
        provider = GatedProvider(lambda _request, _i: GatedTurn(steps=("answered ", gate, "after the take-over")))
        base, app = await stack.enter_async_context(
            running_app(settings, provider=provider, registry=ToolRegistry(), embedder=None)
        )
        svc = app.state.services
        await leave_a_run_without_checkpoint(other.runs, partial=partial)  # after start-up: a take-over
        client = await stack.enter_async_context(httpx.AsyncClient(timeout=60))
        await asyncio.wait_for(gate.reached.wait(), 60)  # taken over, restarted, in its model turn
        # A follower reading the run from its first event: what the stalled replica logged,
        # then the new owner's events, live, as one stream.
        follower = asyncio.create_task(collect_sse(client, "GET", f"{base}/v1/agent/runs/{RUN}/events"))
        run = svc.runs.get(RUN)
        assert run is not None
        await until(lambda: run.followers == 1, "the follower attached")
        gate.open()
        seen = frames(await asyncio.wait_for(follower, 60))
        assert svc.runs.counters.taken_over == 1
        log = [(e.seq, e.event, e.data) for e in await svc.run_store.events_after(RUN, 0)]
        names = [name for _, name, _ in log]
        assert [seq for seq, _, _ in log] == list(range(1, len(log) + 1))  # gap-free
        assert names.count("run_started") == 1 and names[0] == "run_started"
        assert names.count("message_complete") == 1 and names[-1] == "message_complete"
        assert "error" not in names
        resumed = orjson.loads(next(d for _, n, d in log if n == "run_resumed"))
        assert names.index("run_resumed") == (2 if partial else 1)  # right after what was logged
        assert resumed["checkpoint_seq"] == 0 and "starts again from its request" in resumed["reason"]
        assert resumed["discarded"] == (
            {"from_seq": 2, "to_seq": 2, "reason": "the run had no checkpoint yet; it starts again from its request"}
            if partial
            else None
        )
        assert orjson.loads(log[-1][2])["status"] == "completed"
        text = "".join(orjson.loads(d)["chunk"] for seq, n, d in log if n == "content_chunk" and seq > 2)
        assert ANSWER in text
        assert seen == log  # the follower saw the log as it is, once
        stored = await svc.run_store.get(RUN)
        assert stored is not None and stored.status == "completed"
        conversation = await client.get(f"{base}/v1/agent/conversations/{CONV}")
        users = [m["content"] for m in conversation.json()["messages"] if m["role"] == "user"]
        assert users == ["tell me again"]  # the request, stored once


async def test_a_run_without_its_request_still_ends_run_interrupted_and_says_why(database: dict[str, str]) -> None:
    settings = replica_settings(database)
    async with AsyncExitStack() as stack:
        other = await open_storage(settings.database_url or settings.db_path)
        stack.push_async_callback(other.close)
        provider = GatedProvider(lambda _request, _i: GatedTurn(steps=(ANSWER,)))
        base, app = await stack.enter_async_context(
            running_app(settings, provider=provider, registry=ToolRegistry(), embedder=None)
        )
        await leave_a_run_without_checkpoint(other.runs, partial=False, keep_input=False, lease_s=0.05)
        client = await stack.enter_async_context(httpx.AsyncClient(timeout=60))
        svc = app.state.services
        await until(lambda: (run := svc.runs.get(RUN)) is not None and run.finished, "the run taken over and ended")
        seen = await asyncio.wait_for(collect_sse(client, "GET", f"{base}/v1/agent/runs/{RUN}/events"), 60)
        assert [e.event for e in seen if e.id is not None] == ["run_started", "error", "message_complete"]
        error = seen[1].json()
        assert error["code"] == "run_interrupted"
        assert "no checkpoint yet and its request was not kept" in error["message"]
        assert seen[-1].json()["status"] == "failed"
        assert svc.runs.counters.taken_over == 1 and provider.requests == []
