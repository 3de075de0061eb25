"""The knowledge base's counts for ``/readyz``, read again only when the stored knowledge
base changed, and then in the background: a probe never waits for a count
(``knowledge.kb_status``).

Why: the counts (documents, chunks, vectors, documents without today's vectors or cut by
older chunking rules, the attachments' apart) are sums over every row of
``kb_documents``: at 1M chunks ~1 s of a reader thread (SQLite) or of a pooled
connection (PostgreSQL, 0.4 s of its CPU) per count (``bench/readyz_cost.py``). A load
balancer or Kubernetes asks every few seconds on every replica, with a 1 s timeout by
default: a probe that counted after each write took that long during a long ingest, and
readiness flapped on a replica perfectly able to serve. The counts are informational -
what decides readiness is read at every probe (the sample's state, the re-embedding's
failures) - so a probe answers with the counts kept and says how old they are.

How: every write of the knowledge base, by any process on the database, counts the
stored generation up in its own transaction (``storage.stores.kb_generation``). A probe
reads the generation (one indexed read). Counts kept for that very generation are
exact - nothing was written since - and are given as they are (``current``). Counts kept
for another generation, or none, are given at once as they are (``current`` false, with
their generation and age) and one background task counts the stored generation: never
more than one per process, however many probes arrive meanwhile; the next probe after it
ended finds them current (unless more was written since). Its failure is kept for the
JSON (``error``, ``failures`` in a row) and logged once per streak of failures; the next
probe that finds the counts stale tries again. ``aclose`` (the knowledge base's close, at
shutdown) cancels a count under way and waits for its task to end.

The generation is read first, then the counts; they are kept with that generation. A
write committed between the two reads may be in the counts kept for the older
generation: the next probe sees a newer one and counts again. Counts are kept whatever
the generation kept before (one count at a time, so the newest): a generation lower than
the kept one is a database brought back (a restore, a failover to a standby behind), and
the counts of the lost timeline must not be served once new writes count up to its
number again - kept generations are compared for equality, never for order.

A process's first probe has nothing kept: it answers without counts (``null``) and starts
the count, rather than count in the probe. A demanding operator's replica is probed
first right after its start, when a slow answer is the one that costs most (the probe's
timeout keeps a new replica out of rotation, or an orchestrator restarts it), and the
counts are not what decides whether it may serve.

An index without a generation (a test's fake) is counted at every call, in the call.
"""

from __future__ import annotations

import asyncio
import io
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from knowledge.dense import DenseSide
from storage.interfaces import KBGenerations, KBIndex
from storage.kb_records import KBCounts

log = logging.getLogger("agentchat.knowledge")

#: What a count is asked for: ``(embed_key, dim, hidden_prefix, chunk_rules)``.
Asked = tuple[str | None, int | None, str | None, int | None]


@dataclass(frozen=True, slots=True)
class StoredCounts:
    """What the store said (``counts``) and the dense side's vectors, read together: a
    vector count read live beside older counts would move with a conversation's
    attachment before their private counts do, and tell ``/readyz``'s readers of it."""

    counts: KBCounts
    vectors: int


@dataclass(frozen=True, slots=True)
class CountsSeen:
    """What one probe answers with: the counts kept (``stored``; ``None``: none yet) and
    how they stand against the stored knowledge base the probe read."""

    stored: StoredCounts | None
    #: Counted at the generation the probe read: exact now.
    current: bool
    #: The generation they were counted at, and the one the probe read (``None``: an
    #: index without generations, counted in the call).
    generation: int | None
    stored_generation: int | None
    #: Seconds since their count began (``None``: none kept).
    age_s: float | None
    #: A count is under way in the background.
    counting: bool
    #: The last count's failure and how many failed in a row (0 after a success).
    error: str | None = None
    failures: int = 0

    def status(self) -> dict[str, Any]:
        """``/readyz``'s ``counted``: how current the counts beside it are."""
        out: dict[str, Any] = {
            "current": self.current,
            "generation": self.generation,
            "stored_generation": self.stored_generation,
            "age_s": None if self.age_s is None else round(self.age_s, 1),
            "counting": self.counting,
        }
        if self.error is not None:
            out["error"] = self.error
            out["failures"] = self.failures
        return out


@dataclass(frozen=True, slots=True)
class _Kept:
    generation: int
    asked: Asked
    stored: StoredCounts
    began: float
    #: Which count this was (``CountsAtGeneration._started``): a waiter takes a count
    #: started after it arrived, whatever generation it read.
    number: int


