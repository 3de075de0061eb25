"""Which runs have a client attached on another replica: the word replicas send each
other over the run feed, so a chat whose client left one replica is not cancelled while
the client follows it on another.

A keyless chat (and every AI SDK or streamed OpenAI chat) is cancelled when its last
client leaves and none comes back within ``AGENT_CHAT_REATTACH_S``
(``app/server/run_streams``). The process executing the run counts its own followers;
before this, a client that came back through another replica (a load balancer's
``least_conn`` sends a resume anywhere) was not counted, and the run ended ``cancelled``
while that client read it. Here each replica says which runs executing elsewhere it has
followers of, on the engine's feed (PostgreSQL ``NOTIFY`` on ``run_followers``; the
sibling workers' sockets on one SQLite file):

* ``+`` when a run gets its first follower here, and again every ``beat_s`` while it
  has one (a word lost with a reconnect, or a replica killed with its followers, lapses
  after ``ttl_s`` instead of keeping the run for ever);
* ``-`` when its last follower here leaves, ``!`` when a follower whose leaving cancels
  the chat (the chat's own client) was among those that left since the run was first
  followed here — not only when it was the last to go: a reader of ``/events`` leaving
  after it does not make the chat's client's departure forgotten. The owner, told ``!``
  (``on_client_left``, whoever still holds the run, here or elsewhere), treats the run
  as one whose own client left (``Run.cancel_when_alone``), as it does when such a
  follower of its own leaves; from then on any last departure starts its timer.

Every replica keeps what it heard; the one executing the run asks ``held_until`` before
its timer cancels, and is told (``on_left``) when the last client elsewhere left, so its
timer starts again. Nothing here is durable: the run's log stays the only record, and a
replica that hears nothing cancels as before.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

log = logging.getLogger("agentchat.runs")

#: ``+`` attached (or still attached), ``-`` left, ``!`` left and the chat's client is gone.
Word = Literal["+", "-", "!"]
WORDS: tuple[Word, ...] = ("+", "-", "!")
#: Run ids per announcement: PostgreSQL's payload must stay under 8000 bytes.
IDS_PER_WORD = 100


class FollowersFeed(Protocol):
    """The part of a run feed (``storage.run_feed.RunFeed``) this needs."""

    def announce_followers(self, payload: str) -> None: ...

    def subscribe_followers(self, callback: Callable[[str], None]) -> None: ...


@dataclass(slots=True)
class FollowerPresence:
    """This replica's followers of runs elsewhere, told to every replica, and what every
    replica told about theirs. ``beat_s``: how often a followed run is said again;
    ``ttl_s``: how long what was heard counts without being said again."""

    feed: FollowersFeed
    beat_s: float = 2.0
    ttl_s: float = 7.0
    #: Who is speaking: every replica hears its own words too (one of its followers may
    #: read, through the feed, a run this replica took over meanwhile).
    replica: str = field(default_factory=lambda: secrets.token_hex(6))
    #: Whether this replica is stopping: its followers are let go then, not gone (a
    #: stream the server ends leaves its run alone, as on the run's own replica).
    server_stopping: Callable[[], bool] = lambda: False
    #: Followers here of runs executing elsewhere, by run.
    _here: dict[str, int] = field(default_factory=dict)
    #: Runs in ``_here`` a chat's own client left while other followers here stayed:
    #: the word when the last one leaves is ``!`` all the same.
    _client_left: set[str] = field(default_factory=set)
    #: What was heard: run -> replica -> until when (``time.monotonic()``) it counts.
    _elsewhere: dict[str, dict[str, float]] = field(default_factory=dict)
    _on_left: list[Callable[[str, bool], None]] = field(default_factory=list)
    _on_client_left: list[Callable[[str], None]] = field(default_factory=list)
    _on_joined: list[Callable[[str], None]] = field(default_factory=list)
    _pending: list[tuple[Word, str]] = field(default_factory=list)
    _flush_scheduled: bool = False
    _next_prune: float = 0.0
    #: How often a cancel timer found a client attached elsewhere and waited on: a
    #: figure for tests and logs.
    kept: int = 0

    def __post_init__(self) -> None:
        self.feed.subscribe_followers(self._heard)

    # --- the follower's side ------------------------------------------------------------

    def attached(self, run_id: str) -> None:
        """A follower here started reading ``run_id`` (executing elsewhere)."""
        count = self._here.get(run_id, 0)
        self._here[run_id] = count + 1
        if count == 0:
            self._say("+", run_id)

    def detached(self, run_id: str, *, cancels: bool) -> None:
        """A follower here stopped; ``cancels``: its leaving would cancel the chat."""
        count = self._here.get(run_id, 0) - 1
        if count > 0:
            self._here[run_id] = count
            if cancels:
                self._client_left.add(run_id)
            return
        self._here.pop(run_id, None)
        if run_id in self._client_left:
            self._client_left.discard(run_id)
            cancels = True
        self._say("!" if cancels and not self.server_stopping() else "-", run_id)

    async def beat_forever(self) -> None:
        """Say every followed run again each ``beat_s`` (a background task)."""
        while True:
            await asyncio.sleep(self.beat_s)
            for run_id in list(self._here):
                self._say("+", run_id)

    def _say(self, word: Word, run_id: str) -> None:
        self._pending.append((word, run_id))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        """One announcement per run of equal words said in this loop tick, in order."""
        self._flush_scheduled = False
        pending, self._pending = self._pending, []
        for word, ids in _runs_of_words(pending):
            for i in range(0, len(ids), IDS_PER_WORD):
                self.feed.announce_followers(f"{self.replica} {word} {','.join(ids[i : i + IDS_PER_WORD])}")

    # --- the owner's side ---------------------------------------------------------------

    def on_left(self, callback: Callable[[str, bool], None]) -> None:
        """``callback(run_id, cancels)`` when the last client attached elsewhere to
        ``run_id`` left (``cancels``: the one that left was a chat's own client)."""
        self._on_left.append(callback)

    def on_client_left(self, callback: Callable[[str], None]) -> None:
        """``callback(run_id)`` whenever a replica says ``!`` for ``run_id`` (a chat's own
        client left there), whoever still holds the run, here or elsewhere: the owner
        marks the run a chat's then (``Run.cancel_when_alone``). ``on_left`` alone came
        only with the last departure anywhere, so a reader still attached when the
        client left (on the owner, or on a third replica) made the word forgotten, and
        once that reader left no timer started."""
        self._on_client_left.append(callback)

    def on_joined(self, callback: Callable[[str], None]) -> None:
        """``callback(run_id)`` when a replica first says it has a client of ``run_id``
        (not its beats): the owner says so in its log, the one sign outside the process
        that a departure there will wait for that client."""
        self._on_joined.append(callback)

    def held_until(self, run_id: str) -> float | None:
        """Until when (``time.monotonic()``) a client attached elsewhere holds ``run_id``
        as things were last heard; ``None``: nobody does."""
        heard = self._elsewhere.get(run_id)
        if not heard:
            return None
        now = time.monotonic()
        for replica in [r for r, until in heard.items() if until <= now]:
            del heard[replica]
        if not heard:
            del self._elsewhere[run_id]
            return None
        return max(heard.values())

    def _heard(self, payload: str) -> None:
        replica, word, ids = _parse(payload)
        if word is None:
            return
        now = time.monotonic()
        self._prune(now)
        for run_id in ids:
            if word == "+":
                heard_from = self._elsewhere.setdefault(run_id, {})
                joined = heard_from.get(replica, 0.0) <= now  # new, or lapsed and said again
                heard_from[replica] = now + self.ttl_s
                if joined:
                    _tell(self._on_joined, "followers-joined", run_id)
                continue
            if word == "!":
                _tell(self._on_client_left, "chat-client-left", run_id)
            heard = self._elsewhere.get(run_id)
            if heard is not None:
                heard.pop(replica, None)
                if not heard:
                    del self._elsewhere[run_id]
            if self.held_until(run_id) is None:
                _tell(self._on_left, "followers-left", run_id, word == "!")

    def _prune(self, now: float) -> None:
        """Forget what lapsed, once per ``ttl_s``: runs that ended elsewhere are never said
        again, and nothing else removes them."""
        if now < self._next_prune:
            return
        self._next_prune = now + self.ttl_s
        for run_id in list(self._elsewhere):
            self.held_until(run_id)


def _runs_of_words(pending: Sequence[tuple[Word, str]]) -> list[tuple[Word, list[str]]]:
    out: list[tuple[Word, list[str]]] = []
    for word, run_id in pending:
        if out and out[-1][0] == word:
            out[-1][1].append(run_id)
        else:
            out.append((word, [run_id]))
    return out


def _tell(subscribers: Sequence[Callable[..., None]], what: str, run_id: str, *args: bool) -> None:
    """Call each subscriber with ``run_id`` (and ``args``); one subscriber's bug must not
    stop the others, nor the word's other runs."""
    for subscriber in subscribers:
        try:
            subscriber(run_id, *args)
        except Exception:
            log.exception("a %s subscriber failed", what, extra={"run_id": run_id})


def _parse(payload: str) -> tuple[str, Word | None, list[str]]:
    """``"<replica> <word> <id>,<id>…"``; a payload of another shape is ignored (a newer
    replica's word this one does not know)."""
    parts = payload.split(" ")
    if len(parts) != 3:
        return "", None, []
    replica, word, ids = parts
    for known in WORDS:
        if word == known:
            return replica, known, [i for i in ids.split(",") if i]
    return replica, None, []
