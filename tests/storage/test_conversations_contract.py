"""ConversationStore contract: owned from the first byte, seq assigned inside the write."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from llm.types import Message
from storage.errors import ConversationOwnedByAnother


async def test_claim_records_the_owner_and_refuses_another_user(store_engine: Any) -> None:
    convs = store_engine.conversations
    await convs.claim("c1", "alice")
    await convs.claim("c1", "alice")  # idempotent for the owner
    assert await convs.owner("c1") == "alice"
    with pytest.raises(ConversationOwnedByAnother):
        await convs.claim("c1", "bob")
    with pytest.raises(ConversationOwnedByAnother):
        await convs.append("c1", "bob", [Message("user", "hijack")])
    with pytest.raises(ConversationOwnedByAnother):
        await convs.load("c1", "bob")
    assert await convs.owner("missing") is None
    assert await convs.load("missing", "alice") == []


async def test_concurrent_appends_never_collide_and_keep_every_message(store_engine: Any) -> None:
    convs = store_engine.conversations
    await asyncio.gather(*(convs.append("c2", "alice", [Message("user", f"m{i}"), Message("assistant", f"a{i}")])
                           for i in range(20)))
    stored = await convs.messages("c2")
    assert [m.seq for m in stored] == list(range(1, 41))
    texts = [m.payload["content"] for m in stored]
    # each append's two messages stay together, in order
    for i in range(0, 40, 2):
        assert texts[i].startswith("m") and texts[i + 1] == "a" + texts[i][1:]
    assert sorted(texts[::2]) == sorted(f"m{i}" for i in range(20))


async def test_concurrent_first_claims_have_exactly_one_winner(store_engine: Any) -> None:
    convs = store_engine.conversations
    results = await asyncio.gather(
        *(convs.claim("race", user) for user in ("alice", "bob", "carol", "dave")), return_exceptions=True
    )
    winners = [r for r in results if r is None]
    assert len(winners) == 1
    assert all(isinstance(r, ConversationOwnedByAnother) for r in results if r is not None)


async def test_load_returns_the_latest_messages_in_order(store_engine: Any) -> None:
    convs = store_engine.conversations
    await convs.append("c3", "alice", [Message("user", f"m{i}") for i in range(10)])
    loaded = await convs.load("c3", "alice", limit=4)
    assert [m.content for m in loaded] == ["m6", "m7", "m8", "m9"]
