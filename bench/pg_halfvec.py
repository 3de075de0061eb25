"""A ``halfvec`` HNSW graph beside the product's ``vector`` one (issue 24, ingest):
``bench/pg_recall.py --graphs vector,halfvec`` builds both kinds of per-bucket graph on
one loaded database, alternately, and measures each search through either.

Why: the three per-bucket graph builds are most of a PostgreSQL bulk load's server CPU
(62–78 of ~146 CPU-s per 100k chunks, docs/knowledge-base.md, "Where a PostgreSQL bulk
load's time goes"). pgvector ≥ 0.7 can index ``embedding::halfvec(D)`` (16-bit floats):
half the bytes a vector in the graph, so the build holds and compares half the data. The
walk then ranks by half-precision distance, so its candidates are re-ranked on the
full-precision column, as the iterative pool already is.

The graph is the product's (``kb_graphs.graph_ddl``: m 16 / ef_construction 64, partial on
the dimension and the bucket) with the expression and operator class changed. A search
through it is the product's plan (``kb_vector_scan.statement``) with the graph part's
``ORDER BY`` on the half-precision distance and its result re-ranked on the full one: the
iterative pool as it is, the plain walk (``ef_search`` candidates) turned into a pool of
``ef_search`` chunks. Both graphs can sit on one table: the planner takes the index whose
expression is the ``ORDER BY``'s.

Server CPU of a build: ``bench.ingest_ab.server_tree_cpu_s`` over the server's processes
(each live process's own and reaped children's time, the postmaster's reaped children —
the parallel workers — included), read before and after the ``CREATE INDEX``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from psycopg import sql

from bench.ingest_ab import server_tree_cpu_s
from storage.postgres.database import Conn
from storage.postgres.kb_graphs import bucket_key, graph_ddl, graph_name, set_build_memory
from storage.postgres.kb_vector_scan import Part, ScanSettings, Statement
from storage.postgres.kb_vector_scan import statement as vector_statement

GRAPH_KINDS = ("vector", "halfvec")


def index_name(kind: str, dim: int, bucket: str) -> str:
    """The graph's index name: the product's for ``vector``; for ``halfvec`` one the
    product's catalog reader (``kb_graphs._NAME``) does not take for its own."""
    if kind == "vector":
        return graph_name(dim, bucket)
    return f"kb_chunks_hnsw_h{int(dim)}_b{bucket_key(bucket)}"


def ddl(kind: str, dim: int, bucket: str) -> sql.Composed:
    """A plain ``CREATE INDEX`` of the bucket's graph of that kind."""
    if kind == "vector":
        return graph_ddl(dim, bucket, concurrently=False)
    d = sql.SQL(str(int(dim)))
    return sql.SQL(
        "CREATE INDEX {name} ON kb_chunks USING hnsw ((embedding::halfvec({d})) halfvec_cosine_ops) "
        "WHERE vector_dims(embedding) = {d} AND bucket = {bucket}"
    ).format(name=sql.Identifier(index_name(kind, dim, bucket)), d=d, bucket=sql.Literal(bucket))


def halfvec_statement(
    conn: Conn, part: Part, vec: npt.NDArray[np.float32], embed_model: str, limit: int, s: ScanSettings
) -> Statement:
    """The product's statement of ``part``, its graph walked on the ``halfvec`` graph and
    the walk's candidates re-ranked on the full vectors (exact parts unchanged)."""
    st = vector_statement(conn, part, vec, embed_model, limit, s)
    if part.graph is None or part.plan.exact:
        return st
    dim = int(vec.shape[0])
    full = f"c.embedding::vector({dim}) <=> %(q)s::vector({dim})"
    half = f"c.embedding::halfvec({dim}) <=> %(q)s::halfvec({dim})"
    if part.plan.pool:  # the iterative pool: already re-ranked exactly outside the walk
        walked = f"ORDER BY {full} LIMIT %(pool)s"
        if walked not in st.sql:
            raise AssertionError(f"the product's pool statement changed: {st.sql}")
        return Statement(st.settings, st.sql.replace(walked, f"ORDER BY {half} LIMIT %(pool)s"), st.params)
    # The plain walk: its ``ef_search`` candidates become the pool re-ranked on the full vectors.
    head, sep, _tail = st.sql.partition(f" ORDER BY {full} LIMIT %(limit)s")
    _select, found, source = head.partition(" FROM ")
    if not sep or not found:
        raise AssertionError(f"the product's plain statement changed: {st.sql}")
    sql_text = (
        f"WITH s AS MATERIALIZED (SELECT c.id, {full} AS dist FROM {source} ORDER BY {half} LIMIT %(pool)s) "
        "SELECT id, 1 - dist, %(estimate)s FROM s ORDER BY dist, id LIMIT %(limit)s"
    )
    return Statement(st.settings, sql_text, {**st.params, "pool": int(part.plan.ef_search)})


