"""RunStore contract: runs admitted atomically, steps stored whole, the log replayable."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from llm.types import Message
from storage.errors import ConversationBusy, IdempotencyKeyUsed
from storage.records import NewRun, RunEvent, RunWrite, ToolCallRecord


def new_run(run_id: str, conv: str = "c", user: str = "alice", multitask: Any = "enqueue") -> NewRun:
    return NewRun(run_id, conv, user, "knowledge", orjson.dumps({"message": "hi"}), multitask)


def ev(seq: int, name: str = "content_chunk") -> RunEvent:
    return RunEvent(seq, name, orjson.dumps({"seq": seq}).decode())


async def test_create_claims_the_conversation_and_lists_unfinished_runs(store_engine: Any) -> None:
    runs = store_engine.runs
    assert (await runs.create(new_run("r1"))).others == []
    assert (await runs.create(new_run("r2"))).others == ["r1"]
    assert await store_engine.conversations.exists("c", "alice")
    assert not await store_engine.conversations.exists("c", "bob")
    with pytest.raises(ConversationBusy):
        await runs.create(new_run("r4", multitask="reject"))
    assert await runs.get("r4") is None
    stored = await runs.get("r1")
    assert stored is not None and stored.status == "queued" and orjson.loads(stored.input) == {"message": "hi"}
    assert [r.id for r in await runs.unfinished()] == ["r1", "r2"]


async def test_conversation_ids_are_per_user_for_runs_and_their_order(store_engine: Any) -> None:
    """Bob naming Alice's conversation id gets his own conversation: none of Alice's
    runs are "earlier" in it, ``reject`` does not see them, ``interrupt`` does not
    cancel them, and each step's messages land in the right user's conversation."""
    runs = store_engine.runs
    assert (await runs.create(new_run("a1"))).others == []
    assert (await runs.create(new_run("b1", user="bob", multitask="reject"))).others == []
    assert (await runs.create(new_run("b2", user="bob", multitask="interrupt"))).others == ["b1"]
    assert await runs.cancel_requests(["a1", "b1"]) == {"b1"}
    await runs.commit(RunWrite("a1", "c", "alice", messages=[Message("user", "alice's")]))
    await runs.commit(RunWrite("b2", "c", "bob", messages=[Message("user", "bob's")]))
    convs = store_engine.conversations
    assert [m.payload["content"] for m in await convs.messages("c", "alice")] == ["alice's"]
    assert [m.payload["content"] for m in await convs.messages("c", "bob")] == ["bob's"]
    assert [m.content for m in await convs.load("c", "bob")] == ["bob's"]


async def test_a_step_stores_events_checkpoint_messages_and_status_together(store_engine: Any) -> None:
    runs = store_engine.runs
    await runs.create(new_run("r1"))
    await runs.commit(RunWrite("r1", "c", "alice", events=[ev(1), ev(2)], checkpoint=b"ck1", checkpoint_seq=2,
                               messages=[Message("user", "hi")], status="running"))
    stored = await runs.get("r1")
    assert stored is not None
    assert (stored.status, stored.checkpoint, stored.checkpoint_seq, stored.last_seq) == ("running", b"ck1", 2, 2)
    assert [m.payload["content"] for m in await store_engine.conversations.messages("c", "alice")] == ["hi"]
    assert [e.seq for e in await runs.events_after("r1", 0)] == [1, 2]
    assert [e.seq for e in await runs.events_after("r1", 1)] == [2]


async def test_finishing_forgets_input_and_checkpoint_and_leaves_unfinished(store_engine: Any) -> None:
    runs = store_engine.runs
    await runs.create(new_run("r1"))
    await runs.commit(RunWrite("r1", "c", "alice", events=[ev(1)], checkpoint=b"ck", checkpoint_seq=1, status="running"))
    await runs.commit(RunWrite("r1", "c", "alice", events=[ev(2, "message_complete")], status="completed", finished=True))
    stored = await runs.get("r1")
    assert stored is not None
    assert (stored.status, stored.input, stored.checkpoint) == ("completed", None, None)
    assert await runs.unfinished() == []


async def test_queued_writes_commit_in_order_and_report_when_durable(store_engine: Any) -> None:
    runs = store_engine.runs
    await runs.create(new_run("r1"))
    committed: list[int] = []
    for i in range(1, 301):
        runs.write(RunWrite("r1", "c", "alice", events=[ev(i)]), on_commit=lambda i=i: committed.append(i))
    await runs.commit(RunWrite("r1", "c", "alice"))  # a barrier: everything queued before is durable
    assert committed == list(range(1, 301))
    assert [e.seq for e in await runs.events_after("r1", 0)] == list(range(1, 301))


async def test_a_duplicate_event_fails_only_its_own_step(store_engine: Any) -> None:
    runs = store_engine.runs
    await runs.create(new_run("r1"))
    await runs.create(new_run("r2", conv="d"))
    failed: list[BaseException] = []
    ok: list[str] = []
    runs.write(RunWrite("r1", "c", "alice", events=[ev(1)]), on_commit=lambda: ok.append("a"))
    runs.write(RunWrite("r1", "c", "alice", events=[ev(1)]), on_fail=failed.append)  # same seq again
    runs.write(RunWrite("r2", "d", "alice", events=[ev(1)]), on_commit=lambda: ok.append("b"))
    await runs.commit(RunWrite("r1", "c", "alice"))
    assert ok == ["a", "b"] and len(failed) == 1
    assert len(await runs.events_after("r2", 0)) == 1


async def test_set_status_marks_runs_interrupted_and_they_stay_unfinished(store_engine: Any) -> None:
    runs = store_engine.runs
    await asyncio.gather(runs.create(new_run("r1")), runs.create(new_run("r2", conv="d")))
    await runs.set_status(["r1", "r2"], "interrupted")
    assert {r.id: r.status for r in await runs.unfinished()} == {"r1": "interrupted", "r2": "interrupted"}


async def test_tool_call_log_is_written_in_the_background(store_engine: Any) -> None:
    log = store_engine.tool_calls
    log.record(ToolCallRecord("r1", "c", "alice", "t1", "knowledge_base_search", {"query": "x", "api_key": "s3cret"},
                              "{}", "success", None, 1.5, 0))
    await store_engine.db.flush()
    rows = await log.for_run("r1")
    assert rows == [{"tool_use_id": "t1", "tool_name": "knowledge_base_search", "status": "success",
                     "retry_count": 0, "duration_ms": 1.5}]


async def test_tool_call_log_is_indexed_by_conversation_and_status(store_engine: Any) -> None:
    """Seed 001 indexes the log by session (our conversation) and by status (migration 13)."""
    if type(store_engine.db).__name__.startswith("Sqlite"):
        rows = await store_engine.db.fetchall(
            "SELECT il.name, ii.name FROM pragma_index_list('tool_calls') AS il, pragma_index_info(il.name) AS ii"
        )
    else:
        rows = await store_engine.db.fetchall(
            "SELECT i.relname, a.attname FROM pg_index x JOIN pg_class t ON t.oid = x.indrelid "
            "JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_attribute a ON a.attrelid = t.oid "
            "AND a.attnum = ANY(x.indkey) WHERE t.relname = 'tool_calls'"
        )
    columns: dict[str, set[str]] = {}
    for index, column in rows:
        columns.setdefault(str(index), set()).add(str(column))
    assert columns.get("tool_calls_conversation") == {"conversation_id"}
    assert columns.get("tool_calls_status") == {"status"}


async def test_an_idempotency_key_names_one_run_per_user(store_engine: Any) -> None:
    runs = store_engine.runs

    def keyed(run_id: str, key: str | None, conv: str = "c", user: str = "alice", multitask: Any = "enqueue") -> NewRun:
        return NewRun(run_id, conv, user, "knowledge", orjson.dumps({"message": "hi"}), multitask, key)

    assert (await runs.create(keyed("r1", "k-1"))).others == []
    assert (await runs.create(keyed("r2", None))).others == ["r1"]  # runs without a key never collide
    assert (await runs.create(keyed("r3", None))).others == ["r1", "r2"]
    # The key is checked before the conversation's policy: a retry is never "busy".
    with pytest.raises(IdempotencyKeyUsed) as taken:
        await runs.create(keyed("r4", "k-1", conv="other", multitask="reject"))
    assert taken.value.run_id == "r1"
    assert await runs.get("r4") is None and not await store_engine.conversations.exists("other", "alice")
    # Keys are per user.
    assert (await runs.create(keyed("r5", "k-1", conv="bobs", user="bob"))).others == []
    found = await runs.find_by_idempotency_key("alice", "k-1")
    assert found is not None and (found.id, found.user_id, found.conversation_id) == ("r1", "alice", "c")
    bobs = await runs.find_by_idempotency_key("bob", "k-1")
    assert bobs is not None and bobs.id == "r5"
    assert await runs.find_by_idempotency_key("alice", "k-2") is None
    # The key outlives the run's end (its input and checkpoint are forgotten, not the key).
    await runs.commit(RunWrite("r1", "c", "alice", events=[ev(1, "message_complete")], status="completed", finished=True))
    done = await runs.find_by_idempotency_key("alice", "k-1")
    assert done is not None and (done.status, done.last_seq) == ("completed", 1)


async def test_a_keyed_run_keeps_the_fingerprint_of_its_request(store_engine: Any) -> None:
    """The request fingerprint is stored with the key and read back with the run, after
    the run ended too (its input is cleared then; the fingerprint is what a repeat of the
    key is compared with). Without one (no key, or a row from before step 31): ``None``."""
    runs = store_engine.runs
    sha = "9f" * 32
    await runs.create(NewRun("r1", "c", "alice", "knowledge", b"{}", "enqueue", "k-1", request_fingerprint=sha))
    await runs.create(NewRun("r2", "c2", "alice", "knowledge", b"{}", "enqueue", "k-2"))
    await runs.create(NewRun("r3", "c3", "bob", "knowledge", b"{}", "enqueue", "k-1", request_fingerprint="0" * 64))
    end = RunWrite("r1", "c", "alice", events=[ev(1, "message_complete")], status="completed", finished=True)
    await runs.commit(end)
    found = await runs.find_by_idempotency_key("alice", "k-1")
    assert found is not None and found.id == "r1" and found.request_fingerprint == sha and found.input is None
    fetched = await runs.get("r1")
    assert fetched is not None and fetched.request_fingerprint == sha
    bare = await runs.find_by_idempotency_key("alice", "k-2")
    assert bare is not None and bare.request_fingerprint is None
    bobs = await runs.find_by_idempotency_key("bob", "k-1")
    assert bobs is not None and bobs.id == "r3" and bobs.request_fingerprint == "0" * 64


async def test_concurrent_creates_with_one_key_store_one_run(store_engine: Any) -> None:
    runs = store_engine.runs
    attempts = [
        NewRun(f"r{i}", f"c{i}", "alice", "knowledge", orjson.dumps({"message": "hi"}), "enqueue", "same")
        for i in range(8)
    ]
    outcomes = await asyncio.gather(*(runs.create(a) for a in attempts), return_exceptions=True)
    winners = [a.id for a, o in zip(attempts, outcomes, strict=True) if not isinstance(o, BaseException)]
    assert len(winners) == 1, outcomes
    losers = [o for o in outcomes if isinstance(o, BaseException)]
    assert all(isinstance(o, IdempotencyKeyUsed) and o.run_id == winners[0] for o in losers), losers
