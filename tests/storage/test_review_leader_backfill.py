"""Review of d08f317: the KB's re-embedding as a leader's job (``app/rooms.py``) and what
``/readyz`` says on a process that lost the lead.

``/readyz`` calls the knowledge base stalled (not ready) while documents wait for vectors
and *this process's* last re-embedding pass failed. A leader whose passes failed (the
embedder was down) and that then lost its PostgreSQL advisory lock stops re-embedding —
another process does it now — but kept its failure count, so it went on answering 503
for as long as documents waited, however well the new leader was doing (a corpus moving
to another model can take hours). Stopping the passes now clears what they had found.

The first process's connection is cut (a loopback relay, as a network drop) and stays
cut, so the lock can only go to the second: ended with ``pg_terminate_backend`` on a
live connection, the first's campaign connected again and, on a loaded machine, could
take the lock back before the second's next try - then the first led again, its passes
failed again, and "the second took the lead" never came.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import numpy as np
import psycopg

from app.cli.kb_file import open_kb_file
from app.ops.leader import Leader
from app.rooms import KnowledgeComponent, _backfill_while_leading
from knowledge.types import KBConfig
from storage.postgres.leader_lock import AdvisoryLeaderLock
from tests.support.postgres import TestPostgres
from tests.support.tcp_cut import cuttable_relay
from toolindex.embedder import EmbeddingError
from toolindex.hashing import HashingEmbedder

DOCS = [
    {"id": "kiwi", "title": "Kiwi", "text": "Kiwi birds cannot fly and live in New Zealand forests."},
    {"id": "penguin", "title": "Penguin", "text": "Penguins swim in cold southern oceans and eat krill."},
]


class FlakyEmbedder(HashingEmbedder):
    """The real hashing embedder, except that document embedding fails while ``broken``."""

    def __init__(self) -> None:
        super().__init__(dim=64)
        self.broken = False

    async def embed_batch(self, texts: list[str], *, task: str = "document") -> np.ndarray:  # type: ignore[override]
        if self.broken:
            raise EmbeddingError("upstream 503")
        return await super().embed_batch(texts, task=task)  # type: ignore[arg-type]


async def until(condition: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    async def wait() -> None:
        while not condition():
            await asyncio.sleep(0.01)

    try:
        await asyncio.wait_for(wait(), timeout_s)
    except TimeoutError:
        raise AssertionError(f"never: {what}") from None


async def test_a_process_that_lost_the_lead_is_not_stalled_by_its_old_failures(
    pg_server: TestPostgres, tmp_path: Path
) -> None:
    emb = FlakyEmbedder()
    kb = await open_kb_file(tmp_path / "kb.db", emb)
    kb.backfill._config = KBConfig(reembed_backoff_min_s=0.05, reembed_backoff_max_s=0.2)
    knowledge = KnowledgeComponent(kb)
    with pg_server.database() as url:
        params = psycopg.conninfo.conninfo_to_dict(url)
        async with cuttable_relay(str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432)) as relay:
            relayed = psycopg.conninfo.make_conninfo(url, host="127.0.0.1", port=relay.port)
            first = Leader(AdvisoryLeaderLock(relayed), retry_s=0.05)
            second = Leader(AdvisoryLeaderLock(url), retry_s=0.05)
            first.start()
            await until(lambda: first.is_leader, "the first process leads")
            job = first.when_leading(_backfill_while_leading(kb), name="kb-backfill")
            try:
                emb.broken = True
                report = await kb.ingest_documents(DOCS)
                assert report.queued_for_embedding == 2
                await until(lambda: kb.backfill.failures > 0, "a failed pass while leading")
                leading = await knowledge.readiness()
                assert leading["ok"] is False and leading["pending_vectors"] == 2  # stalled: it is failing here

                # The lead moves: the first process's connection drops and stays down (its
                # session ends with it), the second takes the lock.
                second.start()
                relay.cut()
                await until(lambda: second.is_leader and not first.is_leader, "the second process took the lead")
                await until(lambda: kb.backfill._task is None, "the first process's passes stopped")
                assert first.lost == 1

                after = await knowledge.readiness()
                assert after["pending_vectors"] == 2  # still shown: the documents wait, found by text
                assert after["ok"] is True, after  # but this process re-embeds nothing: not its failure
                assert "last_error" not in after["reembedding"] and after["reembedding"]["state"] == "stopped"
            finally:
                await first.aclose()
                await second.aclose()
                await asyncio.gather(job, return_exceptions=True)
                await kb.aclose()