def postmaster_of(data_directory: str) -> int:
    """The server's postmaster pid (its data directory's ``postmaster.pid``)."""
    return int((Path(data_directory) / "postmaster.pid").read_text().splitlines()[0])


async def build_graphs(
    conn: Conn, dim: int, buckets: list[str], kinds: list[str], *, rounds: int, workers: int
) -> list[dict[str, Any]]:
    """Build every bucket's graph of every kind ``rounds`` times, kinds alternated (the
    order reversed each round), each after dropping the previous one of its kind, with
    the product's build memory (``kb_graphs.set_build_memory``) and ``workers`` parallel
    maintenance workers: wall time, server CPU and size of each build. Autocommit ``conn``."""
    cur = await conn.execute("SHOW data_directory")
    row = await cur.fetchone()
    assert row is not None
    postmaster = postmaster_of(str(row[0]))
    await conn.execute("VACUUM ANALYZE kb_chunks")  # nothing left for autovacuum meanwhile
    out: list[dict[str, Any]] = []
    for r in range(rounds):
        order = list(kinds) if r % 2 == 0 else list(reversed(kinds))
        for bucket in buckets:
            for kind in order:
                name = index_name(kind, dim, bucket)
                await conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(name)))
                async with conn.transaction():
                    memory_kb = await set_build_memory(conn, dim, bucket, local=True)
                    await conn.execute("SET LOCAL statement_timeout = 0")
                    await conn.execute(
                        sql.SQL("SET LOCAL max_parallel_maintenance_workers = {}").format(sql.Literal(int(workers)))
                    )
                    load0, cpu0, t0 = os.getloadavg()[0], server_tree_cpu_s(postmaster), time.perf_counter()
                    await conn.execute(ddl(kind, dim, bucket))
                    wall, cpu = time.perf_counter() - t0, server_tree_cpu_s(postmaster) - cpu0
                cur = await conn.execute("SELECT pg_relation_size(%s::regclass)", (name,))
                size = await cur.fetchone()
                vectors = await conn.execute(
                    "SELECT count(*) FROM kb_chunks WHERE bucket = %s AND vector_dims(embedding) = %s", (bucket, dim)
                )
                count = await vectors.fetchone()
                out.append(
                    {
                        "round": r,
                        "kind": kind,
                        "bucket": bucket,
                        "vectors": int(count[0]) if count else 0,
                        "workers": workers,
                        "maintenance_work_mem_kb": memory_kb,
                        "wall_s": round(wall, 2),
                        "server_cpu_s": round(cpu, 2),
                        "index_mb": round(int(size[0]) / 2**20, 1) if size else None,
                        "load_avg_1m": [round(load0, 2), round(os.getloadavg()[0], 2)],
                    }
                )
                print(f"built {out[-1]}", flush=True)
    return out


def build_totals(builds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per kind: each round's wall and server CPU summed over the buckets, and the sizes."""
    totals: dict[str, Any] = {}
    for kind in sorted({b["kind"] for b in builds}):
        mine = [b for b in builds if b["kind"] == kind]
        rounds = sorted({b["round"] for b in mine})
        totals[kind] = {
            "wall_s_per_round": [round(sum(b["wall_s"] for b in mine if b["round"] == r), 2) for r in rounds],
            "server_cpu_s_per_round": [
                round(sum(b["server_cpu_s"] for b in mine if b["round"] == r), 2) for r in rounds
            ],
            "index_mb": round(sum(b["index_mb"] or 0 for b in mine if b["round"] == rounds[-1]), 1),
        }
    return totals


__all__ = ["GRAPH_KINDS", "build_graphs", "build_totals", "ddl", "halfvec_statement", "index_name", "postmaster_of"]
