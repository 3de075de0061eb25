"""An explicit ``AGENT_EMBEDDER=ollama`` whose server is not up at start-up is taken by
itself once it answers, without a restart (found by the operator's walk: the docker-compose
start, where the agent and Ollama start together and Ollama answers a few seconds later).

The app serves on a real uvicorn server with the Ollama fake's address configured; the
fake is first not listening at all (then starts on that port), or answers HTTP 500 to
everything (then recovers). Meanwhile ``/readyz`` is 503 and says the embedder is being
probed again, and a document posted is stored for text search only. Afterwards, with
nobody restarting anything: ``/readyz`` is 200, the tool index is built, the document has
its vectors, and ``search_semantic`` finds it in ``semantic`` mode.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sys
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from starlette.types import Receive, Scope, Send

from app.config import Settings
from client import AgentClient
from tests.conftest import running_app
from tests.fakes import FakeOllama, ToolCall, running_fake
from tests.support.deadline import until
from tests.support.postgres import TestPostgres
from tests.support.readyz_counts import counts_current
from tests.support.server import free_port

ROOT = Path(__file__).resolve().parent.parent
MODELS = ["qwen3:4b", "nomic-embed-text:latest"]
NOTE = {"id": "zebra-note", "title": "Zebra rotation",
        "text": "The zebra rotation schedule moves the on-call pager every Tuesday at noon."}

_MODE = re.compile(r'\\*"mode\\*":\s*\\*"(\w+)')
_DOC_ID = re.compile(r'\\*"doc_id\\*":\s*\\*"([^"\\]+)')


@dataclass
class SearchingModel:
    """Plays the chat model: calls ``search_semantic`` with ``query``, then
    ``generate_response`` citing the first passage found; records each search's mode and ids."""

    query: str = ""
    searches: list[tuple[str, list[str]]] = field(default_factory=list)

    def __call__(self, body: Any) -> list[Any]:
        text = orjson.dumps(body).decode()
        if "cite_with" not in text:  # no search result yet in this conversation
            return [ToolCall("search_semantic", {"bucket": "default", "query": self.query, "top_k": 2})]
        doc_ids = _DOC_ID.findall(text)
        modes = _MODE.findall(text)
        self.searches.append((modes[-1] if modes else "", doc_ids))
        return [ToolCall("generate_response", {
            "answer": f"See [{doc_ids[0]}].", "sources": doc_ids[:1], "used_internal_kb": True,
            "used_external_kb": False,
        })]


