"""A re-made document embeds only the chunks whose text changed, on both engines
(``knowledge.ingest_reuse``, ``KBIndex.stored_vectors``): re-chunked after a change of
the chunking rules that cuts it the same, it embeds nothing; cut differently, or edited
in one paragraph, it embeds exactly the texts its stored chunks lack - and ends with the
vectors, and the search answers, a fresh ingest gives. An embedder change still embeds
everything.

The embedder is the real ``OllamaEmbedder`` against a loopback fake of Ollama's
``/api/embed`` that counts the texts it is sent (``FakeOllama``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import numpy as np
import pytest

from app.cli.kb_file import open_kb_file
from knowledge.kb import KnowledgeBase
from storage.open import open_storage
from tests.fakes import FakeOllama, running_fake
from tests.storage.conftest import ENGINES
from tests.support.older_chunks import cut_by_older_rules, stored_chunks, todays_chunks
from tests.support.postgres import TestPostgres
from toolindex.ollama import OllamaEmbedder

DIM = 48
QUERIES = ("ocelot feeding round log book", "cleaning step 7", "records of the enclosure")


def _new_target(request: pytest.FixtureRequest, tmp_path: Path, name: str) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / f"{name}.db")
        return
    server: TestPostgres = request.getfixturevalue("pg_server")
    with server.database() as url:
        yield url


@pytest.fixture(params=ENGINES)
def targets(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Two fresh databases of one engine: the one re-made, and one ingested afresh."""
    for kb in _new_target(request, tmp_path, "kb"):
        for fresh in _new_target(request, tmp_path, "fresh"):
            yield kb, fresh


@pytest.fixture
async def ollama() -> AsyncIterator[tuple[FakeOllama, str]]:
    fake = FakeOllama(embed_dim=DIM)
    async with running_fake(fake.app) as base_url:
        yield fake, base_url


def embedded(fake: FakeOllama) -> int:
    """Texts sent to ``/api/embed`` so far."""
    return sum(len(body["input"]) for body in fake.embed_requests)


def folder(root: Path) -> Path:
    d = root / "handbook"
    d.mkdir()
    for name in ("enclosure", "feeding", "cleaning", "records"):
        (d / f"{name}.md").write_text(page(name))
    return d


def page(name: str, edited: int | None = None) -> str:
    sentences = [f"Step {i} of the ocelot {name} round is written down in the log book." for i in range(30)]
    if edited is not None:
        sentences[edited] = f"Step {edited} of the {name} round now goes to the night keeper instead."
    paragraphs = [" ".join(sentences[i : i + 3]) for i in range(0, 30, 3)]
    return f"# {name.title()}\n\n" + "\n\n".join(paragraphs)


async def open_kb(target: str, base_url: str, model: str = "nomic-embed-text") -> KnowledgeBase:
    return await open_kb_file(target, OllamaEmbedder(base_url, model, dim=DIM))


async def stored_vectors(target: str) -> dict[tuple[str, int], tuple[str, bytes]]:
    """(doc id, position) → (text, the vector's float32 bytes) of every stored chunk."""
    storage = await open_storage(target)
    try:
        sql = storage.runs.sql
        column = "embedding" if sql.dialect.name == "postgres" else "vector"
        rows = await sql.fetchall(f"SELECT doc_id, position, text, {column} FROM kb_chunks")
        return {
            (str(d), int(p)): (str(t), np.asarray(sql.dialect.decode_vector(v), np.float32).tobytes())
            for d, p, t, v in rows
        }
    finally:
        await storage.close()


async def mark_older_rules(target: str) -> None:
    """What migration 32 leaves on a document stored before it: no rules recorded."""
    storage = await open_storage(target)
    try:
        await storage.runs.sql.execute([("UPDATE kb_documents SET chunk_rules = NULL", ())])
    finally:
        await storage.close()


async def answers(target: str, base_url: str) -> list[list[tuple[str, str, float]]]:
    kb = await open_kb(target, base_url)
    try:
        out = []
        for q in QUERIES:
            hits = (await kb.search(q, top_k=5)).hits
            out.append([(h.doc_id, h.text, round(h.score, 6)) for h in hits])
        return out
    finally:
        await kb.aclose()


async def same_as_fresh(target: str, fresh: str, d: Path, base_url: str) -> None:
    """``target`` holds the vectors, and gives the search answers, of ``d`` ingested afresh."""
    kb = await open_kb(fresh, base_url)
    try:
        assert (await kb.ingest_paths([d])).added == len(list(d.iterdir()))
    finally:
        await kb.aclose()
    assert await stored_vectors(target) == await stored_vectors(fresh)
    assert await answers(target, base_url) == await answers(fresh, base_url)


