"""A typo in ``AGENT_KB_DEFAULT_BUCKETS`` is not silent (walkthrough 39, bug 3).

Before: ``AGENT_KB_DEFAULT_BUCKETS=nosuchbucket`` started, ``/readyz`` said 200 and
nothing else, no line was logged, and every knowledge question was answered "I could
not find an answer" as if the knowledge base lacked the fact. Buckets may be created
after the start, so the start goes on, but: a WARNING names the missing bucket and the
buckets there are; ``/readyz`` shows it (``checks.knowledge.default_buckets``) while it
is missing; ``agentchat_kb_default_buckets_missing`` counts it; and the search's tool
result (and the offline answer built from it) says the bucket does not exist instead
of "no passages". Creating the bucket clears all of it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app.config import Settings
from tests.conftest import collect_sse, running_app

QUESTION = "How do I resume a stream after a disconnect?"


def settings(tmp_path: Path, **env: str) -> Settings:
    return Settings.from_env({
        "AGENT_DB_PATH": str(tmp_path / "agent.sqlite3"),
        "AGENT_INGEST_SAMPLE_KB": "false",
        "AGENT_EMBEDDER": "none",
        "AGENT_LLM_PROVIDER": "extractive",
        "OLLAMA_HOST": "http://127.0.0.1:9",
        **env,
    })


def missing_gauge(metrics: str) -> float:
    [line] = [ln for ln in metrics.splitlines() if ln.startswith("agentchat_kb_default_buckets_missing ")]
    return float(line.split()[-1])


async def test_a_default_bucket_that_does_not_exist_is_said_everywhere(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A first start makes the one bucket there is.
    async with running_app(settings(tmp_path, AGENT_KB_DEFAULT_BUCKETS="*")) as (_, app):
        await app.state.services.rooms.knowledge.kb.create_bucket("handbook")

    caplog.set_level(logging.WARNING, logger="agentchat.rooms")
    configured = settings(tmp_path, AGENT_KB_DEFAULT_BUCKETS="handbook,nosuchbucket")
    async with running_app(configured) as (base, app), httpx.AsyncClient(base_url=base, timeout=30) as http:
        knowledge = app.state.services.rooms.knowledge
        ready = await http.get("/readyz")
        gauge = missing_gauge((await http.get("/metrics")).text)
        events = await collect_sse(http, "POST", "/v1/agent/chat",
                                   json={"message": QUESTION, "context_type": "knowledge"})

        await knowledge.kb.create_bucket("nosuchbucket")  # created after the start: all clear
        ready_after = await http.get("/readyz")
        gauge_after = missing_gauge((await http.get("/metrics")).text)

    warned = [r.getMessage() for r in caplog.records if "AGENT_KB_DEFAULT_BUCKETS" in r.getMessage()]
    assert warned == [
        "no bucket 'nosuchbucket', which knowledge searches without a named bucket cover (AGENT_KB_DEFAULT_BUCKETS): "
        "they find nothing there until it is created (`agentchat ingest PATH --bucket NAME` fills it) or the "
        "setting names buckets there are (buckets there are: handbook)"
    ], warned
    assert all(r.levelno == logging.WARNING for r in caplog.records if "AGENT_KB_DEFAULT_BUCKETS" in r.getMessage())
    assert ready.status_code == 200, ready.text  # still in service: buckets may come later
    entry = ready.json()["checks"]["knowledge"]["default_buckets"]
    assert entry["ok"] is False and entry["missing"] == ["nosuchbucket"], entry
    assert entry["configured"] == ["handbook", "nosuchbucket"] and "'nosuchbucket'" in entry["detail"], entry
    assert gauge == 1

    # The search says which bucket was not searched; the offline answer says so too.
    calls = [e.json() for e in events if e.event == "tool_call_result"]
    [result] = [c for c in calls if c["name"] == "knowledge_base_search"]
    assert "no bucket 'nosuchbucket': not searched" in result["summary"], result
    [response] = [e.json() for e in events if e.event == "response"]
    assert "could not search the knowledge base" in response["answer"], response
    assert "'nosuchbucket'" in response["answer"] and "AGENT_KB_DEFAULT_BUCKETS" in response["answer"], response
    assert "could not find an answer" not in response["answer"]

    after = ready_after.json()["checks"]["knowledge"]["default_buckets"]
    assert after == {"ok": True, "configured": ["handbook", "nosuchbucket"], "missing": []}, after
    assert gauge_after == 0


async def test_the_search_result_names_the_missing_bucket(tmp_path: Path) -> None:
    """The tool result itself: ``missing_buckets``, a warning first, and a hint that
    nothing was searched (not "No passages matched"); with one bucket that exists and
    one that does not, the passages of the first and the warning for the second."""
    from agenttools.core.registry import ToolContext
    from agenttools.rag.deps import RagToolDeps, RagToolSettings
    from agenttools.rag.kb_search import make_kb_search_handler

    async with running_app(settings(tmp_path)) as (_, app):
        room = app.state.services.rooms
        kb = room.knowledge.kb
        await kb.ingest_documents([{"id": "d1", "title": "Resuming", "text": "Resume a stream with Last-Event-ID."}],
                                  bucket="handbook")

        stored = app.state.services.storage.external_results

        async def search(http: httpx.AsyncClient, default: tuple[str, ...]) -> dict[str, Any]:
            deps = RagToolDeps(knowledge=kb, keywords=room.keywords, external_results=stored,
                               settings=RagToolSettings(default_buckets=default, conversation_attachments=True))
            ctx = ToolContext(user_id="alice", authorization=None, conversation_id="c1", run_id="r1",
                              context_type="knowledge", context={}, http=http)
            outcome = await make_kb_search_handler(deps)({"query": "resume stream"}, ctx)
            return orjson.loads(orjson.dumps(outcome.content))  # type: ignore[no-any-return]

        async with httpx.AsyncClient() as http:
            nothing = await search(http, ("nosuchbucket",))
            partly = await search(http, ("handbook", "nosuchbucket"))
            fine = await search(http, ("handbook",))

    assert nothing["missing_buckets"] == ["nosuchbucket"] and nothing["chunks"] == []
    assert nothing["warnings"] == ["no bucket 'nosuchbucket': not searched (named by AGENT_KB_DEFAULT_BUCKETS)"]
    assert str(nothing["sufficient_hint"]).startswith("Nothing was searched: no bucket this search covers exists")
    assert partly["missing_buckets"] == ["nosuchbucket"] and [c["doc_id"] for c in partly["chunks"]] == ["d1"]
    # The conversation's own bucket (none yet) is no news.
    assert "missing_buckets" not in fine and "warnings" not in fine
