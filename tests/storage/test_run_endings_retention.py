"""Every ending of a run records when it ended (issue 25), on both engines, so the
retention pass compacts it: a run ended by a bare status write (``set_status``, as the
recovery of a run found ended does), one cancelled while it was queued behind another
turn, and — for databases written before the fix — a finished run without an end time,
which migration 20 gives one."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from app.config import Settings
from app.retention import DAY_S, RetentionPolicy, retention_pass
from storage.open import open_storage
from storage.records import NewRun, RunEvent, RunWrite
from tests.conftest import running_app
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn
from tests.support.procs import until
from tests.test_compat_faces_owners import bearer, env

ALICE = bearer("alice")
#: A pass as if two days went by, keeping one day of event logs: every ended run is old.
POLICY = RetentionPolicy(run_events_days=1.0)


async def ends(http: httpx.AsyncClient, run_id: str, status: str) -> None:
    """Wait (on the run route, no fixed sleep) until the run's stored status is ``status``."""
    for _ in range(1500):
        got = await http.get(f"/v1/agent/runs/{run_id}")
        assert got.status_code == 200, got.text
        if got.json()["status"] == status:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"run {run_id} never ended {status}: {got.json()}")


def chunk(seq: int, text: str) -> RunEvent:
    return RunEvent(seq, "content_chunk", orjson.dumps({"chunk": text}).decode())


async def a_run_with_text(s: Any, run_id: str) -> None:
    await s.runs.create(NewRun(run_id, f"conv-{run_id}", "alice", "knowledge", orjson.dumps({"message": "hi"})))
    started = RunEvent(1, "run_started", orjson.dumps({"run_id": run_id}).decode())
    events = [started, chunk(2, "one "), chunk(3, "two "), chunk(4, "three")]
    await s.runs.commit(RunWrite(run_id, f"conv-{run_id}", "alice", events=events, status="running"))


async def test_a_run_ended_by_set_status_is_compacted_and_keeps_its_first_end(store_engine: Any) -> None:
    s = store_engine
    await a_run_with_text(s, "ended")
    await a_run_with_text(s, "paused")
    await s.runs.set_status(["ended"], "completed")
    await s.runs.set_status(["paused"], "interrupted")  # not an ending: carried on later

    ended = await s.history.run("alice", "ended")
    paused = await s.history.run("alice", "paused")
    assert ended is not None and ended.status == "completed" and ended.finished_at is not None
    assert paused is not None and paused.finished_at is None
    first_end = ended.finished_at
    await s.runs.set_status(["ended"], "failed")  # a second ending does not move the first
    again = await s.history.run("alice", "ended")
    assert again is not None and again.finished_at == first_end

    done = await retention_pass(s.retention, s.history, POLICY, now=time.time() + 2 * DAY_S)
    assert done.runs_compacted == 1 and done.events_removed == 2
    compacted = await s.history.run("alice", "ended")
    assert compacted is not None and compacted.events_compacted_at is not None
    text = [orjson.loads(e.data)["chunk"] for e in await s.runs.events_after("ended", 0) if e.event == "content_chunk"]
    assert text == ["one two three"]
    untouched = await s.history.run("alice", "paused")
    assert untouched is not None and untouched.events_compacted_at is None


async def test_a_run_cancelled_while_queued_is_compacted(shared_db: dict[str, str], tmp_path: Path) -> None:
    settings = Settings.from_env(env(tmp_path, **shared_db))
    gate = Gate()
    provider = GatedProvider([GatedTurn(steps=("held ", gate, "answer"))])
    body = {"context_type": "workflow", "conversation_id": "queued", "multitask": "enqueue"}
    async with (
        running_app(settings, provider=provider) as (base, _),
        httpx.AsyncClient(base_url=base, timeout=30, headers=ALICE) as http,
    ):
        first = await http.post("/v1/agent/runs", json={**body, "message": "the first turn"})
        assert first.status_code == 201, first.text
        await until(gate.reached.is_set, "the first turn at its gate", 10)
        second = await http.post("/v1/agent/runs", json={**body, "message": "the queued turn"})
        assert second.status_code == 201, second.text
        queued_id = second.json()["run_id"]
        cancelled = await http.post(f"/v1/agent/runs/{queued_id}/cancel")
        assert cancelled.status_code in (200, 202), cancelled.text

        await ends(http, queued_id, "cancelled")
        gate.open()
        await ends(http, first.json()["run_id"], "completed")

    storage = await open_storage(shared_db.get("AGENT_DATABASE_URL") or shared_db["AGENT_DB_PATH"])
    try:
        queued = await storage.history.run("alice", queued_id)
        assert queued is not None and queued.status == "cancelled" and queued.finished_at is not None
        done = await retention_pass(storage.retention, storage.history, POLICY, now=time.time() + 2 * DAY_S)
        assert done.runs_compacted == 2  # the cancelled queued run and the first
        queued = await storage.history.run("alice", queued_id)
        assert queued is not None and queued.events_compacted_at is not None
    finally:
        await storage.close()


async def test_migration_20_gives_finished_runs_without_an_end_time_one(shared_db: dict[str, str]) -> None:
    """A database from before the fix: a run ended by a bare status write has no end time
    (written here as the old ``set_status`` left it) and version 20 is not applied yet."""
    target = shared_db.get("AGENT_DATABASE_URL") or shared_db["AGENT_DB_PATH"]
    storage = await open_storage(target)
    try:
        await a_run_with_text(storage, "old")
        await a_run_with_text(storage, "live")
        await storage.runs.sql.execute(
            [
                ("UPDATE runs SET status = 'completed', input = NULL, checkpoint = NULL WHERE id = ?", ("old",)),
                ("DELETE FROM schema_version WHERE version = 20", ()),
            ]
        )
        before = await storage.history.run("alice", "old")
        assert before is not None and before.finished_at is None
    finally:
        await storage.close()

    storage = await open_storage(target)  # migrates: version 20 again
    try:
        old = await storage.history.run("alice", "old")
        live = await storage.history.run("alice", "live")
        assert old is not None and old.finished_at is not None and old.started_at is not None
        assert old.finished_at == old.started_at  # the stand-in for the unknown end
        assert live is not None and live.status == "running" and live.finished_at is None
        done = await retention_pass(storage.retention, storage.history, POLICY, now=time.time() + 2 * DAY_S)
        assert done.runs_compacted == 1
    finally:
        await storage.close()
