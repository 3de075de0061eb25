"""ConversationStore contract: keyed by user and id, seq assigned inside the write."""

from __future__ import annotations

import asyncio
from typing import Any

from llm.types import Message


async def test_one_id_is_a_conversation_per_user(store_engine: Any) -> None:
    convs = store_engine.conversations
    await convs.claim("c1", "alice")
    await convs.claim("c1", "alice")  # idempotent
    assert await convs.exists("c1", "alice") and not await convs.exists("c1", "bob")
    await convs.append("c1", "alice", [Message("user", "alice's")])
    await convs.claim("c1", "bob")  # not in Alice's way, nor she in his
    await convs.append("c1", "bob", [Message("user", "bob's"), Message("assistant", "to bob")])
    assert [m.content for m in await convs.load("c1", "alice")] == ["alice's"]
    assert [m.content for m in await convs.load("c1", "bob")] == ["bob's", "to bob"]
    assert [(m.seq, m.payload["content"]) for m in await convs.messages("c1", "bob")] == [(1, "bob's"), (2, "to bob")]
    assert [m.payload["content"] for m in await convs.messages("c1", "carol")] == []
    assert not await convs.exists("missing", "alice")
    assert await convs.load("missing", "alice") == []


async def test_concurrent_appends_never_collide_and_keep_every_message(store_engine: Any) -> None:
    convs = store_engine.conversations
    await asyncio.gather(*(convs.append("c2", "alice", [Message("user", f"m{i}"), Message("assistant", f"a{i}")])
                           for i in range(20)))
    stored = await convs.messages("c2", "alice")
    assert [m.seq for m in stored] == list(range(1, 41))
    texts = [m.payload["content"] for m in stored]
    # each append's two messages stay together, in order
    for i in range(0, 40, 2):
        assert texts[i].startswith("m") and texts[i + 1] == "a" + texts[i][1:]
    assert sorted(texts[::2]) == sorted(f"m{i}" for i in range(20))


async def test_concurrent_first_claims_of_one_id_each_make_their_users_conversation(store_engine: Any) -> None:
    convs = store_engine.conversations
    users = ("alice", "bob", "carol", "dave")
    await asyncio.gather(*(convs.claim("race", user) for user in users * 2))
    assert all([await convs.exists("race", user) for user in users])


async def test_load_returns_the_latest_messages_in_order(store_engine: Any) -> None:
    convs = store_engine.conversations
    await convs.append("c3", "alice", [Message("user", f"m{i}") for i in range(10)])
    loaded = await convs.load("c3", "alice", limit=4)
    assert [m.content for m in loaded] == ["m6", "m7", "m8", "m9"]
