"""Fusion's confidence floor (issue 24 item 5): a dense side whose best cosine is below its
embedder's ``confident_at`` sits the query out, so min-max cannot stretch an unrelated
"best" match into a perfect 1.0 that reorders what BM25 ranked."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.cli.kb_file import open_kb_file
from knowledge import fusion, ranking
from knowledge.fusion import DENSE_WEIGHTS, DenseWeight, FusionSide, confident, dense_weight, fuse
from toolindex.hashing import HashingEmbedder

TEXT = FusionSide([1, 2, 3, 4], [12.0, 9.0, 8.5, 2.0], 1.0)
DENSE_IDS = [4, 3, 9]


def order(scores: dict[int, float]) -> list[int]:
    return sorted(scores, key=lambda i: (-scores[i], i))


def test_an_unconfident_dense_side_leaves_the_text_order_alone() -> None:
    weak = FusionSide(DENSE_IDS, [0.31, 0.30, 0.12], 0.5, confident_at=0.4)
    assert not confident(weak)
    assert fuse([TEXT, weak]) == fuse([TEXT])
    # Without the floor the same weak list, stretched to 0..1, reorders BM25's list.
    unfloored = fuse([TEXT, weak._replace(confident_at=None)])
    assert order(unfloored) != order(fuse([TEXT]))


def test_a_confident_dense_side_counts_with_its_weight() -> None:
    sure = FusionSide(DENSE_IDS, [0.62, 0.55, 0.20], 0.5, confident_at=0.4)
    assert confident(sure)
    fused = fuse([TEXT, sure])
    assert fused == fuse([TEXT, sure._replace(confident_at=None)])
    # Its best (3, BM25's third) now leads; its own find (9) joins the list.
    assert order(fused)[0] == 3 and order(fuse([TEXT]))[0] == 1
    assert fused[4] > fuse([TEXT])[4] and 9 in fused
    # The floor is inclusive: a best cosine exactly at it counts.
    assert confident(sure._replace(scores=[0.4, 0.3, 0.1]))


def test_a_lone_side_ranks_whatever_its_confidence() -> None:
    # Semantic mode (no text side): nothing to defer to, so the floor does not apply.
    weak = FusionSide(DENSE_IDS, [0.31, 0.30, 0.12], 0.5, confident_at=0.4)
    alone = fuse([FusionSide([], [], 1.0), weak])
    assert order(alone) == DENSE_IDS and alone[4] == pytest.approx(1.0)


def test_when_every_side_is_unconfident_all_of_them_count() -> None:
    a = FusionSide([1, 2], [0.2, 0.1], 1.0, confident_at=0.5)
    b = FusionSide([2, 3], [0.3, 0.1], 1.0, confident_at=0.5)
    assert fuse([a, b]) == fuse([a._replace(confident_at=None), b._replace(confident_at=None)])


def test_floors_per_embedder_kind_and_overrides_keep_them() -> None:
    hashing = dense_weight("hashing")
    assert hashing.confident_at is not None and 0.0 < hashing.confident_at < 1.0
    assert dense_weight("hashing", {"hashing": 0.6}) == DenseWeight(0.6, hashing.depth, hashing.confident_at)
    # Kinds without a fitted floor (Gemini, Ollama, no embedder) always count.
    for kind in ("gemini", "ollama", None):
        assert dense_weight(kind).confident_at is None
    assert set(DENSE_WEIGHTS) >= {"hashing", "minilm"}


def test_ranking_re_exports_the_fusion_api() -> None:
    # Callers written against knowledge.ranking keep working after the move.
    for name in ("fuse", "dense_weight", "DenseWeight", "FusionSide", "minmax", "head_minmax", "DENSE_WEIGHTS"):
        assert getattr(ranking, name) is getattr(fusion, name)


DOCS = [
    {
        "id": "gzip",
        "title": "gzip",
        "text": "Compress and decompress files in the gzip format; the checksum of every "
        "member is verified on reading.",
    },
    {
        "id": "zipfile",
        "title": "zipfile",
        "text": "Read and write ZIP archives: list their members, extract them, and append files to an archive.",
    },
    {
        "id": "tarfile",
        "title": "tarfile",
        "text": "Tape archives: create, list and extract tar files, optionally compressed with gzip, bz2 or lzma.",
    },
    {
        "id": "hashlib",
        "title": "hashlib",
        "text": "Secure hashes and message digests: SHA-256, SHA-3, BLAKE2 and the legacy MD5 checksum.",
    },
    {
        "id": "zlib",
        "title": "zlib",
        "text": "Low-level deflate compression compatible with gzip, and the adler32 and crc32 checksums.",
    },
    {
        "id": "sched",
        "title": "sched",
        "text": "A general purpose event scheduler that runs callables at given times with priorities.",
    },
]


async def test_the_search_path_applies_the_floor_of_the_hashing_embedder(tmp_path: Path) -> None:
    """Through a real knowledge base (default configuration, hashing embedder): a query
    whose best cosine is under the floor ranks in hybrid mode exactly as in text mode; one
    above it lets the dense side add what only it found."""
    embedder = HashingEmbedder(dim=384)
    floor = dense_weight(embedder.name).confident_at
    assert floor is not None
    docs_matrix = await embedder.embed_batch([f"{d['title']}\n{d['text']}" for d in DOCS])
    kb = await open_kb_file(tmp_path / "kb.sqlite3", embedder)
    try:
        assert not (await kb.ingest_documents(DOCS, bucket="b")).rejected

        async def hits(query: str, mode: str) -> list[tuple[str, float]]:
            res = await kb.search(query, bucket="b", mode=mode, top_k=6)  # type: ignore[arg-type]
            return [(h.doc_id, h.score) for h in res.hits]

        weak, strong = "verify a checksum", "crc32 checksums of compressed data"
        best = {q: float(np.max(docs_matrix @ await embedder.embed(q))) for q in (weak, strong)}
        assert best[weak] < floor <= best[strong], best
        assert await hits(weak, "hybrid") == await hits(weak, "text")
        text_docs = {d for d, _ in await hits(strong, "text")}
        hybrid_docs = {d for d, _ in await hits(strong, "hybrid")}
        assert hybrid_docs > text_docs  # the dense side's own finds join the list
    finally:
        await kb.aclose()
