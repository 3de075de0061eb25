"""A server started without its embedder (an explicit ``AGENT_EMBEDDER=ollama`` whose
server is down: what a ``--workers`` worker or a replica is until it adopts the late
embedder) keeps the sample's vectors when its start re-ingests the sample, on both
engines, with a real ``agentchat serve`` process.

The sample is embedded first by the real ``OllamaEmbedder`` against a loopback
``FakeOllama``, then made an older install's (its documents' stamps cleared, as before
migration 21 or after the install moved): the start reads every file and finds each
unchanged. Before ``knowledge.ingest_docs.keeps_vectors`` it re-made each one as text
only - the vectors the service searches gone until the leader's re-embedding."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.cli.kb_file import open_kb_file
from knowledge import IngestReport, KnowledgeBase, ensure_sample_kb
from tests.fakes import FakeOllama, running_fake
from tests.storage.conftest import ENGINES
from tests.support.deadline import until
from tests.support.postgres import TestPostgres
from tests.support.procs import AgentServer
from toolindex.ollama import OllamaEmbedder

pytestmark = pytest.mark.slow  # a real server's start, ingesting the sample

DIM = 48
#: Nothing listens there: Ollama is down.
DOWN = "http://127.0.0.1:9"


@pytest.fixture(params=ENGINES)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    if request.param == "sqlite":
        yield {"AGENT_DB_PATH": str(tmp_path / "agent.sqlite3")}
        return
    server: TestPostgres = request.getfixturevalue("pg_server")
    with server.database() as url:
        yield {"AGENT_DATABASE_URL": url, "AGENT_DB_PATH": str(tmp_path / "unused.sqlite3"),
               "AGENT_SECRET_KEY": "a-key-for-this-test-0123456789"}  # fmt: skip


@pytest.fixture
async def ollama_url() -> AsyncIterator[str]:
    async with running_fake(FakeOllama(embed_dim=DIM).app) as base_url:
        yield base_url


async def stored(kb: KnowledgeBase) -> dict[str, tuple[str | None, int | None, str | None]]:
    """Each document's ``(embed_model, embed_dim, file_stamp)``."""
    ids = [d.id for d in await kb.index.list_documents("default", limit=1000)]
    return {i: (s.embed_model, s.embed_dim, s.file_stamp) for i, s in (await kb.index.document_states(ids)).items()}


async def test_a_start_without_its_embedder_keeps_the_samples_vectors(
    tmp_path: Path, database: dict[str, str], ollama_url: str
) -> None:
    target = database.get("AGENT_DATABASE_URL") or database["AGENT_DB_PATH"]
    kb = await open_kb_file(target, OllamaEmbedder(ollama_url, "nomic-embed-text", dim=DIM))
    try:
        assert isinstance(await ensure_sample_kb(kb), IngestReport)
        key = kb.embed_key
        await kb.index.set_file_stamps([(i, None) for i in await stored(kb)])  # an older install's
        before = await stored(kb)
    finally:
        await kb.aclose()
    assert before and {(m, d) for m, d, _ in before.values()} == {(key, DIM)}

    server = AgentServer(tmp_path, {**database, "AGENT_EMBEDDER": "ollama", "OLLAMA_HOST": DOWN})
    server.start()
    try:
        await server.wait_healthy(timeout=120)
        async with httpx.AsyncClient() as http:

            async def sample_done() -> bool:
                _, body = await server.readyz(http)  # 503 without the embedder: the check still says
                knowledge: dict[str, Any] = ((body or {}).get("checks") or {}).get("knowledge") or {}
                return str(knowledge.get("sample_kb", "")).startswith("ingested")

            await until(sample_done, "the start's sample ingest", timeout=120, step=0.2)
            _, body = await server.readyz(http)
        assert body is not None
        status = str(body["checks"]["knowledge"]["sample_kb"])
        assert f"0 updated, 0 removed, {len(before)} unchanged" in status, status  # before: all updated
        server.send(signal.SIGTERM)
        assert await server.wait_exit(60) is not None, server.tail()
    finally:
        await server.kill()
        server.close()

    kb = await open_kb_file(target, None)
    try:
        after = await stored(kb)
    finally:
        await kb.aclose()
    assert {i: (m, d) for i, (m, d, _) in after.items()} == {i: (key, DIM) for i in before}  # before: (None, None)
    assert all(stamp is not None for _, _, stamp in after.values())  # read and re-stamped: the ingest ran
