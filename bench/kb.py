"""Knowledge-base benchmark: ingest throughput and search latency at 10k and 100k chunks.

Run: ``.venv/bin/python bench/kb.py [--sizes 10000,100000] [--queries 200]``.
Writes ``bench/results/kb.json`` and prints a summary.

Ingest throughput is reported *excluding* embedding time: the KB is fed by an
embedder that returns precomputed random unit vectors (cost ~0), and the KB's own
``embed_seconds`` is subtracted anyway. The real offline embedder (hashing) is timed
separately on a sample so its cost is visible too. Text is synthetic (Zipf-distributed
made-up words), which is fine for speed; quality is measured elsewhere.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.cli.kb_file import open_kb_file  # noqa: E402
from knowledge import KBConfig, KnowledgeBase  # noqa: E402
from toolindex.hashing import HashingEmbedder  # noqa: E402

DIM = 384
CHUNKS_PER_DOC = 4
SCHEMA = {"vendor": "TEXT", "amount": "REAL", "year": "INTEGER"}
VENDORS = [f"vendor{i}" for i in range(50)]


class RandomUnitEmbedder:
    """Precomputed-style embedder: random unit vectors, so embedding costs ~nothing."""

    name = "bench-random"
    model = "random-v1"

    def __init__(self, dim: int, seed: int = 7) -> None:
        self.dim = dim
        self.max_chars = 20_000
        self._rng = np.random.default_rng(seed)

    def _rows(self, n: int) -> np.ndarray:
        m = self._rng.standard_normal((n, self.dim)).astype(np.float32)
        m /= np.linalg.norm(m, axis=1, keepdims=True)
        return m

    async def embed(self, text: str, *, task: str = "query") -> np.ndarray:
        return self._rows(1)[0]

    async def embed_batch(self, texts: list[str], *, task: str = "document") -> np.ndarray:
        return self._rows(len(texts))

    async def aclose(self) -> None:
        return None


def make_vocab(rng: random.Random, size: int = 20_000) -> list[str]:
    syll = ["ka", "lo", "mi", "ne", "ru", "ta", "shi", "vo", "den", "par", "qui", "zo", "bel", "tor", "gan", "fi"]
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(syll) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def zipf_words(rng: random.Random, vocab: list[str], n: int) -> list[str]:
    # Zipf-like ranks: a few very common words, a long tail of rare ones.
    return [vocab[min(len(vocab) - 1, int(rng.paretovariate(1.1)) - 1)] if rng.random() < 0.5 else rng.choice(vocab) for _ in range(n)]


def make_docs(rng: random.Random, vocab: list[str], n_docs: int, offset: int) -> list[dict[str, Any]]:
    docs = []
    for i in range(n_docs):
        paras = []
        for _ in range(CHUNKS_PER_DOC):
            sentences = [" ".join(zipf_words(rng, vocab, rng.randint(8, 14))).capitalize() + "." for _ in range(7)]
            paras.append(" ".join(sentences)[:760])
        docs.append(
            {
                "id": f"doc-{offset + i}",
                "title": " ".join(zipf_words(rng, vocab, 3)).title(),
                "text": "\n\n".join(paras),
                "vendor": rng.choice(VENDORS),
                "amount": round(rng.uniform(10, 10_000), 2),
                "year": rng.randint(2015, 2024),
            }
        )
    return docs


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return round(s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))], 3)


async def time_searches(kb: KnowledgeBase, queries: list[str], **kwargs: Any) -> dict[str, float]:
    for q in queries[:10]:  # warm-up
        await kb.search(q, **kwargs)
    times = []
    for q in queries:
        t0 = time.perf_counter()
        await kb.search(q, **kwargs)
        times.append((time.perf_counter() - t0) * 1000)
    return {"p50_ms": pct(times, 50), "p95_ms": pct(times, 95), "mean_ms": round(statistics.fmean(times), 3)}


async def run_size(n_chunks: int, n_queries: int, workdir: Path) -> dict[str, Any]:
    rng = random.Random(n_chunks)
    vocab = make_vocab(rng)
    n_docs = n_chunks // CHUNKS_PER_DOC
    db = workdir / f"kb-{n_chunks}.db"
    kb = await open_kb_file(db, RandomUnitEmbedder(DIM), config=KBConfig(batch_documents=500))
    await kb.create_bucket("bench", SCHEMA)
    t_gen = time.perf_counter()
    docs = make_docs(rng, vocab, n_docs, 0)
    gen_s = time.perf_counter() - t_gen
    t0 = time.perf_counter()
    report = await kb.ingest_documents(docs, bucket="bench")
    wall = time.perf_counter() - t0
    stats = await kb.status.stats()
    chunks = report.chunks
    ingest = {
        "documents": report.added,
        "chunks": chunks,
        "wall_seconds": round(wall, 3),
        "embed_seconds": report.embed_seconds,
        "chunks_per_second_excluding_embedding": round(chunks / max(1e-9, wall - report.embed_seconds), 1),
        "synthetic_text_generation_seconds": round(gen_s, 3),
        "db_megabytes": round(os.path.getsize(db) / 1e6, 1),
    }
    # Re-ingest unchanged: everything skipped by hash.
    t1 = time.perf_counter()
    again = await kb.ingest_documents(docs[: min(len(docs), 5000)], bucket="bench")
    ingest["skip_unchanged_docs_per_second"] = round(again.skipped / (time.perf_counter() - t1), 1)
    del docs

    queries = [" ".join(rng.choice(vocab[:3000]) for _ in range(rng.randint(2, 4))) for _ in range(n_queries)]
    search = {
        "hybrid": await time_searches(kb, queries, mode="hybrid", top_k=5),
        "text": await time_searches(kb, queries, mode="text", top_k=10, context_chars=400),
        "semantic": await time_searches(kb, queries, mode="semantic", top_k=10, context_chars=500),
        "hybrid_filtered": await time_searches(
            kb, queries, mode="hybrid", top_k=10, bucket="bench", filters={"year": {">=": 2022}, "amount": {">": 2000}}
        ),
        "semantic_filtered_selective": await time_searches(
            kb, queries, mode="semantic", top_k=10, bucket="bench", filters={"vendor": "vendor7", "year": 2020}
        ),
    }
    await kb.aclose()
    t2 = time.perf_counter()
    kb = await open_kb_file(db, RandomUnitEmbedder(DIM))
    open_s = time.perf_counter() - t2
    await kb.aclose()
    return {
        "chunks": stats["chunks"],
        "vectors": stats["vectors"],
        "ingest": ingest,
        "search": search,
        "open_with_vector_load_seconds": round(open_s, 3),
    }


async def hashing_embedder_rate(samples: int = 2000) -> dict[str, Any]:
    rng = random.Random(1)
    vocab = make_vocab(rng, 5000)
    texts = [" ".join(zipf_words(rng, vocab, 110)) for _ in range(samples)]
    emb = HashingEmbedder(dim=DIM)
    t0 = time.perf_counter()
    for i in range(0, samples, 64):
        await emb.embed_batch(texts[i : i + 64])
    secs = time.perf_counter() - t0
    return {"chunks": samples, "seconds": round(secs, 3), "chunks_per_second": round(samples / secs, 1)}


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "kb.json"))
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    results: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "numpy": np.__version__},
        "dim": DIM,
        "targets_at_100k": {"hybrid_p95_ms": 50, "ingest_chunks_per_second": 500},
        "hashing_embedder": await hashing_embedder_rate(),
        "sizes": {},
    }
    with tempfile.TemporaryDirectory(prefix="kbbench-") as tmp:
        for n in sizes:
            print(f"== {n} chunks", flush=True)
            r = await run_size(n, args.queries, Path(tmp))
            results["sizes"][str(n)] = r
            print(orjson.dumps(r, option=orjson.OPT_INDENT_2).decode(), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    print(f"hashing embedder: {results['hashing_embedder']['chunks_per_second']} chunks/s")
    for n, r in results["sizes"].items():
        s = r["search"]
        print(
            f"{n:>7} chunks: ingest {r['ingest']['chunks_per_second_excluding_embedding']} chunks/s | "
            + " | ".join(f"{k} p50 {v['p50_ms']} p95 {v['p95_ms']} ms" for k, v in s.items())
        )
    print(f"wrote {out}")


if __name__ == "__main__":
    asyncio.run(main())