class CountsAtGeneration:
    """The store's counts of one knowledge base, kept while its generation stands and
    counted again by one background task when it moved (see the module docstring)."""

    def __init__(
        self, index: KBIndex, dense: DenseSide, *, stop_s: float = 5.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._index = index
        #: How long ``aclose`` waits for a cancelled count (``KBConfig.readyz_count_stop_s``).
        self._stop_s = stop_s
        self._gens: KBGenerations | None = index if isinstance(index, KBGenerations) else None
        self._dense = dense
        self._clock = clock
        self._kept: _Kept | None = None
        #: The one count, while it runs (``None`` when none ever ran); it returns its
        #: failure, if it failed, for the callers that wait for it.
        self._task: asyncio.Task[Exception | None] | None = None
        #: Counts started since start; the running one is number ``_started``.
        self._started = 0
        self._closed = False
        self._error: str | None = None
        self._failures = 0
        #: Counts read from the store since start (one sum over ``kb_documents`` each).
        self.reads = 0

    async def read(
        self,
        embed_key: str | None,
        dim: int | None,
        *,
        hidden_prefix: str | None,
        chunk_rules: int | None,
        wait: bool = False,
    ) -> CountsSeen:
        """The counts kept, at once; a count of the stored generation started in the
        background when they are not for it (and none runs already).

        ``wait``: counts that hold every write committed before this call, waiting for
        the count under way if it began after this call arrived, else for one more
        (``KBStatus.stats``' callers other than ``/readyz``: the CLI's, a test's). A
        count's failure is raised then."""
        asked = (embed_key, dim, hidden_prefix, chunk_rules)
        if self._gens is None:
            return CountsSeen(await self._count(asked), True, None, None, 0.0, False)
        arrived_after = self._started
        generation = await self._gens.kb_generation()
        kept = self._usable(asked)
        current = kept is not None and kept.generation == generation
        if not current and wait:
            kept = await self._wait_for_count(asked, generation, arrived_after)
            current = True
        elif not current:
            self._start(asked)
        return CountsSeen(
            stored=kept.stored if kept is not None else None,
            current=current,
            generation=kept.generation if kept is not None else None,
            stored_generation=generation,
            age_s=self._clock() - kept.began if kept is not None else None,
            counting=self.counting,
            error=self._error,
            failures=self._failures,
        )

    @property
    def counting(self) -> bool:
        """A count runs in the background now."""
        return self._task is not None and not self._task.done()

    def _usable(self, asked: Asked) -> _Kept | None:
        return self._kept if self._kept is not None and self._kept.asked == asked else None

    async def _wait_for_count(self, asked: Asked, generation: int, arrived_after: int) -> _Kept:
        """Counts holding every write committed before the caller arrived: those of the
        generation it read (counted meanwhile), or of a count started after it arrived
        (a write committed since does not send it to count again: an ingest under way
        commits batch after batch)."""
        while True:
            self._start(asked)
            task, number = self._task, self._started
            if task is None:
                raise RuntimeError("the knowledge base is closed: no count of it starts")
            failure = await asyncio.shield(task)
            kept = self._usable(asked)
            if kept is not None and (kept.generation == generation or kept.number > arrived_after):
                return kept
            if failure is not None and number > arrived_after:
                raise failure

    def _start(self, asked: Asked) -> None:
        if self._closed or self.counting:
            return
        self._started += 1
        self._task = asyncio.create_task(self._count_in_background(asked, self._started), name="kb-readyz-counts")

    async def _count_in_background(self, asked: Asked, number: int) -> Exception | None:
        assert self._gens is not None
        began = self._clock()
        try:
            generation = await self._gens.kb_generation()
            stored = await self._count(asked)
        except Exception as exc:  # the database away: the JSON says it, the next stale probe tries again
            self._error = f"{type(exc).__name__}: {exc}"[:300]
            self._failures += 1
            if self._failures == 1:
                log.warning(
                    "could not count the knowledge base for /readyz; its counts there are older until a count succeeds",
                    extra={"error": self._error},
                )
            return exc
        # Kept whatever the generation kept before: counts run one at a time, so this is
        # the newest (a lower generation is a database brought back: see the module
        # docstring).
        self._kept = _Kept(generation, asked, stored, began, number)
        if self._failures:
            log.info("counted the knowledge base for /readyz again", extra={"failed_counts": self._failures})
        self._error, self._failures = None, 0
        return None

    async def _count(self, asked: Asked) -> StoredCounts:
        embed_key, dim, hidden_prefix, chunk_rules = asked
        self.reads += 1
        counts = await self._index.counts(embed_key, dim, hidden_prefix=hidden_prefix, chunk_rules=chunk_rules)
        vectors = await self._dense.count()  # from the store on PostgreSQL, from memory on SQLite
        return StoredCounts(counts, vectors)

    async def aclose(self) -> None:
        """Cancel a count under way and wait at most ``stop_s`` for its task to end; no
        count starts after. A cancelled statement waits for PostgreSQL to answer the
        cancel, which a server hanging at shutdown never does: a count still running
        then is logged with its stack and left, so the shutdown goes on (a step of the
        close budget, ``app/ops/close_budget.py``)."""
        self._closed = True
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=self._stop_s)  # its cancellation is not this close's
            if not done:
                task.print_stack(file=(stack := io.StringIO()))
                log.error("knowledge base: the /readyz count did not end within %.1f s of its cancellation; "
                          "closing without it", self._stop_s,
                          extra={"task": task.get_name(), "stack": stack.getvalue()[-3000:]})  # fmt: skip


__all__ = ["CountsAtGeneration", "CountsSeen", "StoredCounts"]
