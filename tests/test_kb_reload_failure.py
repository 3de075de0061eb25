"""A server whose in-memory vectors cannot be reloaded after another process changed the
knowledge base (the CLI's ingest, a sibling worker) searches by meaning on the older ones
until a reload succeeds — and says so (no silent degradation): in the search's warnings
(the tool result and the stream's summary), in ``/readyz``'s ``semantic_search``
(``reload_failures``, ``reload_error``) and in ``agentchat_kb_reload_failures_total``.
Before, it was a log line: the result looked like an up-to-date search by meaning."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.cli.kb_file import open_kb_file
from llm.extractive import ExtractiveProvider
from tests.conftest import collect_sse, running_app
from tests.support.offline_app import offline_settings
from tests.test_metrics import get_metrics, value
from toolindex.hashing import HashingEmbedder

FAILURES = "agentchat_kb_reload_failures"
DOC = {"id": "moraine", "title": "Moraine survey", "text": "The moraine survey measured the Nigard glacier's retreat."}


async def no_memory_for_a_new_matrix() -> None:
    """A reload that cannot allocate the new matrix (a large knowledge base grown by
    another process past this one's memory)."""
    raise MemoryError("cannot allocate the new matrix")


async def test_a_failed_reload_is_said_in_the_search_readyz_and_a_metric(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "kb.db"
    settings = offline_settings(db, AGENT_KB_DEFAULT_BUCKETS="*")
    embedder = HashingEmbedder(dim=384)
    async with (
        running_app(settings, provider=ExtractiveProvider(), embedder=embedder) as (base, app),
        httpx.AsyncClient(timeout=60) as client,
    ):

        async def semantic() -> dict[str, Any]:
            return (await client.get(f"{base}/readyz")).json()["checks"]["knowledge"]["semantic_search"]  # type: ignore[no-any-return]

        assert (await semantic())["reload_failures"] == 0
        # The server's own in-memory vectors (SQLite's matrix) fail to reload.
        monkeypatch.setattr(app.state.services.rooms.knowledge.kb._vectors, "reload", no_memory_for_a_new_matrix)
        # Another process (the CLI, as from another shell) ingests into the same file.
        other = await open_kb_file(db, HashingEmbedder(dim=384))
        try:
            assert not (await other.ingest_documents([DOC], bucket="survey")).rejected
        finally:
            await other.aclose()

        events = await collect_sse(client, "POST", f"{base}/v1/agent/chat", json={
            "message": "How far did the Nigard glacier retreat in the moraine survey?", "context_type": "knowledge"})
        assert events[-1].json()["status"] == "completed"
        result = next(e.json() for e in events if e.event == "tool_call_result" and e.json()["name"] ==
                      "knowledge_base_search")
        assert "vectors older than the knowledge base" in str(result.get("summary")), result
        status = await semantic()
        metrics = await get_metrics(client, base)
        monkeypatch.undo()  # memory again: the next check reloads, and the error goes
        async with asyncio.timeout(30):
            while "reload_error" in (await semantic()):
                await asyncio.sleep(0.05)
    assert status["reload_failures"] >= 1 and "MemoryError" in status["reload_error"], status
    assert value(metrics, FAILURES, f"{FAILURES}_total") >= 1
