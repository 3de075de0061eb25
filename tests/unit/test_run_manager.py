"""The run manager (``app/runs/manager.py``) in-process, over a real SQLite store opened
with ``storage.open.open_storage`` on a temp file, running the real agent loop with a
scripted (or gated) model: admission, the event log, cancels, the multitask policies,
the per-user cap, and events shown to followers only once stored."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest

from app.runs.live_reader import read_durable
from app.runs.manager import RunManager
from app.runs.records import Caller, ChatInput
from app.runs.run import Run
from llm.provider import Provider
from llm.scripted import ScriptedProvider, ScriptedTurn
from storage.errors import ConversationBusy, TooManyRuns
from storage.records import RunEvent, RunWrite
from tests.support.agent_kit import build_agent, names, payloads, registry_of
from tests.support.deadline import within
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn
from tests.support.procs import until

ALICE, BOB = Caller("alice"), Caller("bob")


Managers = Callable[..., RunManager]


@pytest.fixture
async def manager_for(storage: Any) -> AsyncIterator[Managers]:
    """``manager_for(provider, store=None)``: a manager running the real agent loop with
    ``provider`` (no tools) on the temp store; shut down after the test."""
    made: list[RunManager] = []

    def make(provider: Provider, store: Any = None) -> RunManager:
        agent = build_agent(
            provider, registry_of(), conversations=storage.conversations, tool_log=storage.tool_calls
        )
        manager = RunManager(store=store if store is not None else storage.runs, agent=agent.run)
        made.append(manager)
        return manager

    yield make
    for manager in made:
        await manager.shutdown(0)


def chat(message: str, conversation_id: str | None = None, multitask: Any = "enqueue") -> ChatInput:
    return ChatInput(message, "workflow", {}, conversation_id, multitask)


async def stored_events(storage: Any, run: Run) -> list[RunEvent]:
    await run.wait_settled()
    return await storage.runs.events_after(run.id, 0)


async def loop_turns(n: int) -> None:
    """Let the event loop run ``n`` times (no clock involved): tasks just created take
    their first steps."""
    for _ in range(n):
        await asyncio.sleep(0)


def status_of(events: list[RunEvent]) -> str:
    ends = payloads(events, "message_complete")
    assert len(ends) == 1, names(events)
    return str(ends[0]["status"])


async def test_a_submitted_run_is_stored_in_order_from_run_started_to_one_message_complete(
    storage: Any, manager_for: Managers
) -> None:
    manager = manager_for(ScriptedProvider([ScriptedTurn(chunks=("Hello", " there"))]))
    run = await manager.submit(chat("hi"), ALICE)
    events = await stored_events(storage, run)
    assert names(events) == [
        "run_started", "tool_selection", "message_start", "content_chunk", "content_chunk", "message_complete",
    ]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert [(e.seq, e.event, e.data) for e in events] == [(e.seq, e.event, e.data) for e in run.events]
    started = payloads(events, "run_started")[0]
    assert started == {"run_id": run.id, "conversation_id": run.conversation_id}
    assert status_of(events) == "completed"
    stored = await storage.runs.get(run.id)
    assert stored is not None and stored.status == "completed"
    history = await storage.conversations.load(run.conversation_id, "alice")
    assert [(m.role, m.content) for m in history] == [("user", "hi"), ("assistant", "Hello there")]


async def test_cancelling_a_live_run_ends_it_cancelled_and_keeps_what_was_said(
    storage: Any, manager_for: Managers
) -> None:
    gate = Gate()
    manager = manager_for(GatedProvider([GatedTurn(steps=("Half an ", gate, "answer"))]))
    run = await manager.submit(chat("tell me"), ALICE)
    await within(gate.reached.wait(), "the model turn to reach its gate")
    assert not run.finished
    await manager.cancel(run)
    events = await stored_events(storage, run)
    assert names(events)[0] == "run_started" and names(events)[-1] == "message_complete"
    assert status_of(events) == "cancelled"
    stored = await storage.runs.get(run.id)
    assert stored is not None and stored.status == "cancelled"
    history = await storage.conversations.load(run.conversation_id, "alice")
    assert [(m.role, m.content) for m in history] == [("user", "tell me"), ("assistant", "Half an ")]


async def test_enqueue_waits_for_the_earlier_run_and_sees_its_turn(storage: Any, manager_for: Managers) -> None:
    gate = Gate()
    provider = GatedProvider([GatedTurn(steps=("first ", gate, "answer")), GatedTurn(steps=("second answer",))])
    manager = manager_for(provider)
    first = await manager.submit(chat("one"), ALICE)
    await within(gate.reached.wait(), "the model turn to reach its gate")
    second = await manager.submit(chat("two", first.conversation_id, "enqueue"), ALICE)
    assert second.conversation_id == first.conversation_id
    await loop_turns(5)  # a run that did not wait would emit run_started in its task's first step
    assert second.events == [] and second.status == "queued" and not first.finished
    gate.open()
    assert status_of(await stored_events(storage, second)) == "completed"
    assert status_of(await stored_events(storage, first)) == "completed"
    # The second run's model turn came after the first run ended, with its answer in the history.
    assert len(provider.requests) == 2
    assert [(m.role, m.content) for m in provider.requests[1].messages] == [
        ("user", "one"), ("assistant", "first answer"), ("user", "two"),
    ]


async def test_reject_refuses_a_second_run_while_one_is_live(storage: Any, manager_for: Managers) -> None:
    gate = Gate()
    provider = GatedProvider([GatedTurn(steps=(gate, "first")), GatedTurn(steps=("later",))])
    manager = manager_for(provider)
    first = await manager.submit(chat("one"), ALICE)
    await within(gate.reached.wait(), "the model turn to reach its gate")
    with pytest.raises(ConversationBusy):
        await manager.submit(chat("two", first.conversation_id, "reject"), ALICE)
    gate.open()
    assert status_of(await stored_events(storage, first)) == "completed"
    later = await manager.submit(chat("three", first.conversation_id, "reject"), ALICE)
    assert status_of(await stored_events(storage, later)) == "completed"
    assert len(provider.requests) == 2  # the refused run never reached the model


async def test_interrupt_cancels_the_live_run_and_goes_on(storage: Any, manager_for: Managers) -> None:
    gate = Gate()
    provider = GatedProvider([GatedTurn(steps=("stale ", gate, "never")), GatedTurn(steps=("fresh",))])
    manager = manager_for(provider)
    first = await manager.submit(chat("one"), ALICE)
    await within(gate.reached.wait(), "the model turn to reach its gate")
    second = await manager.submit(chat("two", first.conversation_id, "interrupt"), ALICE)
    assert status_of(await stored_events(storage, second)) == "completed"
    assert status_of(await stored_events(storage, first)) == "cancelled"
    assert [(m.role, m.content) for m in provider.requests[1].messages] == [
        ("user", "one"), ("assistant", "stale "), ("user", "two"),
    ]


async def test_the_per_user_cap_counts_unfinished_runs(storage: Any, manager_for: Managers) -> None:
    gate = Gate()
    provider = GatedProvider(lambda request, index: GatedTurn(steps=(gate, "ok")) if index == 0 else GatedTurn(("ok",)))
    manager = manager_for(provider)
    first = await manager.submit(chat("one"), ALICE, run_cap=1)
    await within(gate.reached.wait(), "the model turn to reach its gate")
    with pytest.raises(TooManyRuns):
        await manager.submit(chat("another conversation"), ALICE, run_cap=1)
    other_user = await manager.submit(chat("bob's"), BOB, run_cap=1)  # the cap is per user
    assert status_of(await stored_events(storage, other_user)) == "completed"
    gate.open()
    assert status_of(await stored_events(storage, first)) == "completed"
    again = await manager.submit(chat("now there is room"), ALICE, run_cap=1)
    assert status_of(await stored_events(storage, again)) == "completed"


async def followed_seqs(run: Run, *, idle: float) -> AsyncIterator[list[int] | None]:
    """The ids a live follower of ``run`` is shown, batch by batch (``None``: an idle
    tick), read as ``app.runs.follow`` reads a run of this process (``read_durable``)."""
    async for batch in read_durable(run, 0, idle=idle):
        yield None if batch is None else [ev.seq for ev in batch]


class HeldWrites:
    """The run store, with the run's event writes held until ``release`` (the rest of
    its interface passes through)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.held: list[tuple[RunWrite, Any, Any]] = []
        self.holding = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def write(self, step: RunWrite, *, on_commit: Any = None, on_fail: Any = None) -> None:
        if self.holding:
            self.held.append((step, on_commit, on_fail))
        else:
            self._inner.write(step, on_commit=on_commit, on_fail=on_fail)

    def release(self) -> None:
        self.holding = False
        held, self.held = self.held, []
        for step, on_commit, on_fail in held:
            self._inner.write(step, on_commit=on_commit, on_fail=on_fail)


async def test_a_follower_sees_an_event_only_once_it_is_stored(storage: Any, manager_for: Managers) -> None:
    store = HeldWrites(storage.runs)
    manager = manager_for(ScriptedProvider([ScriptedTurn(chunks=("stored first",))]), store=store)
    run = await manager.submit(chat("hi"), ALICE)
    await until(lambda: len(run.events) >= 2 and bool(store.held), "events emitted, their writes held", 10)
    follower = followed_seqs(run, idle=0.05)
    assert await anext(follower) is None  # nothing shown while nothing is stored
    assert await storage.runs.events_after(run.id, 0) == []
    store.release()
    seen: list[int] = []
    async for seqs in follower:
        if seqs is None:
            continue
        stored = {e.seq for e in await storage.runs.events_after(run.id, 0)}
        assert set(seqs) <= stored, (seqs, stored)
        seen += seqs
    assert seen == list(range(1, len(run.events) + 1))
    assert orjson.loads(run.events[-1].data)["status"] == "completed"
