"""An unchanged document keeps its vectors when it is re-ingested by a process without the
embedder that made them (``knowledge.ingest_docs.keeps_vectors``), on both engines.

Before, ingest compared the stored document's embedder with its own and re-made the
document when they differed: ``agentchat ingest DIR`` run while the configured Ollama was
down stripped the vectors the service searches (``updated``, vectors -> none), ``auto``
fallen back to another embedder replaced them with vectors the service does not search,
and a ``--workers`` worker or replica that had not adopted a late embedder did the same
for what it re-ingested - until the leader's re-embedding put them back.

The vectors are made by the real ``OllamaEmbedder`` against a loopback ``FakeOllama``;
the CLI runs as a subprocess, as an operator runs it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.cli.kb_file import open_kb_file
from knowledge.kb import KnowledgeBase
from storage.open import open_storage
from tests.fakes import FakeOllama, running_fake
from tests.support.procs import agentchat, child_env
from toolindex.hashing import HashingEmbedder
from toolindex.ollama import OllamaEmbedder

DIM = 48
#: Nothing listens there: Ollama is down.
DOWN = "http://127.0.0.1:9"


@pytest.fixture
async def ollama() -> AsyncIterator[tuple[FakeOllama, str]]:
    fake = FakeOllama(embed_dim=DIM)
    async with running_fake(fake.app) as base_url:
        yield fake, base_url


def folder(root: Path) -> Path:
    d = root / "manual"
    d.mkdir()
    (d / "install.md").write_text("# Install\n\nRun the installer, then restart the shell.\n")
    (d / "upgrade.md").write_text("# Upgrade\n\nUpgrades keep your settings in place.\n")
    return d


async def embedders(kb: KnowledgeBase) -> dict[str, tuple[str | None, int | None]]:
    """Each stored document's ``(embed_model, embed_dim)``: whose vectors it holds."""
    ids = [d.id for d in await kb.index.list_documents(None, limit=100)]
    return {i: (s.embed_model, s.embed_dim) for i, s in (await kb.index.document_states(ids)).items()}


async def test_an_unchanged_document_keeps_its_vectors_without_the_embedder_that_made_them(
    target: str, tmp_path: Path, ollama: tuple[FakeOllama, str]
) -> None:
    _, base_url = ollama
    d = folder(tmp_path)
    kb = await open_kb_file(target, OllamaEmbedder(base_url, "nomic-embed-text", dim=DIM))
    try:
        assert (await kb.ingest_paths([d])).added == 2
        made = await embedders(kb)
        key = kb.embed_key
    finally:
        await kb.aclose()
    assert set(made.values()) == {(key, DIM)}

    kb = await open_kb_file(target, None)  # Ollama down, a worker without the late embedder
    try:
        report = await kb.ingest_paths([d])
        assert (report.updated, report.skipped, report.unread_files) == (0, 2, 2), report  # before: 2 updated
        report = await kb.ingest_paths([d], rehash=True)  # read and hashed: the same answer
        assert (report.updated, report.skipped) == (0, 2), report
        assert await embedders(kb) == made
    finally:
        await kb.aclose()

    kb = await open_kb_file(target, HashingEmbedder(dim=32))  # ``auto`` fallen back to hashing
    try:
        report = await kb.ingest_paths([d])
        assert (report.updated, report.skipped, report.unread_files) == (0, 2, 2), report  # before: 2 updated
        assert await embedders(kb) == made
        # A changed document is embedded by the embedder at hand, as before.
        (d / "install.md").write_text("# Install\n\nRun the installer twice, then restart the shell.\n")
        report = await kb.ingest_paths([d])
        assert (report.updated, report.skipped, report.queued_for_embedding) == (1, 1, 0), report
        now = await embedders(kb)
        changed = next(i for i in now if "install" in i)
        assert now[changed] == (kb.embed_key, 32) and all(now[i] == made[i] for i in now if i != changed)
    finally:
        await kb.aclose()

    kb = await open_kb_file(target, None)
    try:  # without an embedder, a changed document is stored for text search only
        (d / "upgrade.md").write_text("# Upgrade\n\nUpgrades keep your settings and your plugins.\n")
        report = await kb.ingest_paths([d])
        assert (report.updated, report.skipped) == (1, 1), report
        now = await embedders(kb)
        assert now[next(i for i in now if "upgrade" in i)] == (None, None)
        assert (await kb.search("plugins", mode="text")).hits
    finally:
        await kb.aclose()


