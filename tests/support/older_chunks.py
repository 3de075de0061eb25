"""A knowledge base as an older release whose chunker cut differently left it, on either
engine, and the chunks today's rules make - for the tests of ``CHUNK_RULES``.

"Older" is made with the real ingest, so every derived table (full text, postings,
vectors) agrees with the chunks: the folders are ingested again cut at 400 characters
instead of 800, then each document gets back the content hash and file stamp it had
(neither says which chunking rules cut the text: an older release stored the same
ones) and no chunking-rules version (what migration 32 leaves on a document stored
before it). No monkeypatching: a server process started on the database afterwards sees
exactly what an upgrade would.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from app.cli.kb_file import open_kb_file
from knowledge.chunking import chunk_text
from knowledge.filecheck import walk_files
from knowledge.ingest_docs import with_summary
from knowledge.loaders import SUPPORTED_SUFFIXES, load_file
from knowledge.types import KBConfig
from storage.open import open_storage
from toolindex.embedder import Embedder

#: doc id → ``(heading, text)`` of each of its chunks, in position order.
Chunks = dict[str, list[tuple[str, str]]]

#: The older chunker's cut: other boundaries than today's on every document of a few hundred characters.
OLDER_CUT = KBConfig(chunk_target=400, chunk_overlap=60)


def todays_chunks(folder: Path, bucket: str, config: KBConfig | None = None) -> Chunks:
    """The chunks today's rules cut ``folder``'s documents into, as the ingest stores them."""
    config = config or KBConfig()
    out: Chunks = {}
    for entry in walk_files(folder, SUPPORTED_SUFFIXES):
        if entry.skip is not None:
            continue
        loaded, rejected = load_file(entry.path, entry.shown, bucket=bucket)
        assert not rejected, rejected
        for item in loaded:
            doc = item.doc
            cut = chunk_text(doc.text, target=config.chunk_target, overlap=config.chunk_overlap, paged=doc.paged)
            out[doc.id or ""] = [(c.heading, c.text) for c in with_summary(cut, doc.metadata)]
    return out


async def stored_chunks(target: str, bucket: str) -> Chunks:
    """The chunks stored for ``bucket``'s documents (``target``: a SQLite file or a URL)."""
    storage = await open_storage(target)
    try:
        rows = await storage.runs.sql.fetchall(
            "SELECT c.doc_id, c.position, c.heading, c.text FROM kb_chunks c JOIN kb_documents d ON d.id = c.doc_id"
            " WHERE d.bucket = ? ORDER BY c.doc_id, c.position",
            (bucket,),
        )
    finally:
        await storage.close()
    out: Chunks = {}
    for doc_id, _position, heading, text in rows:
        out.setdefault(str(doc_id), []).append((str(heading), str(text)))
    return out


async def cut_by_older_rules(target: str, folders: Sequence[tuple[Path, str]], embedder: Embedder | None) -> None:
    """Make the stored documents of each ``(folder, bucket)`` an older release's (module
    docstring). ``embedder``: the one they were stored with (``None``: none)."""
    await cut_by_other_rules(target, folders, embedder, rules=None)


async def cut_by_other_rules(
    target: str, folders: Sequence[tuple[Path, str]], embedder: Embedder | None, *, rules: int | None
) -> None:
    """Make the stored documents of each ``(folder, bucket)`` another release's: cut at
    ``OLDER_CUT``, recorded as cut by ``rules`` (``None``: none recorded, a document
    stored before migration 32; above ``CHUNK_RULES``: a newer release's, as a rolling
    upgrade or a rollback leaves them for this one)."""
    storage = await open_storage(target)
    try:
        kept = await storage.runs.sql.fetchall("SELECT id, content_hash, file_stamp FROM kb_documents")
    finally:
        await storage.close()
    assert kept, "nothing stored"
    kb = await open_kb_file(target, embedder, config=OLDER_CUT)
    try:
        for folder, bucket in folders:
            report = await kb.ingest_paths([folder], bucket=bucket)
            assert report.updated > 0 and not report.added and not report.rejected, report
    finally:
        await kb.aclose()
    storage = await open_storage(target)
    try:
        await storage.runs.sql.execute(
            [
                *(
                    ("UPDATE kb_documents SET content_hash = ?, file_stamp = ? WHERE id = ?", (h, stamp, i))
                    for i, h, stamp in kept
                ),
                ("UPDATE kb_documents SET chunk_rules = ?", (rules,)),
            ]
        )
    finally:
        await storage.close()


__all__ = ["OLDER_CUT", "Chunks", "cut_by_older_rules", "cut_by_other_rules", "stored_chunks", "todays_chunks"]
