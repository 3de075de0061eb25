"""The runs this process knows, in memory: by id, by user and by conversation.

One index kept in step by one owner, so admission, conversation order, the lease upkeep
and the routes read the same picture. Admission asks about one user's runs (live, ending
still unwritten, recent) and must not walk every run of the replica for it (issue 23: at
500 live runs that was four scans of them per admission), hence the per-user index.
Conversations are keyed by (user, conversation id): ids are a namespace per user, so two
users' same-named conversations never order each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
from dataclasses import dataclass, field

from app.runs.run import Run


@dataclass(slots=True)
class RunRegistry:
    runs: dict[str, Run] = field(default_factory=dict)
    by_user: dict[str, dict[str, Run]] = field(default_factory=dict)
    by_conversation: dict[tuple[str, str], list[Run]] = field(default_factory=dict)
    #: Runs carried on here whose cut-off model turn was discarded: (from_seq, to_seq),
    #: known before their ``run_resumed`` is written (readers that cannot take text back).
    discarded: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: Per user, the ids of their runs here whose ending is not stored yet
    #: (``Run.ending_unwritten``), kept in step by each run's ``on_ending_state``: every
    #: admission with a run cap asks for them, and with ``AGENT_AUTH=none`` one user
    #: holds every run of the replica, so walking the user's runs made a burst O(N²).
    unwritten: dict[str, set[str]] = field(default_factory=dict)
    #: The runs that may still be live, by id: every registered run until ``active``
    #: finds it ended (or it is forgotten). ``active`` (asked twice per admission, by the
    #: live-run and model-pool caps) walked every run in memory, and finished runs stay
    #: there for ``finished_memory_s`` — ten times the live ones at a steady load of
    #: short runs, 84 µs a walk at 1,000 (issue 23); it now walks only these, and a run
    #: once ended (finished or released: neither is ever undone) is dropped for good.
    maybe_live: dict[str, Run] = field(default_factory=dict)
    #: Followers waiting for a run to be registered here (``arrival``): a run claimed by
    #: this process is in the store as claimed a moment before it is in memory.
    arrivals: dict[str, list[asyncio.Future[Run]]] = field(default_factory=dict)

    def register(self, run: Run) -> None:
        self.runs[run.id] = run
        self.maybe_live[run.id] = run
        self.by_user.setdefault(run.user_id, {})[run.id] = run
        self.by_conversation.setdefault((run.user_id, run.conversation_id), []).append(run)
        run.on_ending_state = self._ending_state
        self._ending_state(run)
        for waiter in self.arrivals.pop(run.id, ()):
            if not waiter.done():
                waiter.set_result(run)

    async def arrival(self, run_id: str, timeout: float) -> Run | None:
        """The run ``run_id`` once it is registered here, or ``None`` after ``timeout``
        seconds without it. Why: carrying a claimed run on reads it back from the store
        before registering it, and a follower arriving in between must wait for it, not
        take the store's snapshot of a run nobody has carried on yet for its end. A copy
        marked lost is not the run arriving: the claim that replaces it registers the
        new copy (returning at once for it made a follower ask again at once, in a loop)."""
        if (run := self.runs.get(run_id)) is not None and not run.lost:
            return run
        waiter: asyncio.Future[Run] = asyncio.get_running_loop().create_future()
        self.arrivals.setdefault(run_id, []).append(waiter)
        try:
            async with asyncio.timeout(timeout):
                return await waiter
        except TimeoutError:
            return None
        finally:
            waiting = self.arrivals.get(run_id)
            if waiting is not None and waiter in waiting:
                waiting.remove(waiter)
                if not waiting:
                    del self.arrivals[run_id]

    def _ending_state(self, run: Run) -> None:
        """``Run.on_ending_state``: the run's id in or out of its user's ``unwritten``."""
        if self.runs.get(run.id) is not run:
            return  # a copy a later claim replaced (or forgotten): the registered one speaks for the id
        if run.ending_unwritten:
            self.unwritten.setdefault(run.user_id, set()).add(run.id)
        else:
            self._written(run)

    def _written(self, run: Run) -> None:
        ids = self.unwritten.get(run.user_id)
        if ids is not None:
            ids.discard(run.id)
            if not ids:
                del self.unwritten[run.user_id]

    def forget(self, run_id: str) -> None:
        """Drop a run from memory (its log is in the store)."""
        run = self.runs.pop(run_id)
        self.maybe_live.pop(run_id, None)
        self.discarded.pop(run_id, None)
        self._written(run)
        if run.on_ending_state == self._ending_state:
            run.on_ending_state = None
        mine = self.by_user.get(run.user_id)
        if mine is not None:
            mine.pop(run_id, None)
            if not mine:
                del self.by_user[run.user_id]

    def leave_turn_order(self, run: Run) -> None:
        """Take a run out of its conversation's turn order: later runs no longer wait for
        this copy (it was parked, or a later claim superseded it)."""
        convo = self.by_conversation.get((run.user_id, run.conversation_id), [])
        if run in convo:
            convo.remove(run)

    def settle_conversation(self, run: Run) -> None:
        """Forget a conversation's order once none of its runs here is live."""
        convo = self.by_conversation.get((run.user_id, run.conversation_id))
        if convo is not None and all(r.finished or r.released for r in convo):
            self.by_conversation.pop((run.user_id, run.conversation_id), None)

    def live_in(self, user_id: str, conversation_id: str) -> list[Run]:
        """The conversation's runs here that have not ended: a new turn waits for them.
        Not a copy let go (``Run.lost``: an outage, a take-over): whoever claims it carries
        it on, and a new turn waits for its stored ending (``ids_in``)."""
        return [r for r in self.by_conversation.get((user_id, conversation_id), []) if not r.finished and not r.lost]

    def ids_in(self, user_id: str, conversation_id: str) -> set[str]:
        """The conversation's runs this process holds: the store's other unfinished runs
        of it are waited for through the store, a copy let go here among them (its
        ending, when dropped unstored, no longer counts: ``Run._let_go``)."""
        return {r.id for r in self.by_conversation.get((user_id, conversation_id), []) if not r.lost}

    def active(self) -> list[Run]:
        """The runs executing here (registered, neither finished nor released)."""
        live: list[Run] = []
        ended: list[str] = []
        runs = self.runs
        for run_id, run in self.maybe_live.items():
            if run.finished or run.released:
                ended.append(run_id)
            elif runs.get(run_id) is run:  # not replaced by a later copy, nor taken out
                live.append(run)
        for run_id in ended:
            del self.maybe_live[run_id]
        return live

    def held(self) -> list[Run]:
        """Runs whose lease this process must keep: live here, or ended with their ending
        still being written."""
        return [
            r
            for r in self.runs.values()
            if not r.lost and not r.released and (not r.finished or r.durable < len(r.events))
        ]

    def ending_unwritten(self, user_id: str) -> tuple[str, ...]:
        """The user's runs that ended here whose ending the writer has not stored yet:
        the store still counts them unfinished, the per-user cap must not. Read from
        the ``unwritten`` index: O(answer), not O(the user's runs)."""
        return tuple(self.unwritten.get(user_id, ()))

    def recent(self, user_id: str) -> list[Run]:
        """The user's runs still in memory, newest first."""
        return sorted(self.by_user.get(user_id, {}).values(), key=lambda r: r.created_at, reverse=True)

    def finished_here(self, user_id: str, run_id: str) -> bool:
        """Whether the user's run ``run_id`` is in memory here and has ended (its ending
        may still be in the write queue: the store counts it unfinished until then)."""
        run = self.by_user.get(user_id, {}).get(run_id)
        return run is not None and run.finished

    def count_active(self, user_id: str) -> int:
        return sum(1 for r in self.by_user.get(user_id, {}).values() if not r.finished and not r.released)

    def census(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for run in self.runs.values():
            out[run.status] = out.get(run.status, 0) + 1
        return out

    def forget_conversation(self, user_id: str, conversation_id: str) -> int:
        """Drop the finished runs of a conversation its user deleted (issue 25): nothing
        replays them from memory after the store has forgotten them. Live ones were
        cancelled and ended before the delete; any left are kept (they end as usual)."""
        gone = [
            r.id
            for r in self.runs.values()
            if r.user_id == user_id and r.conversation_id == conversation_id and r.finished
        ]
        for run_id in gone:
            self.forget(run_id)
        return len(gone)

    def sweep(self, now: float, finished_memory_s: float) -> int:
        """Forget runs taken over elsewhere and finished runs nobody has followed for
        ``finished_memory_s`` whose log is all stored; how many."""
        removed = 0
        for run_id, run in list(self.runs.items()):
            if run.lost and run.followers == 0:
                self.forget(run_id)
                removed += 1
            elif (
                run.finished
                and run.finished_at is not None
                and now - run.finished_at > finished_memory_s
                and run.followers == 0
            ):
                if run.durable < len(run.events):
                    continue  # its tail is still being written (a failed run's: by the rescue)
                self.forget(run_id)  # its run_resumed is in the log now
                removed += 1
        if removed:
            release_free_memory()
        return removed


def release_free_memory() -> None:
    """Hand freed heap pages back to the OS (glibc keeps them otherwise, so RSS stays at
    its peak long after a burst of runs is gone). A no-op where there is no glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    with contextlib.suppress(AttributeError):
        libc.malloc_trim(0)
