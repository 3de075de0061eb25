"""A corpus tool whose bucket listing fails says so: its error used to carry
``available_buckets: []`` - "there are no buckets" - when the list could not be read at
all, and a model told the user the knowledge base was empty. Now the error says the list
could not be read (``available_buckets_error``), and the knowledge base counts the
failure (``agentchat_kb_bucket_list_failures_total``). On the real SQLite storage, closed
under the tools: every read of it fails."""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson

from agenttools.core.catalog import build_catalog
from agenttools.core.executor import ToolExecutor
from agenttools.core.registry import RunToolState, ToolContext, ToolRegistry
from agenttools.rag.corpus_deps import CorpusToolDeps
from agenttools.rag.corpus_tools import register_corpus_tools
from knowledge.kb import KnowledgeBase
from llm.types import ToolCall
from storage.open import open_storage
from toolindex.hashing import HashingEmbedder


async def test_a_failed_bucket_listing_is_not_an_empty_one(tmp_path: Path) -> None:
    storage = await open_storage(str(tmp_path / "kb.db"))
    closed = False
    try:
        kb = await KnowledgeBase.create(storage.kb_index, HashingEmbedder(dim=64))
        await kb.ingest_documents([{"id": "a", "title": "Alpha", "text": "alpha beta gamma"}], bucket="docs")
        registry = ToolRegistry(build_catalog())
        register_corpus_tools(registry, CorpusToolDeps(knowledge=kb))
        executor = ToolExecutor(registry)
        args = {"query": "alpha"}  # no bucket: the error offers the list of buckets
        async with httpx.AsyncClient() as http:
            ctx = ToolContext(user_id="u1", authorization=None, conversation_id="c1", run_id="r1",
                              context_type="knowledge", context={}, http=http, state=RunToolState())
            call = ToolCall("call-1", "search_text", args, orjson.dumps(args).decode())
            listed = await executor.execute(call, ctx)
            assert [b["bucket"] for b in listed.content["available_buckets"]] == ["docs"]

            await storage.close()
            closed = True
            failed = await executor.execute(call, ctx)
        assert failed.is_error and "bucket and query are required" in failed.content["error"]
        assert "available_buckets" not in failed.content, failed.content
        assert "the bucket list could not be read" in failed.content["available_buckets_error"]
        assert kb.status.bucket_list_failures == 1
    finally:
        if not closed:
            await storage.close()
