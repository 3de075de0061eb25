"""Issue 23: a worker that takes back a lapsed lease must not let its *old* copy of the
run go on writing when another worker claimed the run in between (split-brain: tokens
missing from the log, two ``message_complete``). Each claim that changes hands mints a
new lease epoch; a copy carries the epoch it was claimed under, and ``take_over``
continues a copy still running here only when that epoch is still current.

Two SQLite stores on one file, as two ``--workers`` are, each checking its leases on
every step. Worker A is a real ``RunManager`` whose lease upkeep is driven by hand
(``take_over``), so what happens in between is chosen, not timed; worker B is a bare
store claiming like a sibling. The agent emits a token, then waits on a gate, then the
rest of its tokens and the ending.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import orjson

from app.runs.manager import RunManager
from app.runs.records import Caller, ChatInput, encode_run_input
from app.runs.run import Run, terminal_event
from app.runs.state import RunState
from events import ContentChunk, RunResumed, RunStarted
from storage.interfaces import RunStore
from storage.records import NewRun, RunEvent, RunWrite
from storage.sqlite import open_sqlite_storage
from storage.sqlite.runs import SqliteRunStore
from tests.support.procs import until

LEASE_S = 0.5  # written leases live 0.35 s: a lapse is waited for as a condition
RUN = "run_fenced"
TOKENS = 4


class GatedAgent:
    """Each copy it is handed emits ``run_resumed`` and token 0, then waits for its gate,
    then tokens 1.. and the ending."""

    def __init__(self) -> None:
        self.copies: list[Run] = []
        self.gates: list[asyncio.Event] = []

    async def __call__(
        self,
        run: Run,
        chat: ChatInput,
        caller: Caller,
        state: RunState | None = None,
        resumed: RunResumed | None = None,
    ) -> None:
        assert resumed is not None
        gate = asyncio.Event()
        self.copies.append(run)
        self.gates.append(gate)
        await run.emit_step([resumed, ContentChunk(chunk="t0;")])
        await gate.wait()
        for i in range(1, TOKENS):
            run.emit(ContentChunk(chunk=f"t{i};"))
        await run.emit_step([terminal_event(run, "completed")], finished=True)


async def leave_a_run(store: RunStore, *, checkpoint: bool = True) -> None:
    """A run left by a dead replica with a checkpoint at its first event (or, without
    ``checkpoint``, before its first step stored one), lease lapsing."""
    await store.create(
        NewRun(
            id=RUN,
            conversation_id="conv_f",
            user_id="alice",
            context_type="knowledge",
            input=encode_run_input(ChatInput("fence me", "knowledge", {}), Caller("alice")),
            lease_owner="replica-dead",
            lease_s=0.01,
        )
    )
    started = RunStarted(run_id=RUN, conversation_id="conv_f")
    await store.commit(
        RunWrite(
            RUN,
            "conv_f",
            "alice",
            events=[RunEvent(1, started.name, started.to_json().decode())],
            checkpoint=RunState(system="s", tool_names=[], budget=1, messages=[]).encode() if checkpoint else None,
            checkpoint_seq=1 if checkpoint else None,
            status="running",
        )
    )


async def claim_when_lapsed(store: RunStore, owner: str) -> Any:
    """``owner`` claims the run once its lease ran out (on the database's clock)."""
    deadline = time.monotonic() + 20
    while True:
        taken = [r for r in await store.claim(owner, LEASE_S) if r.id == RUN]
        if taken:
            return taken[0]
        assert time.monotonic() < deadline, "the lease never ran out"
        await asyncio.sleep(0.02)


async def take_over_when_lapsed(manager: RunManager, store: RunStore) -> int:
    """Worker A's own periodic claim, once the run's lease ran out (nothing renews it:
    A's lease upkeep is not running)."""
    sql = cast(SqliteRunStore, store).sql
    deadline = time.monotonic() + 20
    while True:
        row = await sql.fetchone(
            "SELECT lease_until < ((julianday('now') - 2440587.5) * 86400.0) FROM runs WHERE id = ?", (RUN,)
        )
        if row and row[0]:
            return await manager.take_over()
        assert time.monotonic() < deadline, "the lease never ran out"
        await asyncio.sleep(0.02)


@asynccontextmanager
async def two_workers(
    tmp_path: Path, *, checkpoint: bool = True
) -> AsyncIterator[tuple[RunManager, GatedAgent, RunStore, RunStore]]:
    db = tmp_path / "agent.sqlite3"
    a_storage = await open_sqlite_storage(db)
    b_storage = await open_sqlite_storage(db)
    for s in (a_storage, b_storage):
        assert isinstance(s.runs, SqliteRunStore)
        s.runs.guard_leases = True
    agent = GatedAgent()
    manager = RunManager(store=cast(RunStore, a_storage.runs), agent=agent, lease_s=LEASE_S, cancel_poll_s=3600)
    try:
        await leave_a_run(a_storage.runs, checkpoint=checkpoint)
        yield manager, agent, cast(RunStore, a_storage.runs), cast(RunStore, b_storage.runs)
    finally:
        for gate in agent.gates:
            gate.set()
        await manager.shutdown(0)
        await b_storage.close()
        await a_storage.close()


async def the_log(store: RunStore) -> list[RunEvent]:
    return await store.events_after(RUN, 0)


def tokens(log: list[RunEvent]) -> list[str]:
    return [orjson.loads(e.data)["chunk"] for e in log if e.event == "content_chunk"]


async def test_a_stale_copy_is_not_continued_after_another_workers_claim(tmp_path: Path) -> None:
    async with two_workers(tmp_path) as (manager, agent, a_store, b_store):
        assert await take_over_when_lapsed(manager, a_store) == 1  # copy 1 (from the dead replica)
        await until(lambda: len(agent.copies) == 1 and agent.copies[0].durable >= 3, "copy 1's first token", 20)
        stale = agent.copies[0]
        # Copy 1 stalls past its lease (nobody renews it here); worker B claims the run,
        # then stalls too before writing anything, and A's periodic claim takes it back.
        b_claim = await claim_when_lapsed(b_store, "replica-b")
        assert b_claim.lease_epoch != stale.lease_epoch
        assert await take_over_when_lapsed(manager, a_store) == 1
        assert manager.counters.stale_copies_stopped == 1
        assert stale.lost and stale.task is not None
        await until(lambda: stale.task is not None and stale.task.done(), "the stale copy stopped", 20)
        assert stale.emit(ContentChunk(chunk="late;")) is None  # stores and shows nothing more
        await until(lambda: len(agent.copies) == 2, "copy 2 started", 20)
        fresh = agent.copies[1]
        assert manager.get(RUN) is fresh and fresh.lease_epoch not in (stale.lease_epoch, b_claim.lease_epoch)
        agent.gates[0].set()  # were it still going, copy 1 would write its tokens now
        agent.gates[1].set()
        await fresh.wait_settled()
        log = await the_log(a_store)
        assert [e.seq for e in log] == list(range(1, len(log) + 1))  # gap-free
        assert [e.event for e in log].count("message_complete") == 1
        assert [e.event for e in log].count("run_resumed") == 2
        assert tokens(log)[-TOKENS:] == [f"t{i};" for i in range(TOKENS)]  # the new copy's, all of them
        stored = await a_store.get(RUN)
        assert stored is not None and stored.status == "completed"


async def test_a_copy_whose_lease_lapsed_with_no_claim_between_goes_on(tmp_path: Path) -> None:
    async with two_workers(tmp_path) as (manager, agent, a_store, _b_store):
        assert await take_over_when_lapsed(manager, a_store) == 1
        await until(lambda: len(agent.copies) == 1 and agent.copies[0].durable >= 3, "copy 1's first token", 20)
        copy = agent.copies[0]
        # Its lease lapses; nobody else claims; A's own claim takes it back: same copy.
        assert await take_over_when_lapsed(manager, a_store) == 0
        assert manager.counters.stale_copies_stopped == 0 and not copy.lost and manager.get(RUN) is copy
        agent.gates[0].set()
        await copy.wait_settled()
        log = await the_log(a_store)
        assert [e.seq for e in log] == list(range(1, len(log) + 1))
        assert [e.event for e in log].count("message_complete") == 1
        assert tokens(log) == [f"t{i};" for i in range(TOKENS)]
        assert len(agent.copies) == 1


async def test_a_run_with_no_checkpoint_restarts_from_its_request_under_each_claim(tmp_path: Path) -> None:
    """A→B→A before any checkpoint: each copy here starts again from the request (no
    second ``run_started``); the stale one stores nothing more; one ending."""
    async with two_workers(tmp_path, checkpoint=False) as (manager, agent, a_store, b_store):
        assert await take_over_when_lapsed(manager, a_store) == 1
        await until(lambda: len(agent.copies) == 1 and agent.copies[0].durable >= 3, "copy 1's first token", 20)
        stale = agent.copies[0]
        await claim_when_lapsed(b_store, "replica-b")
        assert await take_over_when_lapsed(manager, a_store) == 1
        await until(lambda: len(agent.copies) == 2, "copy 2 started", 20)
        fresh = agent.copies[1]
        assert stale.lost and manager.get(RUN) is fresh
        agent.gates[0].set()
        agent.gates[1].set()
        await fresh.wait_settled()
        log = await the_log(a_store)
        names = [e.event for e in log]
        assert [e.seq for e in log] == list(range(1, len(log) + 1))
        assert names.count("run_started") == 1 and names.count("message_complete") == 1
        resumed = [orjson.loads(e.data) for e in log if e.event == "run_resumed"]
        assert [r["checkpoint_seq"] for r in resumed] == [0, 0]
        # Copy 1's run_resumed and token (2-3) were covered by no checkpoint: discarded.
        assert resumed[0]["discarded"] is None and resumed[1]["discarded"]["from_seq"] == 2
        assert resumed[1]["discarded"]["to_seq"] == 3
        assert tokens(log)[-TOKENS:] == [f"t{i};" for i in range(TOKENS)]
        stored = await a_store.get(RUN)
        assert stored is not None and stored.status == "completed"