async def stored_embedders(env: dict[str, str]) -> dict[str, tuple[str | None, int | None]]:
    storage = await open_storage(env.get("AGENT_DATABASE_URL") or env["AGENT_DB_PATH"])
    try:
        ids = [d.id for d in await storage.kb_index.list_documents(None, limit=100)]
        return {i: (s.embed_model, s.embed_dim) for i, s in (await storage.kb_index.document_states(ids)).items()}
    finally:
        await storage.close()


@pytest.mark.slow  # `agentchat` CLI subprocesses
async def test_the_cli_without_its_embedder_refuses_or_keeps_the_vectors_and_says_whose_they_are(
    shared_db: dict[str, str], tmp_path: Path, ollama: tuple[FakeOllama, str]
) -> None:
    _, base_url = ollama
    d = folder(tmp_path)
    env = child_env({**shared_db, "AGENT_EMBEDDER": "ollama", "OLLAMA_HOST": base_url})
    code, out, err = await agentchat(env, "ingest", str(d), "--quiet")
    assert code == 0 and "2 documents added" in out, out + err
    made = await stored_embedders(env)
    ((model, dim),) = set(made.values())
    assert model is not None and model.startswith("ollama:") and dim == DIM

    down = {**env, "OLLAMA_HOST": DOWN}
    code, out, err = await agentchat(down, "ingest", str(d), "--quiet")
    assert code == 2, out + err  # before: 0, "2 updated", the vectors gone
    assert "AGENT_EMBEDDER=ollama is not available" in err and "nothing was ingested" in err and "--text-only" in err
    assert await stored_embedders(env) == made

    code, out, err = await agentchat(down, "ingest", str(d), "--quiet", "--text-only")
    assert code == 0, out + err
    assert "0 documents added, 0 updated, 2 unchanged" in out
    assert f"2 documents hold vectors of {model} ({DIM} dimensions), not of this ingest's embedder (none)" in err
    assert await stored_embedders(env) == made

    auto = {**down, "AGENT_EMBEDDER": "auto"}  # falls back to the local or the hashing embedder
    code, out, err = await agentchat(auto, "ingest", str(d), "--quiet")
    assert code == 0, out + err
    assert "0 documents added, 0 updated, 2 unchanged" in out
    assert f"2 documents hold vectors of {model} ({DIM} dimensions), not of this ingest's embedder (" in err
    assert await stored_embedders(env) == made

    # A changed document, without the embedder: stored for text search only, and said so.
    (d / "upgrade.md").write_text("# Upgrade\n\nUpgrades keep your settings and your plugins.\n")
    code, out, err = await agentchat(down, "ingest", str(d), "--quiet", "--text-only")
    assert code == 0, out + err
    assert "0 documents added, 1 updated, 1 unchanged" in out
    assert "new and changed ones are stored for text search only" in err
    now = await stored_embedders(env)
    assert now[next(i for i in now if "upgrade" in i)] == (None, None)
    assert now[next(i for i in now if "install" in i)] == (model, DIM)

    code, out, err = await agentchat(env, "ingest", str(d), "--quiet")  # Ollama back: it embeds that one
    assert code == 0 and "0 documents added, 1 updated, 1 unchanged" in out, out + err
    assert "not of this ingest's embedder" not in err
    assert set((await stored_embedders(env)).values()) == {(model, DIM)}
