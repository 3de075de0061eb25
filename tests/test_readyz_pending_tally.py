"""/readyz's documents waiting for vectors when a probe straddles a re-embedding pass
(the flaky ``test_kb_reembed_process``): the probe reads counts current at the stored
generation, then awaits the semantic side while the pass stores the vectors and ends.
The counts it read are older than the re-embedding's tally by then: written over it,
they said "ready" beside one document waiting, and the tally kept saying so until the
next background count."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from app.rooms import KnowledgeComponent
from tests.support.procs import until
from tests.test_kb_backfill import FlakyEmbedder, fast_kb

NOTE = {"id": "zebra", "title": "Zebra rotation", "text": "The zebra rotation moves the pager every Tuesday."}


async def current_readiness(component: KnowledgeComponent) -> dict[str, Any]:
    """A probe whose counts are current (counted in the background after earlier probes)."""
    async with asyncio.timeout(30):  # a bound against a hang, not an expectation of speed
        while not (out := await component.readiness())["counted"]["current"]:
            await asyncio.sleep(0.02)
    return out


async def test_a_probe_straddling_the_pass_that_embeds_says_what_the_pass_left(tmp_path: Path) -> None:
    emb = FlakyEmbedder()
    kb = await fast_kb(tmp_path / "kb.db", emb)
    component = KnowledgeComponent(kb=kb, sample="ingested 1 chunks")
    try:
        kb.backfill.start()
        report = await kb.ingest_documents([NOTE])
        assert report.queued_for_embedding == 1, report
        await until(lambda: kb.backfill.failures > 0, "a failed pass", 30)
        stalled = await current_readiness(component)
        assert (stalled["ok"], stalled["pending_vectors"]) == (False, 1), stalled

        # The next probe reads those current counts, then is held before the semantic side
        # (its awaits are where the pass ran when the test flaked).
        real_semantic = kb.status.semantic
        held, release = asyncio.Event(), asyncio.Event()

        async def semantic_after_the_pass(*, wait: bool = True) -> dict[str, Any]:
            held.set()
            await release.wait()
            return await real_semantic(wait=wait)

        kb.status.semantic = semantic_after_the_pass  # type: ignore[method-assign]
        probe = asyncio.create_task(component.readiness())
        await held.wait()
        emb.broken = False
        kb.backfill.wake()
        await until(lambda: kb.backfill.state == "idle" and kb.backfill.reembedded == 1, "the pass that embeds", 30)
        assert kb.backfill.pending == 0 and kb.backfill.failures == 0
        release.set()
        out = await probe
        kb.status.semantic = real_semantic  # type: ignore[method-assign]

        # Ready, and nothing waits: what the pass left, not the counts read before it.
        assert (out["ok"], out["pending_vectors"]) == (True, 0), out
        assert "detail" not in out, out
        assert kb.backfill.pending == 0, kb.backfill.status()  # the tally was not set back
        after = await component.readiness()  # the counts of the older generation: the tally
        assert (after["ok"], after["pending_vectors"]) == (True, 0), after
    finally:
        await kb.aclose()
