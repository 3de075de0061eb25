"""The three-stage selector inside the running app: the `tool_selection` event, the tools
the model is actually sent, readiness while the index builds, and every fallback."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx

from agenttools.core.catalog import build_catalog, tools_for_context
from app.config import Settings
from llm.ollama import OllamaProvider
from tests.conftest import collect_sse, running_app
from tests.fakes import FakeOllama, Text, running_fake
from tests.test_metrics import get_metrics, value
from toolindex.embedder import EmbeddingError
from toolindex.hashing import HashingEmbedder


class GatedEmbedder(HashingEmbedder):
    """A hashing embedder whose document batch waits for a gate, and that can be told
    to fail at build or at query time."""

    def __init__(self, *, fail_build: bool = False, fail_query: bool = False) -> None:
        super().__init__(dim=128)
        self.gate = asyncio.Event()
        self.fail_build, self.fail_query = fail_build, fail_query

    async def embed_batch(self, texts: list[str], *, task: str = "document") -> Any:
        await self.gate.wait()
        if self.fail_build:
            raise EmbeddingError("embedding service answered HTTP 429")
        return await super().embed_batch(texts, task=task)  # type: ignore[arg-type]

    async def embed(self, text: str, *, task: str = "query") -> Any:
        if self.fail_query:
            raise EmbeddingError("embedding service timed out")
        return await super().embed(text, task=task)  # type: ignore[arg-type]


def settings(tmp_path: Path) -> Settings:
    return Settings.from_env({
        "AGENT_DB_PATH": str(tmp_path / "a.db"),
        "AGENT_MANDATORY_CONTEXTS": "none",
        "AGENT_INGEST_SAMPLE_KB": "false",
        "AGENT_CACHE_DIR": str(tmp_path / "cache"),
    })


async def wait_index(client: httpx.AsyncClient, base: str, status: str) -> dict[str, Any]:
    for _ in range(500):
        body = (await client.get(f"{base}/readyz")).json()
        if body["checks"]["tool_index"]["status"] == status:
            return body
        await asyncio.sleep(0.01)
    raise AssertionError(f"tool index never became {status}: {body}")


async def selection_run(tmp_path: Path, embedder: GatedEmbedder, message: str, context: dict[str, Any],
                        *, release: bool = True, expect: str = "ready") -> tuple[dict[str, Any], dict[str, Any]]:
    fake = FakeOllama([[Text("ok")]])
    async with running_fake(fake.app) as url:
        provider = OllamaProvider(url, "llama3.2", timeout=10)
        async with running_app(settings(tmp_path), provider=provider, embedder=embedder) as (base, _):
            async with httpx.AsyncClient(timeout=30) as client:
                building = await wait_index(client, base, "building")
                assert building["ready"] is True  # serving while the index builds
                assert "falls back" in building["checks"]["tool_index"]["note"]
                if release:
                    embedder.gate.set()
                    await wait_index(client, base, expect)
                events = await collect_sse(client, "POST", f"{base}/v1/agent/chat",
                                           json={"message": message, "context_type": "workflow", "context": context})
    selection = next(e.json() for e in events if e.event == "tool_selection")
    sent = [r for r in fake.chat_requests if r.get("messages")][0]
    return selection, sent


def context_tools(context_type: str) -> list[str]:
    return [s.name for s in tools_for_context(build_catalog(), context_type)]


async def test_selection_event_and_tools_sent_match(tmp_path: Path) -> None:
    selection, sent = await selection_run(
        tmp_path, GatedEmbedder(), "Who gets notified when the low stock alert fires?", {"workflow_id": "x", "nodes": [1]}
    )
    assert selection["fallback"] is None
    assert selection["core"][:2] == ["list_workflow_rules", "discover"]
    assert len(selection["rag"]) == 6 and all(isinstance(r["score"], float) for r in selection["rag"])
    scores = [r["score"] for r in selection["rag"]]
    assert scores == sorted(scores, reverse=True)
    assert selection["tools"][: len(selection["core"])] == selection["core"]
    assert len(selection["tools"]) == len(set(selection["tools"]))
    assert set(selection["tools"]) <= set(context_tools("workflow"))
    assert len(selection["tools"]) < len(context_tools("workflow"))
    assert [t["function"]["name"] for t in sent["tools"]] == selection["tools"]


async def test_new_canvas_gets_the_draft_core(tmp_path: Path) -> None:
    selection, _ = await selection_run(tmp_path, GatedEmbedder(), "Build me a new approval workflow", {"is_new": True})
    assert {"start_draft", "add_draft_action", "preview_draft"} <= set(selection["core"])


async def test_index_still_building_falls_back_to_all_context_tools(tmp_path: Path) -> None:
    selection, sent = await selection_run(tmp_path, GatedEmbedder(), "list my rules", {}, release=False)
    assert selection["fallback"].startswith("index building")
    assert selection["tools"] == context_tools("workflow")
    assert len(sent["tools"]) == len(context_tools("workflow"))


async def test_failed_build_falls_back_with_the_reason(tmp_path: Path) -> None:
    selection, _ = await selection_run(tmp_path, GatedEmbedder(fail_build=True), "list my rules", {}, expect="failed")
    assert "429" in selection["fallback"] and selection["tools"] == context_tools("workflow")


async def test_failed_query_embedding_falls_back_with_the_reason(tmp_path: Path) -> None:
    selection, _ = await selection_run(tmp_path, GatedEmbedder(fail_query=True), "list my rules", {})
    assert selection["fallback"].startswith("search failed") and "timed out" in selection["fallback"]
    assert selection["tools"] == context_tools("workflow")


async def test_every_fallback_is_counted_and_a_failing_search_shows_in_readyz(tmp_path: Path) -> None:
    """A ready index whose searches fail looked healthy in ``/readyz`` and ``/metrics``
    (status ready, ``agentchat_tool_index_ready`` 1) while every run was offered all
    tools: each fallback is counted by why, and the failures shown with the last one."""
    embedder = GatedEmbedder()
    fake = FakeOllama([[Text("ok")], [Text("ok")], [Text("ok")], [Text("ok")]])
    family = "agentchat_tool_selection_fallbacks"
    async with running_fake(fake.app) as url:
        provider = OllamaProvider(url, "llama3.2", timeout=10)
        async with (
            running_app(settings(tmp_path), provider=provider, embedder=embedder) as (base, _),
            httpx.AsyncClient(timeout=30) as client,
        ):

            async def run(message: str) -> str | None:  # a new message each: no cached query vector
                events = await collect_sse(client, "POST", f"{base}/v1/agent/chat",
                                           json={"message": message, "context_type": "workflow"})
                return next(e.json() for e in events if e.event == "tool_selection")["fallback"]

            await wait_index(client, base, "building")
            assert (await run("list my rules") or "").startswith("index building")
            embedder.gate.set()
            await wait_index(client, base, "ready")
            assert await run("show my workflows") is None
            embedder.fail_query = True
            assert (await run("rename a workflow") or "").startswith("search failed")
            index = (await client.get(f"{base}/readyz")).json()["checks"]["tool_index"]
            metrics = await get_metrics(client, base)
            # The embedder answers again: the failure is shown as past, not as current.
            embedder.fail_query = False
            assert await run("delete a workflow") is None
            recovered = (await client.get(f"{base}/readyz")).json()["checks"]["tool_index"]
    assert index["status"] == "ready" and index["search_failures"] == 1
    # /readyz answers anyone: the failure's kind and time, never its text (an embedder's
    # error may quote the message it embedded); the run's own event has the text.
    assert index["last_search_failure"] == "EmbeddingError" and index["last_search_failure_at"]
    assert index["last_search_failure_recovered_at"] is None
    assert "timed out" not in str(index)
    assert recovered["last_search_failure"] == "EmbeddingError" and recovered["search_failures"] == 1
    assert recovered["last_search_failure_recovered_at"] >= recovered["last_search_failure_at"]
    assert metrics[family][1] == {
        (f"{family}_total", (("reason", "index_building"),)): 1.0,
        (f"{family}_total", (("reason", "search_failed"),)): 1.0,
    }
    assert value(metrics, "agentchat_tool_search_failures", "agentchat_tool_search_failures_total") == 1


async def test_restart_reuses_cached_tool_vectors(tmp_path: Path) -> None:
    first = GatedEmbedder()
    await selection_run(tmp_path, first, "list my rules", {})
    calls: list[int] = []

    class Counting(GatedEmbedder):
        async def embed_batch(self, texts: list[str], *, task: str = "document") -> Any:
            calls.append(len(texts))
            return await super().embed_batch(texts, task=task)

    second = Counting()
    second.gate.set()
    fake = FakeOllama([[Text("ok")]])
    async with running_fake(fake.app) as url:
        async with running_app(settings(tmp_path), provider=OllamaProvider(url, "m", timeout=10), embedder=second) as (base, _):
            async with httpx.AsyncClient(timeout=30) as client:
                await wait_index(client, base, "ready")
    assert calls == []
