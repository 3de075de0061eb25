"""Saved web answers whose lookup falls back say so (no silent degradation): a lookup
whose meaning side fails (the embedder) finds by keyword terms only, one whose database
read fails finds nothing, an answer stored while the embedder fails has no vectors — each
is said in ``knowledge_base_search``'s warnings (the model reads them; the stream's
summary shows the first), counted in ``agentchat_saved_answer_fallbacks_total{reason}``
and shown in ``/readyz``'s ``keywords``. Before, each was a log line only: the result
looked like "no saved answer matched", which invites a paid web search again."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import psycopg.errors

from agenttools.core.catalog import build_catalog
from agenttools.core.registry import RunToolState, ToolContext, ToolRegistry
from agenttools.rag.external_results import Citation, new_external_result
from agenttools.rag.keyword_rules import validate_keywords
from agenttools.rag.keywords import KeywordIndex
from agenttools.rag.tools import KB_SEARCH, RagToolDeps, register_rag_tools
from app.server.identity import LOCAL_USER
from knowledge import KnowledgeBase
from knowledge.saved_answers import SavedAnswerVectors
from llm.extractive import ExtractiveProvider
from storage.keyword_records import KeywordTermHit
from storage.sqlite import SqliteStorage
from tests.conftest import collect_sse, running_app
from tests.support.offline_app import offline_settings
from tests.support.storage import opened_storage
from tests.test_kb_search_warnings import BreakableEmbedder
from tests.test_metrics import get_metrics, value

FAMILY = "agentchat_saved_answer_fallbacks"


async def save_answer(keywords: KeywordIndex, owner: str) -> str:
    """One saved Perplexity answer with its keywords, as the tools store it."""
    result = new_external_result(
        provider="perplexity",
        query="liquid nitrogen boiling point",
        answer="Liquid nitrogen boils at -195.8 degrees C (77 K) [1].",
        citations=[Citation(1, "https://example.org/nitrogen", "Nitrogen")],
        query_id="q1",
        now=1_700_000_000.0,
        owner=owner,
    )
    await keywords.save_result(result)
    accepted = validate_keywords(["liquid nitrogen boiling point", "cryogenics"]).accepted
    await keywords.index(accepted, query_id="q1", external_result_ids=[result.id], owner=owner)
    return result.id


async def test_the_stream_readyz_and_the_metric_show_saved_answers_found_by_terms_only(tmp_path: Path) -> None:
    # Every bucket: no "no bucket 'default'" warning first.
    settings = offline_settings(tmp_path / "v.db", AGENT_KB_DEFAULT_BUCKETS="*")
    embedder = BreakableEmbedder()
    async with (
        running_app(settings, provider=ExtractiveProvider(), embedder=embedder) as (base, app),
        httpx.AsyncClient(timeout=60) as client,
    ):
        before = await get_metrics(client, base)
        assert before[FAMILY][0] == "counter" and before[FAMILY][1] == {}
        keywords = app.state.services.rooms.keywords
        await save_answer(keywords, owner=LOCAL_USER)  # the one user of AGENT_AUTH=none
        ready = (await client.get(f"{base}/readyz")).json()["checks"]["keywords"]
        assert ready["ok"] and ready["by_meaning"] and ready["fallbacks"] == {}, ready

        embedder.broken = True  # the embedder's server goes down
        events = await collect_sse(
            client,
            "POST",
            f"{base}/v1/agent/chat",
            json={"message": "What is the boiling point of liquid nitrogen?", "context_type": "knowledge"},
        )
        assert events[-1].json()["status"] == "completed"
        results = [e.json() for e in events if e.event == "tool_call_result" and e.json()["name"] == KB_SEARCH]
        assert results and not results[0]["is_error"], results
        summary = str(results[0].get("summary"))
        # Still found (by its keywords' terms), and the summary says how.
        assert "1 saved web answer" in summary and "by their keywords only" in summary, summary

        ready = (await client.get(f"{base}/readyz")).json()["checks"]["keywords"]
        assert ready["ok"] and ready["fallbacks"] == {"meaning_failed": 1}, ready
        assert ready["last_fallback"] == "meaning_failed: EmbeddingError" and ready["last_fallback_at"], ready
        assert ready["last_fallback_recovered_at"] is None, ready
        after = await get_metrics(client, base)

        embedder.broken = False  # back: the next lookup searches by meaning again
        events = await collect_sse(
            client,
            "POST",
            f"{base}/v1/agent/chat",
            json={"message": "At what temperature does liquid nitrogen boil?", "context_type": "knowledge"},
        )
        assert events[-1].json()["status"] == "completed"
        recovered = (await client.get(f"{base}/readyz")).json()["checks"]["keywords"]
    assert value(after, FAMILY, f"{FAMILY}_total", reason="meaning_failed") == 1
    # The fallback stays shown (and counted), as past: a reader does not take it for a current one.
    assert recovered["last_fallback"] == "meaning_failed: EmbeddingError", recovered
    assert recovered["last_fallback_recovered_at"] >= recovered["last_fallback_at"], recovered


class UnreadableKeywords:
    """The keyword store of a database that fails every read of keyword terms."""

    def __init__(self, store: Any) -> None:
        self._store = store

    async def term_hits(self, terms: Sequence[str], *, owner: str | None) -> list[KeywordTermHit]:
        raise OSError("disk I/O error")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


async def test_a_failed_lookup_and_an_answer_stored_without_vectors_are_said_and_counted(tmp_path: Path) -> None:
    embedder = BreakableEmbedder()
    async with opened_storage(tmp_path / "agent.db") as storage:
        assert isinstance(storage, SqliteStorage)
        kb = await KnowledgeBase.create(storage.kb_index, embedder)
        try:
            semantic = SavedAnswerVectors(storage.external_vectors, embedder, embed_query=kb.embed_query)
            writer = KeywordIndex(storage.keywords, storage.external_results, semantic=semantic)
            embedder.broken = True
            await save_answer(writer, owner="u1")  # stored, but neither it nor its keywords embedded
            assert writer.fallbacks == {"not_embedded": 2}
            embedder.broken = False

            reader = KeywordIndex(UnreadableKeywords(storage.keywords), storage.external_results)  # type: ignore[arg-type]
            registry = ToolRegistry(build_catalog())
            register_rag_tools(registry, RagToolDeps(kb, reader, storage.external_results))
            handler = registry.handler(KB_SEARCH)
            assert handler is not None
            async with httpx.AsyncClient() as http:
                ctx = ToolContext("u1", None, "c1", "r1", "knowledge", {}, http, RunToolState())
                outcome = await handler({"query": "liquid nitrogen boiling point"}, ctx)
            assert not outcome.is_error and outcome.content["external_answers"] == []
            # After the empty knowledge base's own ("no vectors available ...").
            assert outcome.content["warnings"][-1] == "saved web answers could not be searched (OSError)"
            assert reader.fallbacks == {"lookup_failed": 1}
            assert (await reader.readiness())["last_fallback"] == "lookup_failed: OSError"
        finally:
            await kb.aclose()


async def test_a_failed_start_up_back_fill_shows_in_readyz_and_metrics(tmp_path: Path) -> None:
    """Answers saved while the embedder failed get their vectors from the next start's
    back-fill; one that fails too (the embedder still down) leaves them found by terms
    only until the start after — counted as ``backfill_failed``, no longer a log line."""
    db = tmp_path / "v.db"
    embedder = BreakableEmbedder()
    embedder.broken = True
    async with opened_storage(db) as storage:
        kb = await KnowledgeBase.create(storage.kb_index, embedder)
        try:
            semantic = SavedAnswerVectors(storage.external_vectors, embedder, embed_query=kb.embed_query)
            await save_answer(KeywordIndex(storage.keywords, storage.external_results, semantic=semantic), LOCAL_USER)
        finally:
            await kb.aclose()
    settings = offline_settings(db)
    async with (
        running_app(settings, provider=ExtractiveProvider(), embedder=embedder) as (base, _app),
        httpx.AsyncClient(timeout=30) as client,
    ):
        ready: dict[str, Any] = {}
        async with asyncio.timeout(30):
            while "backfill_failed" not in ready.get("fallbacks", {}):
                ready = (await client.get(f"{base}/readyz")).json()["checks"]["keywords"]
                await asyncio.sleep(0.02)
        metrics = await get_metrics(client, base)
    assert ready["fallbacks"] == {"backfill_failed": 1}, ready
    assert ready["last_fallback"].startswith("backfill_failed: "), ready
    assert value(metrics, FAMILY, f"{FAMILY}_total", reason="backfill_failed") == 1


class RefusingVectors:
    """The saved-answer vector store of a PostgreSQL that refuses the write, with the error
    text libpq gives: a primary message, then a ``DETAIL`` line quoting the row."""

    def __init__(self, store: Any) -> None:
        self._store = store

    async def save(self, embed_model: str, rows: Sequence[Any]) -> None:
        raise psycopg.errors.CheckViolation(
            'new row for relation "external_vectors" violates check constraint "external_vectors_kind_check"\n'
            "DETAIL:  Failing row contains (7, keyword, u1:my private diagnosis, hashing-384)."
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


async def test_readyz_never_shows_the_row_a_failed_write_quotes(tmp_path: Path) -> None:
    """``/readyz`` answers anyone: ``keywords.last_fallback`` names the failure's kind, but
    none of its text - not the user's keyword text or id that a database error's ``DETAIL``
    line quotes."""
    embedder = BreakableEmbedder()
    async with opened_storage(tmp_path / "agent.db") as storage:
        kb = await KnowledgeBase.create(storage.kb_index, embedder)
        try:
            vectors = RefusingVectors(storage.external_vectors)
            semantic = SavedAnswerVectors(vectors, embedder, embed_query=kb.embed_query)  # type: ignore[arg-type]
            keywords = KeywordIndex(storage.keywords, storage.external_results, semantic=semantic)
            await save_answer(keywords, owner="u1")
        finally:
            await kb.aclose()
    shown = (await keywords.readiness())["last_fallback"]
    assert keywords.fallbacks == {"not_embedded": 2}
    assert shown == "not_embedded: CheckViolation", shown
    assert "diagnosis" not in shown and "u1" not in shown, shown
