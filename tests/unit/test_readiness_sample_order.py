"""/readyz's knowledge check takes the sample's state before it reads the counts, so an
ingest that ends during those reads is never reported ready beside counts of none."""

from __future__ import annotations

import asyncio
from typing import Any

from app.rooms import KnowledgeComponent


class _Backfill:
    pending = 0
    tally_moves = 0
    failures = 0
    state = "idle"
    last_error = None

    def status(self) -> dict[str, Any]:
        return {"state": self.state}


class _Status:
    """Counts read while the sample's ingest ends: the reads saw the database before it."""

    def __init__(self) -> None:
        self.component: KnowledgeComponent | None = None

    async def stats(self, *, wait: bool = True) -> dict[str, Any]:
        await asyncio.sleep(0)
        assert self.component is not None
        self.component.sample = "ingested 106 chunks"  # the ingest commits meanwhile
        return {"documents": 0, "chunks": 0, "vectors": 0, "documents_without_current_vectors": 0,
                "counted": {"current": True}}  # fmt: skip

    async def semantic(self, *, wait: bool = True) -> dict[str, Any]:
        return {"embedder": None}


class _KB:
    def __init__(self) -> None:
        self.backfill = _Backfill()
        self.status = _Status()


async def test_an_ingest_ending_during_the_counts_is_not_ready_yet() -> None:
    kb = _KB()
    component = KnowledgeComponent(kb=kb, sample="ingesting")
    kb.status.component = component
    out = await component.readiness()
    assert out["ok"] is False and out["sample_kb"] == "ingesting", out
    again = await component.readiness()  # the next poll: the counts begin after the commit
    assert again["sample_kb"] == "ingested 106 chunks" and again["ok"] is True
