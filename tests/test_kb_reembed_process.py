"""Documents the embedder could not embed are stored, found by text, and get their
vectors by themselves (issue 20 item 1): ``agentchat serve`` as a real process in the
default configuration (provider and embedder ``auto`` finding the Ollama fake, the
sample knowledge base ingested on first start), the fake told to fail embeddings and
to recover.

* A document posted while embedding fails is stored (``202``: found by text now,
  queued for embedding), ``search_text`` finds it, ``/readyz`` says what is pending;
  once Ollama embeds again it gets its vectors without anyone asking and
  ``search_semantic`` finds it by meaning in ``semantic`` mode.
* A database whose sample knowledge base was stored without vectors (what the old
  dimension-0 bug left behind; here: ingested while embeddings failed) is repaired by
  the next start.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from client import AgentClient
from tests.fakes import FakeOllama, HttpError, ToolCall, running_fake
from tests.support.procs import AgentServer
from tests.support.readyz_counts import counts_current

pytestmark = pytest.mark.slow  # real server processes restarted over a broken embedder

MODELS = ["qwen3:4b", "nomic-embed-text:latest"]
EMBED_DOWN = HttpError(500, "llama runner process has terminated")
NOTE = {"id": "zebra-note", "title": "Zebra rotation",
        "text": "The zebra rotation schedule moves the on-call pager every Tuesday at noon."}

_MODE = re.compile(r'\\*"mode\\*":\s*\\*"(\w+)')
_DOC_ID = re.compile(r'\\*"doc_id\\*":\s*\\*"([^"\\]+)')


@dataclass
class SearchingModel:
    """Plays the chat model: calls ``tool`` with ``query``, then ``generate_response``
    citing the first passage found. Records each search's mode and document ids."""

    tool: str = "search_semantic"
    query: str = ""
    searches: list[tuple[str, list[str]]] = field(default_factory=list)

    def __call__(self, body: Any) -> list[Any]:
        text = orjson.dumps(body).decode()
        if "cite_with" not in text:  # no search result yet in this conversation
            return [ToolCall(self.tool, {"bucket": "default", "query": self.query, "top_k": 2})]
        result = text[max(0, text.rindex("cite_with") - 20_000) :] if len(text) > 20_000 else text
        doc_ids = _DOC_ID.findall(result)
        modes = _MODE.findall(result)
        self.searches.append((modes[-1] if modes else "", doc_ids))
        return [ToolCall("generate_response", {
            "answer": f"See [{doc_ids[0]}].", "sources": doc_ids[:1], "used_internal_kb": True,
            "used_external_kb": False,
        })]


def knowledge(body: dict[str, Any] | None) -> dict[str, Any]:
    return dict(((body or {}).get("checks") or {}).get("knowledge") or {})


async def ask(base: str, model: SearchingModel, tool: str, query: str) -> tuple[str, list[str]]:
    model.tool, model.query = tool, query
    before = len(model.searches)
    async with AgentClient(base) as agent:
        names = [event.name async for event in agent.chat(query, "knowledge")]
    assert "response" in names and len(model.searches) > before, names
    return model.searches[-1]


async def metric(base: str, name: str) -> float:
    async with httpx.AsyncClient() as http:
        text = (await http.get(f"{base}/metrics")).text
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    assert found, f"{name} is not exported"
    return float(found.group(1))


