"""Cutting a conversation's history back (``HistoryStore.cut_history``: a regenerated
answer, an edited question) on both engines: which messages go, that the runs stay,
and what is refused — a conversation with a run not ended (``ConversationBusy``), a run
that is not the conversation's (``UnknownRun``), another user's conversation (``None``)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from llm.types import Message, ToolCall, ToolResult
from storage.errors import ConversationBusy, UnknownRun
from storage.records import NewRun, RunWrite


async def answered(s: Any, run_id: str, question: str, answer: str, *, user: str = "alice", tool: bool = False) -> None:
    """A run of ``c`` that asked ``question`` and ended with ``answer`` (with a tool turn)."""
    await s.runs.create(NewRun(run_id, "c", user, "workflow", orjson.dumps({"message": question})))
    turns = [Message("user", question)]
    if tool:
        turns += [
            Message("assistant", "", tool_calls=[ToolCall(f"tu-{run_id}", "search", {"q": question})]),
            Message("user", tool_results=[ToolResult(f"tu-{run_id}", "search", "found")]),
        ]
    turns.append(Message("assistant", answer))
    await s.runs.commit(RunWrite(run_id, "c", user, messages=turns, status="completed", finished=True))


async def texts(s: Any, user: str = "alice") -> list[str]:
    return [m.content for m in await s.conversations.load("c", user) if m.content]


async def test_cut_drops_a_turn_and_what_followed_and_keeps_the_runs(store_engine: Any) -> None:
    s = store_engine
    history = s.history
    await s.conversations.append("c", "alice", [Message("user", "q0"), Message("assistant", "a0")])  # imported
    await answered(s, "r1", "q1", "a1", tool=True)
    await answered(s, "r2", "q2", "a2")
    await answered(s, "r3", "q3", "a3")
    await answered(s, "b1", "bob's question", "bob's answer", user="bob")

    cut = await history.cut_history("alice", "c", "r2", keep_run=False)  # r2's answer regenerated
    assert cut is not None and cut.messages == 4
    assert await texts(s) == ["q0", "a0", "q1", "a1"]
    assert len(await s.conversations.load("c", "alice")) == 6  # r1's tool turn stays with it
    assert await history.run("alice", "r2") is not None and await history.run("alice", "r3") is not None
    assert await texts(s, "bob") == ["bob's question", "bob's answer"]  # another user's chat of that id

    again = await history.cut_history("alice", "c", "r2", keep_run=False)  # a retry: nothing more goes
    assert again is not None and again.messages == 0
    assert await texts(s) == ["q0", "a0", "q1", "a1"]

    await answered(s, "r4", "q4", "a4")
    cut = await history.cut_history("alice", "c", "r1", keep_run=True)  # the question after r1 edited
    assert cut is not None and cut.messages == 2
    assert await texts(s) == ["q0", "a0", "q1", "a1"]

    cut = await history.cut_history("alice", "c", None, keep_run=False)  # the first question edited
    assert cut is not None and cut.messages == 6
    assert await s.conversations.load("c", "alice") == []
    assert await s.conversations.exists("c", "alice")


async def test_cut_is_refused_while_a_run_is_live_for_an_unknown_run_and_for_another_user(store_engine: Any) -> None:
    s = store_engine
    history = s.history
    await answered(s, "r1", "q1", "a1")
    await answered(s, "b1", "bob's question", "bob's answer", user="bob")
    for status in ("queued", "waiting_approval"):
        await s.runs.create(NewRun(f"live-{status}", "c", "alice", "workflow", orjson.dumps({"message": "q2"})))
        if status != "queued":
            await s.runs.commit(RunWrite(f"live-{status}", "c", "alice", status=status))
        with pytest.raises(ConversationBusy):
            await history.cut_history("alice", "c", "r1", keep_run=False)
        await s.runs.commit(RunWrite(f"live-{status}", "c", "alice", status="cancelled", finished=True))
    for foreign in ("b1", "nope"):  # bob's run in his own chat "c", and no run at all
        with pytest.raises(UnknownRun) as caught:
            await history.cut_history("alice", "c", foreign, keep_run=False)
        assert caught.value.run_id == foreign
    assert await history.cut_history("carol", "c", None, keep_run=False) is None  # carol has no chat "c"
    assert await history.cut_history("alice", "other", "r1", keep_run=False) is None
    assert await texts(s) == ["q1", "a1"] and await texts(s, "bob") == ["bob's question", "bob's answer"]