def new_texts(now: dict[str, list[tuple[str, str]]], before: dict[str, list[tuple[str, str]]]) -> int:
    """Chunks of ``now`` whose (heading, text) their document did not hold ``before``."""
    return sum(1 for doc, chunks in now.items() for c in chunks if c not in set(before.get(doc, [])))


async def test_re_chunking_with_the_same_cut_embeds_nothing(
    targets: tuple[str, str], tmp_path: Path, ollama: tuple[FakeOllama, str]
) -> None:
    target, fresh = targets
    fake, base_url = ollama
    d = folder(tmp_path)
    kb = await open_kb(target, base_url)
    try:
        assert (await kb.ingest_paths([d])).added == 4
    finally:
        await kb.aclose()
    chunks = sum(len(c) for c in (await stored_chunks(target, "default")).values())
    assert embedded(fake) == chunks
    await mark_older_rules(target)
    kb = await open_kb(target, base_url)
    try:
        before = embedded(fake)
        report = await kb.ingest_paths([d])
        assert embedded(fake) - before == 0  # before: every chunk again
        assert (report.rechunked, report.reused_vectors) == (4, chunks), report
    finally:
        await kb.aclose()
    await same_as_fresh(target, fresh, d, base_url)


async def test_re_chunking_by_other_rules_embeds_only_the_texts_that_changed(
    targets: tuple[str, str], tmp_path: Path, ollama: tuple[FakeOllama, str]
) -> None:
    target, fresh = targets
    fake, base_url = ollama
    d = folder(tmp_path)
    for name in ("gate", "water"):  # a page shorter than either cut: one same chunk under both rules
        (d / f"{name}.md").write_text(f"# {name.title()}\n\nThe ocelot {name} is checked by the keeper at dawn.")
    kb = await open_kb(target, base_url)
    try:
        assert (await kb.ingest_paths([d])).added == 6
    finally:
        await kb.aclose()
    await cut_by_older_rules(target, [(d, "default")], OllamaEmbedder(base_url, dim=DIM))
    older = await stored_chunks(target, "default")
    todays = todays_chunks(d, "default")
    changed = new_texts(todays, older)
    total = sum(len(c) for c in todays.values())
    assert 0 < changed < total  # the older cut shares some chunks with today's
    kb = await open_kb(target, base_url)
    try:
        before = embedded(fake)
        report = await kb.ingest_paths([d])
        assert embedded(fake) - before == changed  # before: every chunk
        assert (report.rechunked, report.reused_vectors) == (6, total - changed), report
    finally:
        await kb.aclose()
    await same_as_fresh(target, fresh, d, base_url)


async def test_an_edited_paragraph_embeds_only_its_chunks(
    targets: tuple[str, str], tmp_path: Path, ollama: tuple[FakeOllama, str]
) -> None:
    target, fresh = targets
    fake, base_url = ollama
    d = folder(tmp_path)
    kb = await open_kb(target, base_url)
    try:
        assert (await kb.ingest_paths([d])).added == 4
        older = await stored_chunks(target, "default")
        (d / "feeding.md").write_text(page("feeding", edited=25))
        changed = new_texts(todays_chunks(d, "default"), older)
        assert 0 < changed < len(next(c for k, c in older.items() if "feeding" in k))
        before = embedded(fake)
        report = await kb.ingest_paths([d])
        assert (report.updated, report.skipped) == (1, 3), report
        assert embedded(fake) - before == changed  # before: the whole file
    finally:
        await kb.aclose()
    await same_as_fresh(target, fresh, d, base_url)


async def test_an_embedder_or_width_change_still_embeds_everything(
    targets: tuple[str, str], tmp_path: Path, ollama: tuple[FakeOllama, str]
) -> None:
    target, _ = targets
    fake, base_url = ollama
    d = folder(tmp_path)
    kb = await open_kb(target, base_url)
    try:
        assert (await kb.ingest_paths([d])).added == 4
    finally:
        await kb.aclose()
    chunks = sum(len(c) for c in (await stored_chunks(target, "default")).values())
    for model, dim in (("mxbai-embed-large", DIM), ("mxbai-embed-large", DIM // 2)):
        await mark_older_rules(target)  # a re-chunk too: the stored vectors are another embedder's
        fake.embed_dim = dim  # the model now answers at this width
        kb = await open_kb_file(target, OllamaEmbedder(base_url, model, dim=dim))
        try:
            before = embedded(fake)
            report = await kb.ingest_paths([d])
            assert embedded(fake) - before == chunks
            assert (report.updated, report.reused_vectors, report.queued_for_embedding) == (4, 0, 0), report
        finally:
            await kb.aclose()
