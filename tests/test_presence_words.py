"""The words replicas tell each other of their followers (``app/runs/presence.py``):
``!`` (the chat's own client left) is said when such a client was among those that
left a run here, not only when it was the last to go.

Two real ``FollowerPresence`` objects on one in-process feed that hands each
announcement to every subscriber, as PostgreSQL's ``NOTIFY`` does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from app.runs.presence import FollowerPresence


class OneFeed:
    """Every announcement reaches every subscriber, the speaker's own included."""

    def __init__(self) -> None:
        self._subscribers: list[Callable[[str], None]] = []

    def announce_followers(self, payload: str) -> None:
        for callback in self._subscribers:
            callback(payload)

    def subscribe_followers(self, callback: Callable[[str], None]) -> None:
        self._subscribers.append(callback)


async def settled() -> None:
    """Until the words said in this loop tick are sent (``FollowerPresence._flush``)."""
    await asyncio.sleep(0)
    await asyncio.sleep(0)


async def test_the_chat_client_leaving_before_a_reader_is_still_said() -> None:
    feed = OneFeed()
    owner, other = FollowerPresence(feed), FollowerPresence(feed)
    left: list[tuple[str, bool]] = []
    owner.on_left(lambda run_id, cancels: left.append((run_id, cancels)))

    other.attached("run-1")  # the chat's own client, resumed on the other replica
    other.attached("run-1")  # a reader of /events there
    await settled()
    assert owner.held_until("run-1") is not None
    other.detached("run-1", cancels=True)  # the chat's client leaves first
    await settled()
    assert left == [] and owner.held_until("run-1") is not None  # the reader still holds it
    other.detached("run-1", cancels=False)  # then the reader
    await settled()
    assert left == [("run-1", True)]

    other.attached("run-1")  # a reader alone, later: its leaving is only '-'
    other.detached("run-1", cancels=False)
    await settled()
    assert left[-1] == ("run-1", False)


async def test_the_owner_is_told_once_when_a_replica_first_follows_a_run() -> None:
    """``on_joined``: the first ``+`` from a replica, not its beats; again after that
    replica's client left and another came."""
    feed = OneFeed()
    owner, other, third = FollowerPresence(feed), FollowerPresence(feed), FollowerPresence(feed)
    joined: list[str] = []
    owner.on_joined(joined.append)

    other.attached("run-1")
    await settled()
    assert joined == ["run-1"]
    other._say("+", "run-1")  # a beat (``beat_forever``) is no news
    await settled()
    assert joined == ["run-1"]
    third.attached("run-1")  # a client of the run on a third replica is
    await settled()
    assert joined == ["run-1", "run-1"]
    other.detached("run-1", cancels=False)
    other.attached("run-1")
    await settled()
    assert joined == ["run-1"] * 3
