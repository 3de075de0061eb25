"""Whether another process changed the stored knowledge base, and taking it in.

Why: a server keeps state derived from the stored knowledge base in memory - on SQLite
the whole vector matrix (``knowledge.dense``), on both engines the bucket schemas
(``knowledge.buckets``) and the index's text statistics. ``agentchat ingest`` or
``agentchat docs rm`` run while it serves, a ``--workers`` sibling or another replica
changed the database under it, and it went on scoring a removed document by meaning
and never found a new one that way until a restart.

How: every write of the knowledge base, by any process, counts a stored generation up
in its own transaction (``storage.stores.kb_generation``). Before a search (and before
``/readyz`` counts) ``check`` reads it - one indexed read, shared by the searches that
arrive while it runs - and compares it with the last one taken in. Where the vectors are
searched in the database (PostgreSQL) only statistics and schemas are cached, and the
read is a round trip: there it is made at most once a second
(``DenseSide.check_every_s``). Generations this
process wrote itself change nothing (its memory followed its own writes); one written
elsewhere makes the index forget its cached statistics and schemas, the schemas are read
again, and the dense side reloads (``DenseSide.reload``: the SQLite matrix is loaded
anew beside the old one, which serves searches meanwhile; nothing on PostgreSQL, whose
vectors are searched in the database). A search waits for a reload at most
``RELOAD_WAIT_S`` after it began: a small knowledge base is reloaded by then, and a
large one keeps answering from the old matrix until the new one is ready - without the
wait once a reload here took longer than it (then waiting only slows the search).

Until then a removed document's vectors may still be scanned; they never reach a result:
hits are read from the database by chunk id (``KBIndex.hydrate``), a removed chunk is
not there, and SQLite never hands a removed chunk's id to another chunk.

Searches that run on an engine without a generation (a test's fake index) skip all this.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from knowledge.buckets import Buckets
from knowledge.dense import DenseSide
from storage.interfaces import KBGenerations, KBIndex

log = logging.getLogger("agentchat.knowledge")

#: How long after a reload began a search still waits for it (seconds): the sample
#: knowledge base reloads in 4 ms, 100k chunks took 4.5 s of CPU (14 s on 2 cores at load
#: 8, ``bench/kb_freshness.py``); past this the old matrix answers until the new one is
#: ready. Once a reload took longer than this, searches do not wait at all (the next
#: will most likely take as long: the wait would only add to every such search).
RELOAD_WAIT_S = 0.5


class KBFreshness:
    """The generation of the stored knowledge base this process has taken in."""

    def __init__(self, index: KBIndex, buckets: Buckets, dense: DenseSide) -> None:
        self._gens: KBGenerations | None = index if isinstance(index, KBGenerations) else None
        self._buckets = buckets
        self._dense = dense
        #: The generation taken in (every change up to it is in this process's memory).
        self.seen = 0
        #: The read under way, and the one that searches arriving meanwhile wait for.
        self._reading: asyncio.Task[None] | None = None
        self._next: asyncio.Task[None] | None = None
        self._reload: asyncio.Task[None] | None = None
        self._reload_began = 0.0
        #: How long the last reload that succeeded took (seconds; ``None``: none yet).
        self._reload_took: float | None = None
        #: Another change came in while a reload ran: it may not have read it.
        self._reload_again = False
        #: The last reload failed: the next check starts another.
        self._failed = False
        #: When the last read of the generation began (``DenseSide.check_every_s``).
        self._read_at = -float("inf")
        #: Reloads after another process's change, since start (``/metrics``).
        self.reloads = 0
        #: Reloads that failed since start (``/metrics``), and the last one's error while
        #: the vectors in memory are older than the stored ones (``None`` once one
        #: succeeds): searches by meaning and ``/readyz`` say so meanwhile.
        self.reload_failures = 0
        self.reload_error: str | None = None

    def follow(self, dense: DenseSide, *, seen_at_load: int) -> None:
        """Reload ``dense`` from now on: the knowledge base's new dense side, loaded
        already (``KnowledgeBase.adopt_embedder``) by a load that began when ``seen`` was
        ``seen_at_load``. A change taken in since went to the old side, and the load may
        have read before it: ``dense`` is reloaded now (else it missed those vectors
        until another change came from elsewhere). A change not taken in yet is
        reloaded into it at the next check."""
        self._dense = dense
        if self.seen != seen_at_load:
            self._start_reload()

    async def start(self) -> None:
        """Before the first load: the generation that load will contain (at least)."""
        if self._gens is not None:
            self.seen = await self._gens.kb_generation()
            self._gens.seen_upto(self.seen)

    async def check(self) -> None:
        """Take in what other processes changed before now. Concurrent callers share one
        read, but never one that began before they arrived (it could predate a change
        they know of: the CLI's ingest that just returned)."""
        if self._gens is None:
            return
        every = self._dense.check_every_s
        if every and time.monotonic() - self._read_at < every:
            return
        if self._next is None:
            self._next = asyncio.create_task(self._read_after(self._reading), name="kb-generation")
            self._next.add_done_callback(_retrieve)
        await asyncio.shield(self._next)
        reload = self._reload
        took = self._reload_took
        if reload is not None and not reload.done() and (took is None or took < RELOAD_WAIT_S):
            wait = self._reload_began + RELOAD_WAIT_S - time.monotonic()
            if wait > 0:
                await asyncio.wait({reload}, timeout=wait)

    async def _read_after(self, before: asyncio.Task[None] | None) -> None:
        if before is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(before)
        me = asyncio.current_task()
        self._next = None  # whoever arrives from now on waits for the next read
        self._read_at = time.monotonic()
        self._reading = me
        try:
            await self._take_in()
        finally:
            if self._reading is me:
                self._reading = None

    async def _take_in(self) -> None:
        gens = self._gens
        assert gens is not None
        current = await gens.kb_generation()
        if self._failed:
            self._failed = False
            self._start_reload()
        if current == self.seen:
            return
        mine = gens.written_here(self.seen, current)
        if mine is None:  # a write of ours in the range is committing: decide on the next search
            return
        if not mine:
            gens.changed_elsewhere()
            await self._buckets.load()
            self._start_reload()
        self.seen = current
        gens.seen_upto(current)

    def _start_reload(self) -> None:
        if self._reload is not None and not self._reload.done():
            self._reload_again = True
            return
        self._reload_began = time.monotonic()
        self._reload = asyncio.create_task(self._reload_until_current(), name="kb-reload")

    async def _reload_until_current(self) -> None:
        while True:
            self._reload_again = False
            began = time.monotonic()
            try:
                await self._dense.reload()
            except Exception as exc:
                # The old matrix keeps serving; the next check tries again.
                log.exception("knowledge base: reloading the vectors after another process's change failed")
                self._failed = True
                self.reload_failures += 1
                self.reload_error = f"{type(exc).__name__}: {exc}"[:300]
                return
            self._reload_took = time.monotonic() - began
            self.reloads += 1
            self.reload_error = None
            if not self._reload_again:
                return

    async def aclose(self) -> None:
        for task in (self._reload, self._next, self._reading):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task


def _retrieve(task: asyncio.Task[None]) -> None:
    """A shared read whose every waiter was cancelled: its error is not left unread
    (each waiter that stayed got it raised)."""
    if not task.cancelled():
        task.exception()


__all__ = ["RELOAD_WAIT_S", "KBFreshness"]
