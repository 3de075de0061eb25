"""RunStore, both engines: the client's title stored in the run's admission (issue 23) —
taken by a conversation without a title only, never by another user's conversation of
the same id, and said in ``Admitted.titled``."""

from __future__ import annotations

from typing import Any

import orjson

from storage.records import NewRun


def new_run(run_id: str, conversation: str, user: str, title: str | None) -> NewRun:
    return NewRun(run_id, conversation, user, "workflow", orjson.dumps({"message": "hi"}), title=title)


async def title_of(store: Any, user: str, conversation: str) -> str | None:
    summary = await store.history.conversation(user, conversation)
    assert summary is not None, f"{user} has no conversation {conversation!r}"
    return summary.title  # type: ignore[no-any-return]


async def test_a_new_conversation_takes_the_clients_title_in_its_admission(store_engine: Any) -> None:
    admitted = await store_engine.runs.create(new_run("r1", "thread", "alice", "Quarterly stock report"))
    assert admitted.titled and admitted.others == []
    assert await title_of(store_engine, "alice", "thread") == "Quarterly stock report"


async def test_a_titled_conversation_keeps_its_title(store_engine: Any) -> None:
    runs = store_engine.runs
    assert (await runs.create(new_run("r1", "thread", "alice", None))).titled is False
    assert await title_of(store_engine, "alice", "thread") is None
    assert await store_engine.history.rename("alice", "thread", "Renamed by alice")
    later = await runs.create(new_run("r2", "thread", "alice", "Another name"))
    assert later.titled is False and later.others == ["r1"]
    assert await title_of(store_engine, "alice", "thread") == "Renamed by alice"


async def test_an_untitled_conversation_takes_a_later_runs_title(store_engine: Any) -> None:
    """A conversation created without a title (a first run without one, an attachment
    uploaded first) takes the first title a run brings."""
    runs = store_engine.runs
    await runs.create(new_run("r1", "thread", "alice", None))
    assert (await runs.create(new_run("r2", "thread", "alice", "Named later"))).titled
    assert (await runs.create(new_run("r3", "thread", "alice", "Named again"))).titled is False
    assert await title_of(store_engine, "alice", "thread") == "Named later"


async def test_one_users_title_never_lands_on_anothers_conversation(store_engine: Any) -> None:
    runs = store_engine.runs
    await runs.create(new_run("rb", "thread", "bob", None))
    assert (await runs.create(new_run("ra", "thread", "alice", "Alice's thread"))).titled
    assert await title_of(store_engine, "alice", "thread") == "Alice's thread"
    assert await title_of(store_engine, "bob", "thread") is None


async def test_the_titlers_title_only_where_none_is_set(store_engine: Any) -> None:
    """``HistoryStore.set_title_if_unset`` (the titler after a conversation's first run,
    a plan since issue 23): it titles an untitled conversation once, never overwrites a
    rename or the client's title, and finds nothing under another user's id."""
    runs, history = store_engine.runs, store_engine.history
    await runs.create(new_run("r1", "plain", "alice", None))
    await runs.create(new_run("r2", "named", "alice", "The client's name"))
    assert await history.set_title_if_unset("alice", "plain", "From the model") is True
    assert await history.set_title_if_unset("alice", "plain", "A second title") is False
    assert await history.set_title_if_unset("alice", "named", "From the model") is False
    assert await history.set_title_if_unset("bob", "plain", "Bob's") is False
    assert await history.set_title_if_unset("alice", "no-such-thread", "Nothing") is False
    assert await title_of(store_engine, "alice", "plain") == "From the model"
    assert await title_of(store_engine, "alice", "named") == "The client's name"
