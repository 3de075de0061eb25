"""``/readyz`` never waits for a knowledge-base count, on both engines.

A count sums every row of ``kb_documents`` (~1 s at 1M chunks, Kubernetes' default probe
timeout); during a long ingest every probe comes after a write, and a probe that counted
in its request took the timeout and readiness flapped on a replica able to serve. Now a
probe answers at once with the counts kept (``counted`` says how current they are) and
one background task per process counts the new generation.

Each count here is held on an event the test sets: the probe's answer is asserted while
the count cannot have ended, then the count is let go and the counts converge.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.knowledge_component import KnowledgeComponent
from knowledge import KnowledgeBase
from knowledge.types import DocumentIn, KBConfig
from tests.storage.test_readyz_counts import Statements
from tests.support.deadline import until, within
from tests.support.readyz_counts import current_readiness
from toolindex.hashing import HashingEmbedder

#: The background count's task name (``knowledge.kb_counts_memo``).
COUNT_TASK = "kb-readyz-counts"


def docs(*ids: str) -> list[DocumentIn]:
    return [DocumentIn(id=i, title=f"note {i}", text=f"The {i} glacier retreated by the moraine.") for i in ids]


class HeldCounts:
    """``KBIndex.counts`` of one storage bundle, held until ``release`` while ``held``:
    ``entered`` counts the counts that began, ``running`` those under way now."""

    def __init__(self, index: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self._count = index.counts
        self.held = False
        self.release = asyncio.Event()
        self.entered = 0
        self.running = 0
        self.most_at_once = 0
        self.failing: Exception | None = None
        #: Held, a cancel is not answered either: the count goes on waiting for ``release``
        #: (a cancelled statement waiting for a server that hangs).
        self.deaf = False
        self.cancels = 0
        monkeypatch.setattr(index, "counts", self.counts)

    async def counts(self, *args: Any, **kwargs: Any) -> Any:
        self.entered += 1
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            while self.held:
                try:
                    await self.release.wait()
                except asyncio.CancelledError:
                    self.cancels += 1
                    if not self.deaf:
                        raise
            if self.failing is not None:
                raise self.failing
            return await self._count(*args, **kwargs)
        finally:
            self.running -= 1

    def hold(self) -> None:
        self.held = True
        self.release = asyncio.Event()

    def let_go(self) -> None:
        self.held = False
        self.release.set()


def count_tasks() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t.get_name() == COUNT_TASK and not t.done()]


@pytest.fixture
async def kb(two_bundles: tuple[Any, Any]) -> AsyncIterator[KnowledgeBase]:
    here, _ = two_bundles
    opened = await KnowledgeBase.create(here.kb_index, HashingEmbedder(dim=64))
    try:
        yield opened
    finally:
        await opened.aclose()


async def test_a_probe_after_a_write_answers_without_waiting_for_the_count(
    kb: KnowledgeBase, two_bundles: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    here, _ = two_bundles
    component = KnowledgeComponent(kb, sample="ingested 1 chunk")
    await kb.ingest_documents(docs("a"))
    before = await current_readiness(component)
    assert before["documents"] == 1 and before["counted"]["current"] is True, before

    held = HeldCounts(here.kb_index, monkeypatch)
    held.hold()
    await kb.ingest_documents(docs("b", "c"))
    statements = Statements(here.db, monkeypatch)
    # Answered while its count cannot end: with the counts kept, saying they are older.
    probe = await within(component.readiness(), "a probe while the count is held")
    # Nor any other sum in its request (PostgreSQL: the vector index's status read the
    # vectors per bucket again after each write, ~1 s at 1M chunks).
    assert statements.over_documents() == [], statements.over_documents()
    assert probe["ok"] is True and probe["documents"] == 1, probe
    counted = probe["counted"]
    assert counted["current"] is False and counted["counting"] is True, counted
    assert counted["generation"] < counted["stored_generation"] and counted["age_s"] >= 0, counted
    # Started beside the probe (its task may reach the store's sum just after the answer).
    await until(lambda: held.running == 1, "the count to start beside the probe")
    assert held.entered == 1

    held.let_go()
    after = await within(current_readiness(component), "the counts to converge")
    assert after["documents"] == after["chunks"] == after["vectors"] == 3, after
    assert after["counted"]["counting"] is False and after["counted"]["generation"] == counted["stored_generation"]


async def test_one_count_runs_at_a_time_under_many_probes(
    kb: KnowledgeBase, two_bundles: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Probes and writes interleaved while a count is held: the probes all answer, none
    starts a second count; once it ends the next probe starts one more, and the counts
    converge to every write."""
    here, there = two_bundles
    elsewhere = await KnowledgeBase.create(there.kb_index, HashingEmbedder(dim=64))  # another process
    try:
        component = KnowledgeComponent(kb, sample="ingested 1 chunk")
        await kb.ingest_documents(docs("a"))
        await current_readiness(component)
        held = HeldCounts(here.kb_index, monkeypatch)
        held.hold()
        answers = []
        for i in range(5):
            writer = kb if i % 2 else elsewhere
            await writer.ingest_documents(docs(f"w{i}"))
            answers += await within(
                asyncio.gather(*(component.readiness() for _ in range(8))), "probes while the count is held"
            )
        assert len(answers) == 40 and all(a["ok"] and a["counted"]["counting"] for a in answers)
        assert held.entered == 1 and len(count_tasks()) == 1, (held.entered, count_tasks())

        held.let_go()
        final = await within(current_readiness(component), "the counts to converge")
        assert final["documents"] == 6, final
        assert held.most_at_once == 1, "two counts ran at once"
    finally:
        await elsewhere.aclose()


