"""History and retention stores (issue 25) on both engines: what deleting a conversation
removes and what it only unlinks; compaction that keeps every replay equal in text,
whichever id a reader resumes from."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest

from llm.types import Message
from storage.draft_records import Draft
from storage.errors import ConversationBusy
from storage.keyword_records import ExternalResult
from storage.records import NewRun, RunEvent, RunWrite, ToolCallRecord


def new_run(run_id: str, conv: str = "c", user: str = "alice") -> NewRun:
    return NewRun(run_id, conv, user, "knowledge", orjson.dumps({"message": "hi"}))


def text_event(seq: int, chunk: str) -> RunEvent:
    return RunEvent(seq, "content_chunk", orjson.dumps({"chunk": chunk}).decode())


def other(seq: int, name: str, data: dict[str, Any]) -> RunEvent:
    return RunEvent(seq, name, orjson.dumps(data).decode())


def call(run_id: str, conv: str, user: str, name: str, result: str) -> ToolCallRecord:
    return ToolCallRecord(run_id, conv, user, f"tu-{name}", name, {}, result, "success", None, 1.0, 0)


async def test_delete_removes_the_conversation_and_unlinks_shared_knowledge(store_engine: Any) -> None:
    s = store_engine
    now = time.time()
    for run_id, user in (("a1", "alice"), ("a2", "alice"), ("b1", "bob")):
        await s.runs.create(new_run(run_id, user=user))
        await s.runs.commit(
            RunWrite(
                run_id,
                "c",
                user,
                events=[text_event(1, "x")],
                messages=[Message("user", "q")],
                status="completed",
                finished=True,
            )
        )
    draft = Draft("d-1", "alice", "wf", "inventory.items", "on_create", created_at=now, last_access=now)
    kept = Draft("d-2", "alice", "other", "inventory.items", "on_create", created_at=now, last_access=now)
    assert await s.drafts.insert(draft, live_after=0, max_per_owner=10)
    assert await s.drafts.insert(kept, live_after=0, max_per_owner=10)
    s.tool_calls.record(call("a1", "c", "alice", "start_draft", '{"draft_id": "d-1", "status": "draft_created"}'))
    s.tool_calls.record(call("b1", "c", "bob", "start_draft", '{"draft_id": "d-2", "status": "draft_created"}'))
    result = ExternalResult("ext-1", "perplexity", "q", "answer", (), None, "q1", "c", now, owner="alice")
    await s.external_results.save(result)
    await s.keywords.upsert(
        {"retention": "retention"},
        query_id="q1",
        external_result_ids=["ext-1"],
        conversation_id="c",
        owner="alice",
        now=now,
    )
    await s.db.flush()

    history = s.history
    await s.runs.create(new_run("a3"))
    with pytest.raises(ConversationBusy):  # an unfinished run holds it
        await history.delete_conversation("alice", "c")
    await s.runs.commit(RunWrite("a3", "c", "alice", status="cancelled", finished=True))
    assert await history.delete_conversation("bob", "nope") is None

    gone = await history.delete_conversation("alice", "c")
    assert gone is not None and gone.runs == 3 and gone.messages == 2 and gone.drafts == 1 and gone.tool_calls == 1
    assert gone.unlinked >= 2
    assert not await s.conversations.exists("c", "alice")
    for run_id in ("a1", "a2", "a3"):
        assert await s.runs.get(run_id) is None and await s.runs.events_after(run_id, 0) == []
    assert await s.drafts.load("alice", "d-1", live_after=0) is None
    assert await s.drafts.load("alice", "d-2", live_after=0) is not None  # not started by that conversation
    saved = await s.external_results.get("ext-1", owner="alice")
    assert saved is not None and saved.conversation_id is None and saved.owner == "alice"
    associations = await s.keywords.associations("retention", owner="alice")
    assert associations and all(a.conversation_id is None for a in associations)
    # Bob's conversation of the same id is untouched.
    assert await s.conversations.exists("c", "bob") and await s.runs.get("b1") is not None
    assert [m.payload["content"] for m in await s.conversations.messages("c", "bob")] == ["q"]


STRETCHES = ["Hel", "lo ", "wor", "ld", ". "]


def a_long_run() -> list[RunEvent]:
    """Two turns of text around a tool call, and a restart that discarded part of a turn."""
    seq = iter(range(1, 100))
    events = [
        other(next(seq), "run_started", {"run_id": "r", "conversation_id": "c"}),
        other(next(seq), "message_start", {"turn": 1}),
    ]
    events += [text_event(next(seq), t) for t in STRETCHES]
    events += [
        other(next(seq), "tool_call_start", {"tool_use_id": "t1", "name": "kb"}),
        other(next(seq), "tool_call_result", {"tool_use_id": "t1", "name": "kb", "is_error": False, "duration_ms": 1}),
    ]
    events += [other(next(seq), "message_start", {"turn": 2})]
    first_cut = next(seq)
    events += [text_event(first_cut, "cut "), text_event(next(seq), "off ")]
    events += [
        other(
            next(seq),
            "run_resumed",
            {
                "run_id": "r",
                "reason": "restart",
                "checkpoint_seq": 1,
                "discarded": {"from_seq": first_cut, "to_seq": first_cut + 1, "reason": "cut"},
                "pending_tool_calls": 0,
            },
        )
    ]
    events += [text_event(next(seq), t) for t in ("Final ", "answer ", "é✓ ", "done")]
    events += [
        other(
            next(seq),
            "message_complete",
            {"status": "completed", "run_id": "r", "conversation_id": "c", "turns": 2, "usage": {}},
        )
    ]
    return events


def text_after(events: list[RunEvent]) -> tuple[str, list[tuple[str, str]]]:
    """The text a reader puts together, and the other events (name, data) in order."""
    text = "".join(orjson.loads(e.data)["chunk"] for e in events if e.event == "content_chunk")
    return text, [(e.event, e.data) for e in events if e.event != "content_chunk"]


async def test_compaction_keeps_every_replay_equal_in_text(store_engine: Any) -> None:
    s = store_engine
    events = a_long_run()
    await s.runs.create(new_run("r"))
    await s.runs.commit(RunWrite("r", "c", "alice", events=events, status="completed", finished=True))
    await s.runs.create(new_run("fresh"))
    await s.runs.commit(
        RunWrite(
            "fresh", "c", "alice", events=[text_event(1, "a"), text_event(2, "b")], status="completed", finished=True
        )
    )
    last = events[-1].seq
    before = {after: await s.runs.events_after("r", after) for after in range(last + 1)}

    cutoff = time.time() + 1  # both runs finished before it
    assert set(await s.retention.compactable(cutoff, 10)) == {"r", "fresh"}
    held, removed = await s.retention.compact(["r"])
    assert held and removed == (len(STRETCHES) - 1) + 1 + 3  # turn 1, the discarded two, the final four
    assert await s.retention.compactable(cutoff, 10) == ["fresh"]
    assert (await s.retention.compact(["r"])) == (True, 0)  # done once

    stored = await s.runs.events_after("r", 0)
    assert len(stored) == len(events) - removed and stored[-1].seq == last
    for after in range(last + 1):
        got = await s.runs.events_after("r", after)
        # Every reader, whatever id it resumes from, gets the same text and the same other events...
        assert text_after(got) == text_after(before[after]), after
        # ...under ids it has not seen, increasing, ending with the same last id.
        assert all(e.seq > after for e in got) and [e.seq for e in got] == sorted(e.seq for e in got)
        assert (got[-1].seq if got else after) == (before[after][-1].seq if before[after] else after)
    # Kept ids (every non-text event, each stretch's last chunk) are still there.
    kept = {e.seq for e in stored}
    assert {e.seq for e in events if e.event != "content_chunk"} <= kept
    # The discarded text stays apart from the text after the restart.
    chunks = [orjson.loads(e.data)["chunk"] for e in stored if e.event == "content_chunk"]
    assert chunks == ["".join(STRETCHES), "cut off ", "Final answer é✓ done"]
    view = await s.history.run("alice", "r")
    assert view is not None and view.events_compacted_at is not None and view.complete is not None