async def test_a_document_posted_while_embedding_fails_gets_vectors_by_itself(tmp_path: Path) -> None:
    model = SearchingModel()
    fake = FakeOllama(model, models=MODELS, embed_dim=256)
    async with running_fake(fake.app) as url:
        # AGENT_ADMIN_OPEN lets this test post a document; nothing else is pinned.
        server = AgentServer(tmp_path, {"OLLAMA_HOST": url, "AGENT_ADMIN_OPEN": "true"})
        server.start()
        try:
            await server.wait_ready(timeout=180)
            fake.embed_error = EMBED_DOWN
            async with httpx.AsyncClient() as http:
                response = await http.post(f"{server.base}/v1/kb/documents", json={"documents": [NOTE]})
                assert response.status_code == 202, response.text
                report = response.json()
                assert report["added"] == 1 and report["queued_for_embedding"] == 1, report
                assert not report["rejected"], report
                assert report["embedding"]["state"] == "queued" and report["embedding"]["searchable_by"] == ["text"]
                assert "500" in str(report["embedding_error"]), report

                # Not ready once the re-embedding has tried and failed (it runs in the
                # background: wait for its first failed pass, bounded).
                async with asyncio.timeout(60):
                    while (answer := await server.readyz(http))[0] != 503:
                        assert knowledge(answer[1]).get("pending_vectors") == 1, answer
                        await asyncio.sleep(0.05)
                status, body = answer
                assert status == 503 and knowledge(body).get("pending_vectors") == 1, body
                assert knowledge(body)["ok"] is False and "wait for vectors" in knowledge(body)["detail"], body
            assert await metric(server.base, "agentchat_kb_documents_pending_vectors") >= 1

            # Found by text while the embedder is down.
            mode, found = await ask(server.base, model, "search_text", "zebra rotation pager Tuesday")
            assert (mode, found[0]) == ("text", NOTE["id"]), (mode, found)

            fake.embed_error = None  # Ollama recovers: nobody re-posts anything
            ready = await server.wait_ready(timeout=120)
            assert knowledge(ready)["pending_vectors"] == 0, ready
            assert knowledge(ready)["reembedding"]["reembedded_documents"] >= 1, ready
            assert await metric(server.base, "agentchat_kb_documents_pending_vectors") == 0
            assert await metric(server.base, "agentchat_kb_documents_reembedded_total") >= 1

            # The fake's embedding model is a bag of hashed words: "by meaning" is by vector here.
            mode, found = await ask(server.base, model, "search_semantic", "which day does the on-call pager move")
            assert (mode, found[0]) == ("semantic", NOTE["id"]), (mode, found, server.tail())
        finally:
            await server.kill()
            server.close()


async def test_a_sample_kb_stored_without_vectors_is_repaired_on_the_next_start(tmp_path: Path) -> None:
    model = SearchingModel()
    fake = FakeOllama(model, models=MODELS, embed_dim=256)
    fake.embed_error = EMBED_DOWN  # the first start ingests the sample KB without one vector
    async with running_fake(fake.app) as url:
        server = AgentServer(tmp_path, {"OLLAMA_HOST": url})
        server.start()
        try:
            seen: list[dict[str, Any]] = []
            async with httpx.AsyncClient() as http:

                async def poll() -> bool:
                    status, body = await server.readyz(http)
                    ingested = str(knowledge(body).get("sample_kb", "")).startswith("ingested")
                    assert ingested or status in (0, 503), (status, body)
                    seen.append(knowledge(body))
                    # The counts once current (counted in the background, never in the probe).
                    return ingested and counts_current(body)

                async with asyncio.timeout(180):  # a bound, not an expectation of speed
                    while not await poll():
                        assert server.running, server.tail()
                        await asyncio.sleep(0.05)
            broken = seen[-1]
            assert broken["vectors"] == 0 and broken["pending_vectors"] == broken["documents"] > 0, broken
            await server.kill()

            fake.embed_error = None
            server.start()
            ready = await server.wait_ready(timeout=180)
            assert knowledge(ready)["sample_kb"].startswith("already there"), ready  # not re-ingested: re-embedded
            # Ready while the re-embedding makes progress (text search finds every document
            # meanwhile); the repair itself is done when nothing waits for vectors.
            async with httpx.AsyncClient() as http:
                repaired: dict[str, Any] = {}

                async def re_embedded() -> bool:
                    nonlocal repaired
                    _, body = await server.readyz(http)
                    repaired = knowledge(body)
                    return repaired.get("pending_vectors") == 0 and bool(repaired.get("vectors"))

                async with asyncio.timeout(120):  # a bound, not an expectation of speed
                    while not await re_embedded():
                        assert server.running, server.tail()
                        await asyncio.sleep(0.1)
            assert repaired["pending_vectors"] == 0 and repaired["vectors"] > 0, repaired
            assert repaired["reembedding"]["reembedded_documents"] == broken["documents"], repaired
            assert repaired["semantic_search"]["ok"] is True, repaired

            mode, found = await ask(server.base, model, "search_semantic", "resume a stream after a disconnect")
            assert mode == "semantic" and found, (mode, found)
        finally:
            await server.kill()
            server.close()

