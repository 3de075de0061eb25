"""The knowledge base's counts for ``/readyz``, read again only when the stored knowledge
base changed (``knowledge.kb_status``).

Why: the counts (documents, chunks, vectors, documents without today's vectors or cut by
older chunking rules, the attachments' apart) are sums over every row of
``kb_documents``: at 1M chunks ~1 s of a reader thread (SQLite) or of a pooled
connection (PostgreSQL, 0.4 s of its CPU) per probe (``bench/readyz_cost.py``), and a load
balancer or Kubernetes asks every few seconds on every replica - for numbers that had not
moved since the last probe.

How, without serving a stale number: every write of the knowledge base, by any process
on the database, counts the stored generation up in its own transaction
(``storage.stores.kb_generation``). The generation is read first (one indexed read),
then the counts; they are kept with that generation and given again while the stored
generation is still the same - nothing has been written since, so they are the counts a
scan would read now. A write committed between the two reads may be in the counts kept
for the older generation: the next probe sees a newer one and counts again. An index
without a generation (a test's fake) is counted at every call.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from knowledge.dense import DenseSide
from storage.interfaces import KBGenerations, KBIndex
from storage.kb_records import KBCounts


@dataclass(frozen=True, slots=True)
class StoredCounts:
    """What the store said: ``counts``, and the dense side's vectors when it counts them
    from the store (``DenseSide.count_reads_store``; ``None``: counted in memory, live)."""

    counts: KBCounts
    vectors: int | None


@dataclass(frozen=True, slots=True)
class _Kept:
    generation: int
    asked: tuple[str | None, int | None, str | None, int | None]
    stored: StoredCounts


class CountsAtGeneration:
    """The store's counts of one knowledge base, kept while its generation stands."""

    def __init__(self, index: KBIndex, dense: DenseSide) -> None:
        self._index = index
        self._gens: KBGenerations | None = index if isinstance(index, KBGenerations) else None
        self._dense = dense
        self._kept: _Kept | None = None
        #: One count at a time: probes arriving while one counts wait for it, then
        #: take its answer if it counted the generation they arrived at (a write
        #: committed since does not send them to count again: an ingest under way
        #: commits batch after batch).
        self._counting = asyncio.Lock()
        #: Counts read from the store since start (one sum over ``kb_documents`` each).
        self.reads = 0

    async def read(
        self, embed_key: str | None, dim: int | None, *, hidden_prefix: str | None, chunk_rules: int | None
    ) -> StoredCounts:
        """The counts ``KBIndex.counts`` would give now (and the dense side's vectors)."""
        asked = (embed_key, dim, hidden_prefix, chunk_rules)
        if self._gens is None:
            return await self._count(asked)
        generation = await self._gens.kb_generation()
        if (kept := self._kept) is not None and kept.generation == generation and kept.asked == asked:
            return kept.stored
        async with self._counting:
            # Counted meanwhile at the generation this probe arrived at: every write
            # committed before it arrived is in those counts, whatever came after.
            if (kept := self._kept) is not None and kept.generation == generation and kept.asked == asked:
                return kept.stored
            generation = await self._gens.kb_generation()
            stored = await self._count(asked)
            # Kept whatever the generation kept before: counts run one at a time, so this
            # is the newest. A generation lower than that one is a database brought back
            # (a restore, a failover to a standby behind): the counts kept for the lost
            # timeline would be served again once new writes count up to its number.
            self._kept = _Kept(generation, asked, stored)
            return stored

    async def _count(self, asked: tuple[str | None, int | None, str | None, int | None]) -> StoredCounts:
        embed_key, dim, hidden_prefix, chunk_rules = asked
        self.reads += 1
        counts = await self._index.counts(embed_key, dim, hidden_prefix=hidden_prefix, chunk_rules=chunk_rules)
        vectors = await self._dense.count() if self._dense.count_reads_store else None
        return StoredCounts(counts, vectors)


__all__ = ["CountsAtGeneration", "StoredCounts"]