async def test_the_first_probe_answers_without_counts_and_starts_one(
    kb: KnowledgeBase, two_bundles: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    here, _ = two_bundles
    await kb.ingest_documents(docs("a", "b"))
    held = HeldCounts(here.kb_index, monkeypatch)
    held.hold()
    component = KnowledgeComponent(kb, sample="already there: ingested by an earlier start")
    first = await within(component.readiness(), "the first probe while its count is held")
    assert first["ok"] is True, first
    assert (first["documents"], first["chunks"], first["vectors"]) == (None, None, None), first
    assert first["older_chunking"] == {"documents": None} and first["newer_chunking"] == {"documents": None}
    assert first["counted"]["counting"] is True and first["counted"]["generation"] is None, first
    held.let_go()
    assert (await within(current_readiness(component), "the first count"))["documents"] == 2


async def test_a_failing_count_is_logged_once_and_shown_and_never_decides_ok(
    kb: KnowledgeBase,
    two_bundles: tuple[Any, Any],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    here, _ = two_bundles
    component = KnowledgeComponent(kb, sample="ingested 1 chunk")
    await kb.ingest_documents(docs("a"))
    await current_readiness(component)
    held = HeldCounts(here.kb_index, monkeypatch)
    held.failing = OSError("the reader's disk is gone")
    await kb.ingest_documents(docs("b"))
    caplog.set_level(logging.INFO, logger="agentchat.knowledge")
    seen: list[dict[str, Any]] = []

    async def failed_three_times() -> bool:
        seen.append(await component.readiness())
        return seen[-1]["counted"].get("failures", 0) >= 3

    await until(failed_three_times, "three failed counts")
    assert all(a["ok"] is True and a["documents"] == 1 for a in seen), seen
    assert seen[-1]["counted"]["error"] == "OSError: the reader's disk is gone", seen[-1]
    warnings = [r for r in caplog.records if "could not count the knowledge base" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in caplog.records]

    held.failing = None
    recovered = await within(current_readiness(component), "a count after the failures")
    assert recovered["documents"] == 2 and "error" not in recovered["counted"], recovered


async def test_a_close_while_counting_leaves_no_task_behind(
    two_bundles: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    here, _ = two_bundles
    kb = await KnowledgeBase.create(here.kb_index, HashingEmbedder(dim=64))
    closed = False
    try:
        await kb.ingest_documents(docs("a"))
        held = HeldCounts(here.kb_index, monkeypatch)
        held.hold()
        await within(KnowledgeComponent(kb, sample="ingested 1 chunk").readiness(), "a probe while its count is held")
        await until(lambda: held.running == 1, "the count to wait in the store")
        assert len(count_tasks()) == 1
        await within(kb.aclose(), "the close while a count is held")
        closed = True
        assert count_tasks() == [] and held.running == 0, count_tasks()
        assert kb.status._counted.counting is False
    finally:
        if not closed:
            await kb.aclose()


async def test_a_close_while_a_count_does_not_answer_its_cancel_goes_on_without_it(
    two_bundles: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A count whose cancel is not answered (PostgreSQL hanging at shutdown: psycopg's
    cancelled statement waits for the server) held the close, and the app's shutdown,
    for as long as it hung: the close now waits ``KBConfig.readyz_count_stop_s``, names
    the count it left in the log once, and goes on; the count ends once answered."""
    here, _ = two_bundles
    config = KBConfig(readyz_count_stop_s=0.2)
    kb = await KnowledgeBase.create(here.kb_index, HashingEmbedder(dim=64), config=config)
    held = HeldCounts(here.kb_index, monkeypatch)
    closed = False
    try:
        await kb.ingest_documents(docs("a"))
        held.hold()
        held.deaf = True
        await within(KnowledgeComponent(kb, sample="ingested 1 chunk").readiness(), "a probe while its count is held")
        await until(lambda: held.running == 1, "the count to wait in the store")
        [count] = count_tasks()
        with caplog.at_level(logging.ERROR, logger="agentchat.knowledge"):
            await within(kb.aclose(), "the close while a count does not answer its cancel")  # before: never returned
        closed = True
        assert not count.done() and held.cancels == 1, "the close waited until the cancelled count ended"
        left = [r for r in caplog.records if "/readyz count" in r.getMessage()]
        assert len(left) == 1 and getattr(left[0], "task", None) == COUNT_TASK, [r.getMessage() for r in caplog.records]
    finally:
        held.let_go()  # answered at last: the count left behind ends by itself
        if not closed:
            await kb.aclose()
        if left_behind := count_tasks():
            await within(asyncio.wait(left_behind), "the count left behind, once answered")
    assert count_tasks() == []