class DownFirst:
    """The fake's ASGI app answering HTTP 500 to every request until ``down`` is cleared."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.down = True
        self.refused = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.down:
            self.refused += 1
            await send({"type": "http.response.start", "status": 500,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": b'{"error": "llama runner process has terminated"}'})
            return
        await self.app(scope, receive, send)


def late_settings(tmp_path: Path, port: int, **more: str) -> Settings:
    return Settings.from_env({
        **more,
        "AGENT_DB_PATH": str(tmp_path / "agent.sqlite3"),
        "AGENT_INGEST_SAMPLE_KB": "false",
        "AGENT_ADMIN_OPEN": "true",  # this test posts a document
        "AGENT_EMBEDDER": "ollama",
        "AGENT_LLM_PROVIDER": "ollama",  # chosen without a probe: the fake plays the model once up
        "OLLAMA_MODEL": "qwen3:4b",
        "OLLAMA_HOST": f"http://127.0.0.1:{port}",
    })


def checks(body: dict[str, Any]) -> dict[str, Any]:
    return dict(body.get("checks") or {})


async def readyz(http: httpx.AsyncClient) -> tuple[int, dict[str, Any]]:
    response = await http.get("/readyz")
    return response.status_code, response.json()


async def recovered(http: httpx.AsyncClient, seen: list[dict[str, Any]]) -> bool:
    """Ready, the tool index built and nothing left waiting for vectors (counted at the
    generation the probe read)."""
    status, body = await readyz(http)
    seen[:] = [body]
    c = checks(body)
    return (status == 200 and c["tool_index"]["status"] == "ready" and counts_current(body)
            and c["knowledge"].get("pending_vectors") == 0 and c["embedder"]["status"] == "answered")


async def run_late_embedder(
    tmp_path: Path, port: int, bring_up: AbstractAsyncContextManager[Any], model: SearchingModel, **more: str
) -> None:
    async with running_app(late_settings(tmp_path, port, **more)) as (base, _app), httpx.AsyncClient(
        base_url=base, timeout=30
    ) as http:
        status, body = await readyz(http)
        embedder = checks(body)["embedder"]
        assert status == 503 and embedder["name"] is None, body
        assert embedder["recovery"]["state"] == "probing", embedder
        assert "probed again in the background" in embedder["detail"], embedder
        assert "until agentchat is restarted" not in embedder["detail"], embedder
        assert checks(body)["tool_index"]["status"] == "disabled", body
        await until(lambda: _tried(http), "a probe again while the embedder is down")
        recovering, probes = await recovery_metrics(http)
        assert recovering == 1 and probes >= 1, (recovering, probes)

        posted = await http.post("/v1/kb/documents", json={"documents": [NOTE]})
        assert posted.status_code == 200, posted.text  # stored, searchable by text (no embedder yet)
        assert posted.json()["added"] == 1, posted.text

        async with bring_up:
            seen: list[dict[str, Any]] = []
            await until(lambda: recovered(http, seen), "ready on the embedder found late, nothing pending")
            body = seen[0]
            embedder = checks(body)["embedder"]
            assert embedder["name"] == "ollama" and embedder["dim"] == 64, embedder
            assert embedder["recovery"]["state"] == "recovered" and embedder["recovery"]["tries"] >= 2, embedder
            assert "detail" not in embedder, embedder
            recovering, probes = await recovery_metrics(http)
            assert recovering == 0 and probes == embedder["recovery"]["tries"], (recovering, probes, embedder)
            kb = checks(body)["knowledge"]
            assert kb["documents_without_current_vectors"] == 0, kb
            assert kb["reembedding"]["reembedded_documents"] >= 1, kb

            # The fake's embedding model is a bag of hashed words: "by meaning" is by vector here.
            model.query = "which day does the on-call pager move"
            async with AgentClient(base) as agent:
                names = [event.name async for event in agent.chat(model.query, "knowledge")]
            assert "response" in names and model.searches, names
            mode, found = model.searches[-1]
            assert (mode, found[:1]) == ("semantic", [NOTE["id"]]), model.searches


async def recovery_metrics(http: httpx.AsyncClient) -> tuple[float, float]:
    """``agentchat_embedder_recovering`` and ``agentchat_embedder_recovery_probes_total``
    as ``/metrics`` serves them."""
    text = (await http.get("/metrics")).text
    values = dict(line.split(" ", 1) for line in text.splitlines() if line.startswith("agentchat_embedder_recover"))
    return float(values["agentchat_embedder_recovering"]), float(values["agentchat_embedder_recovery_probes_total"])


async def _tried(http: httpx.AsyncClient, tries: int = 1) -> bool:
    _, body = await readyz(http)
    return int(checks(body)["embedder"]["recovery"]["tries"]) >= tries


async def test_an_ollama_not_listening_at_start_is_used_once_it_listens(tmp_path: Path) -> None:
    port = free_port()
    model = SearchingModel()
    fake = FakeOllama(model, models=MODELS, embed_dim=64)
    await run_late_embedder(tmp_path, port, running_fake(fake.app, port=port), model)


@pytest.mark.postgres
async def test_on_postgresql_the_leader_back_fills_with_the_embedder_found_late(
    tmp_path: Path, pg_server: TestPostgres, caplog: pytest.LogCaptureFixture
) -> None:
    """The same on PostgreSQL: the engine's own vector search is what the knowledge base
    adopts, and the re-embedding runs as the background jobs' leader's job - stopped
    before the knowledge base closes at shutdown, as the one started with the app is: it
    used to see its re-embedding end under it, take that for a lost lead ("background job
    stopped with the lead", though the lead was never lost) and start it again on the
    closing knowledge base."""
    caplog.set_level(logging.INFO, logger="agentchat.ops")
    port = free_port()
    model = SearchingModel()
    fake = FakeOllama(model, models=MODELS, embed_dim=64)
    with pg_server.database() as url:
        await run_late_embedder(
            tmp_path, port, running_fake(fake.app, port=port), model,
            AGENT_DATABASE_URL=url, AGENT_SECRET_KEY="late-embedder-key-0123456789abcdef",
        )
    stopped = [r for r in caplog.records if r.getMessage() == "background job stopped with the lead"]
    assert not stopped, [getattr(r, "job", None) for r in stopped]


async def test_an_ollama_answering_500_at_start_is_used_once_it_recovers(tmp_path: Path) -> None:
    port = free_port()
    model = SearchingModel()
    fake = FakeOllama(model, models=MODELS, embed_dim=64)
    gate = DownFirst(fake.app)

    @asynccontextmanager
    async def recovers() -> AsyncIterator[None]:
        assert gate.refused >= 2, gate.refused  # the start-up probe and at least one probe again
        gate.down = False
        yield

    async with running_fake(gate, port=port):
        await run_late_embedder(tmp_path, port, recovers(), model)


async def test_the_probing_logs_changes_not_tries_and_stops_at_shutdown(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing ever listens: one line when the probing starts, none per try, and the
    app's close cancels it (the task is over once the server stopped)."""
    caplog.set_level(logging.INFO, logger="agentchat.embedder")
    port = free_port()
    async with running_app(late_settings(tmp_path, port)) as (base, app), httpx.AsyncClient(base_url=base) as http:
        await until(lambda: _tried(http, 2), "two probes again while nothing listens")
        recovery = app.state.services.embedder_check.recovery
        assert recovery.state == "probing" and recovery.task is not None
    assert recovery.task.done(), recovery.task
    lines = [r.getMessage() for r in caplog.records if r.name == "agentchat.embedder"]
    assert lines == ["the embedder failed its start-up probe: probing it again in the background"], lines


async def test_the_probing_is_stopped_with_the_background_before_the_rooms_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The close cancels the app's background tasks first, then closes the rooms; the
    embedder check (which also cancels the probing) closes among them. A probing still
    running there could finish an adoption and start tasks (the tool index, back-fills)
    that nothing cancels, on rooms being closed: it is over before any room closes."""
    from app.ops.embedder_check import EmbedderCheck

    seen: list[bool] = []
    close = EmbedderCheck.aclose

    async def noting_close(self: EmbedderCheck) -> None:
        if self.recovery is not None and self.recovery.task is not None:
            seen.append(self.recovery.task.done())
        await close(self)

    monkeypatch.setattr(EmbedderCheck, "aclose", noting_close)
    port = free_port()
    async with running_app(late_settings(tmp_path, port)) as (base, _app), httpx.AsyncClient(base_url=base) as http:
        await until(lambda: _tried(http, 1), "a probe again while nothing listens")
    assert seen == [True], seen


async def test_mcp_tools_listed_before_the_embedder_answered_are_ranked_once_it_does(tmp_path: Path) -> None:
    """An MCP server connected while there was no embedder has its tools offered, not
    embedded: once the embedder answers they join the tool index with the built-in ones
    (they were left out, and out of ``unranked`` too, until the server's list changed or
    it reconnected)."""
    port = free_port()
    fake = FakeOllama(SearchingModel(), models=MODELS, embed_dim=64)
    config = tmp_path / "mcp.toml"
    config.write_text(
        f'[servers.ops]\ncommand = {orjson.dumps(sys.executable).decode()}\n'
        f'args = ["-m", "tests.fakes.mcp_server", "ops"]\ncwd = {orjson.dumps(str(ROOT)).decode()}\n'
        'protocol = "legacy"\nconnect_timeout_s = 60\n'
    )
    settings = late_settings(tmp_path, port, AGENT_MCP_SERVERS=str(config))
    async with running_app(settings) as (base, app), httpx.AsyncClient(base_url=base, timeout=30) as http:
        services = app.state.services
        await until(lambda: "word_stats" in services.agent.registry, "the MCP server's tools offered", timeout=90)
        async with running_fake(fake.app, port=port):
            await until(lambda: services.index_state.status == "ready", "the tool index built late")
            await until(lambda: "word_stats" in services.index_state.index.names,
                        "the MCP tools listed before in the tool index", timeout=15)
            _, body = await readyz(http)
            assert "unranked" not in checks(body)["mcp"], checks(body)["mcp"]


async def test_a_document_posted_across_the_adoption_is_said_searchable_by_text_then_re_embedded(
    tmp_path: Path,
) -> None:
    """A POST /v1/kb/documents whose ingest began before the embedder answered stores
    text only (the parts it began with): its answer says so, not "searchable by meaning"
    as the embedder adopted meanwhile would, and the re-embedding gives it vectors."""
    port = free_port()
    fake = FakeOllama(SearchingModel(), models=MODELS, embed_dim=64)
    async with running_app(late_settings(tmp_path, port)) as (base, app), httpx.AsyncClient(
        base_url=base, timeout=30
    ) as http:
        kb = app.state.services.rooms.knowledge.kb
        index: Any = kb.index
        write_documents = index.write_documents
        arrived, release = asyncio.Event(), asyncio.Event()

        async def held_write(*args: Any, **kwargs: Any) -> Any:
            arrived.set()
            await release.wait()
            return await write_documents(*args, **kwargs)

        index.write_documents = held_write  # the real write, once released
        posting = asyncio.create_task(http.post("/v1/kb/documents", json={"documents": [NOTE]}))
        await until(arrived.is_set, "the ingest at its write, before the embedder answers")
        async with running_fake(fake.app, port=port):
            await until(lambda: kb.embedder is not None, "the embedder adopted")
            release.set()
            posted = await posting
            assert posted.status_code == 200 and posted.json()["added"] == 1, posted.text
            assert posted.json()["embedding"]["searchable_by"] == ["text"], posted.json()
            await until(lambda: kb.backfill.reembedded >= 1, "the document posted across the adoption re-embedded")
