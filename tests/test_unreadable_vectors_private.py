"""Unreadable stored vectors of one user's attachment: counted for the operator, never
named to anyone, and never in another user's search.

A conversation's attachment is a document of a bucket private to that user. When its
stored vector cannot be read (here torn in the file while the service is stopped), the
count of such vectors reaches ``/readyz`` (``semantic_search.index``) and ``/metrics``
(the operator's view: the whole index), and the ``warnings`` of a search by meaning that
covered it: its owner's search in that conversation. Another user's search does not
cover it, and its warning spoke of the whole index, so it said "1 document(s)" that
user could not search - it now counts what the search covered only. Counts only:
neither ``/readyz`` nor ``/metrics`` nor a tool result carries the attachment's file
name, title, document id, bucket or owner. Two JWT users on one served app; the model is
the Ollama fake, scripted.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import httpx

from app.config import Settings
from knowledge.attachments import attachment_bucket
from llm.ollama import OllamaProvider
from tests.conftest import running_app
from tests.fakes import FakeOllama, ToolCall, running_fake
from tests.test_compat_faces_owners import bearer, env
from tests.test_keyword_reuse_e2e import chat_bodies, tool_results
from tests.test_metrics import scrape, value
from toolindex.embedder import EmbeddingError
from toolindex.hashing import HashingEmbedder

ALICE, CAROL = bearer("alice"), bearer("carol")
NOTE = b"# Lighthouse keeper\n\nThe keeper rings the brass bell at dawn.\n"
ALICES = attachment_bucket("alice", "a-one")


def _tear(db: Path, bucket: str) -> list[str]:
    """Cut the stored vectors of ``bucket``'s chunks to half their length; its document ids."""
    with sqlite3.connect(db) as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM kb_documents WHERE bucket = ?", (bucket,))]
        conn.execute(
            "UPDATE kb_chunks SET vector = substr(vector, 1, length(vector) / 2)"
            " WHERE doc_id IN (SELECT id FROM kb_documents WHERE bucket = ?)",
            (bucket,),
        )
    return ids


class DocumentsDownEmbedder(HashingEmbedder):
    """The real hashing embedder (queries embed) whose document embedding fails: the
    background pass cannot repair the torn vectors while the test reads their counts."""

    async def embed_batch(self, texts: list[str], *, task: str = "document") -> Any:  # type: ignore[override]
        if task == "document":
            raise EmbeddingError("upstream 503")
        return await super().embed_batch(texts, task=task)


def a_search() -> list[Any]:
    return [
        [ToolCall("knowledge_base_search", {"query": "when is the bell rung"})],
        [ToolCall("generate_response", {
            "answer": "Nothing found.", "sources": [], "confidence_score": 0.1,
            "used_internal_kb": True, "used_external_kb": False,
        })],
    ]  # fmt: skip


async def searched(
    settings: Settings, headers: dict[str, str], extra: dict[str, Any]
) -> tuple[httpx.Response, httpx.Response, httpx.Response, dict[str, Any]]:
    """A served app's ``/readyz``, ``/metrics``, one user's knowledge run and its search's result."""
    fake = FakeOllama(a_search())
    async with running_fake(fake.app) as ollama_url:
        provider = OllamaProvider(ollama_url, "llama3.2", timeout=10)
        async with (
            running_app(settings, provider=provider, embedder=DocumentsDownEmbedder(dim=384)) as (base, _app),
            httpx.AsyncClient(base_url=base, timeout=30) as http,
        ):
            ready = await http.get("/readyz")
            metrics = await http.get("/metrics")
            body = {"message": "When is the bell rung?", "context_type": "knowledge", **extra}
            run = await http.post("/v1/agent/chat", headers=headers, json=body)
            assert run.status_code == 200, run.text
    [result] = tool_results(chat_bodies(fake)[-1], "knowledge_base_search")
    return ready, metrics, run, result


async def test_another_users_unreadable_attachment_is_counted_for_the_operator_never_in_a_search(
    tmp_path: Path,
) -> None:
    settings = Settings.from_env(env(tmp_path, AGENT_EMBEDDER="hashing"))
    async with running_app(settings) as (base, app), httpx.AsyncClient(base_url=base, timeout=30) as http:
        kb = app.state.services.rooms.named("knowledge").kb
        await kb.create_bucket("default")  # the shared corpus Carol searches
        await kb.ingest_documents([{"id": "bells", "title": "Bells", "text": "Church bells ring on Sundays."}])
        files = {"file": ("lighthouse-keeper.md", NOTE, "text/markdown")}
        up = await http.post("/v1/agent/conversations/a-one/attachments", files=files, headers=ALICE)
        assert up.status_code == 201, up.text
        attachment = up.json()
    doc_ids = await asyncio.to_thread(_tear, Path(settings.db_path), ALICES)
    assert doc_ids

    ready, metrics, run, result = await searched(settings, CAROL, {})
    # Alice's search in her own conversation covers her attachment.
    *_, own_result = await searched(settings, ALICE, {"conversation_id": "a-one"})

    index = ready.json()["checks"]["knowledge"]["semantic_search"]["index"]
    assert (index["unreadable_vectors"] >= 1, index["unreadable_documents"]) == (True, 1), index
    gauge = "agentchat_kb_vectors_unreadable"
    assert value(scrape(metrics.text), gauge, gauge) == 1  # not "... 1" as a prefix: 10 or 12 matched it
    assert not [w for w in result.get("warnings", []) if "could not be read" in w], result
    # Alice's covered her attachment: told of its unreadable vector.
    warned = " ".join(own_result.get("warnings", []))
    assert "of 1 document(s) have stored vectors that could not be read" in warned, own_result
    identifying = [*doc_ids, ALICES, "alice", "lighthouse", "Lighthouse", attachment["id"], attachment["title"]]
    for text in (ready.text, metrics.text, str(result), run.text):
        assert not [w for w in identifying if w and w in text], [w for w in identifying if w and w in text]
