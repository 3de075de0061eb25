"""One statement of a vector query on PostgreSQL: a bucket's HNSW graph, or an exact scan.

``kb_vectors`` decides how a query is split (one part per bucket graph, one exact part
for the rest) and merges the parts; this module turns one part into SQL and runs it.
A graph part names its bucket as a literal (``kb_graphs.bucket_literal``) beside the
dimension, so the planner proves the partial index's predicate from the statement
itself, whatever plan (custom or generic) the prepared statement gets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from storage.postgres.database import Conn, PostgresDatabase
from storage.postgres.kb_graphs import bucket_literal


@dataclass(frozen=True, slots=True)
class Plan:
    """How one part runs: exactly, or through its bucket's graph with this ``ef_search``."""

    exact: bool
    ef_search: int = 0
    scan_tuples: int = 0
    join: bool = True
    estimate: int = 0
    #: With iterative scans: how many chunks the index hands over to the exact re-rank.
    pool: int = 0
    #: With iterative scans: ``hnsw.scan_mem_multiplier`` (0: ``ScanSettings``'), sized
    #: so the walk's memory lets it reach ``scan_tuples`` (``kb_vector_walk``).
    scan_mem: int = 0


@dataclass(frozen=True, slots=True)
class ScanSettings:
    """pgvector's iterative-scan knobs (``VectorSearch``'s, turned by the benches)."""

    scan_order: str = "relaxed_order"
    scan_mem_multiplier: int = 1


@dataclass(frozen=True, slots=True)
class Part:
    """One statement: ``graph`` names the bucket whose HNSW graph answers it (``None``:
    scanned exactly); ``where`` are its conditions on ``kb_chunks c`` beside the
    dimension's, with ``params``."""

    plan: Plan
    where: tuple[str, ...] = ()
    params: tuple[tuple[str, Any], ...] = ()
    graph: str | None = None


@dataclass(frozen=True, slots=True)
class Statement:
    """A part's SQL: its ``SET LOCAL`` settings, then the query and its parameters."""

    settings: tuple[str, ...]
    sql: str
    params: dict[str, Any]


def statement(
    conn: Conn, part: Part, vec: npt.NDArray[np.float32], embed_model: str, limit: int, s: ScanSettings
) -> Statement:
    """The SQL of one part (``run_part`` runs it; tests ``EXPLAIN`` it)."""
    dim = int(vec.shape[0])
    plan = part.plan
    params: dict[str, Any] = {"q": vec, "model": embed_model, "limit": int(limit), **dict(part.params)}
    join = " JOIN kb_documents d ON d.id = c.doc_id AND d.embed_model = %(model)s" if plan.join else ""
    distance = f"c.embedding::vector({dim}) <=> %(q)s::vector({dim})"
    where = [f"vector_dims(c.embedding) = {dim}", *part.where]
    if part.graph is not None:
        where.append(f"c.bucket = {bucket_literal(conn, part.graph)}")
    cond = " AND ".join(where)
    if plan.exact:
        # Materialised: every vector in scope is scored once, counted, and the best are
        # picked with a top-N sort (no graph is asked).
        sql = (
            f"WITH s AS MATERIALIZED (SELECT c.id, 1 - ({distance}) AS sim FROM kb_chunks c{join} "
            f"WHERE {cond}) "
            "SELECT id, sim, (SELECT count(*) FROM s WHERE sim > 0) FROM s "
            "ORDER BY sim DESC, id LIMIT %(limit)s"
        )
        return Statement((), sql, params)
    settings = [f"hnsw.ef_search = {int(plan.ef_search)}"]
    if not plan.pool:
        sql = (
            f"SELECT c.id, 1 - ({distance}), %(estimate)s FROM kb_chunks c{join} "
            f"WHERE {cond} ORDER BY {distance} LIMIT %(limit)s"  # HNSW orders
        )
        return Statement(tuple(settings), sql, {**params, "estimate": plan.estimate})
    # Iterative (pgvector ≥ 0.8): the graph hands over ``pool`` chunks in scope, nearly
    # in order; the outer query ranks them by exact distance.
    order = "strict_order" if s.scan_order == "strict_order" else "relaxed_order"
    settings += [
        f"hnsw.iterative_scan = {order}",
        f"hnsw.max_scan_tuples = {int(plan.scan_tuples)}",
        f"hnsw.scan_mem_multiplier = {max(1, int(plan.scan_mem or s.scan_mem_multiplier))}",
    ]
    if part.where or join:
        # A hash join would drain the index scan (to ``max_scan_tuples``) before
        # ranking a row; a nested loop stops once the pool is full.
        settings += ["enable_hashjoin = off", "enable_mergejoin = off"]
    sql = (
        f"WITH s AS MATERIALIZED (SELECT c.id, {distance} AS dist FROM kb_chunks c{join} "
        f"WHERE {cond} ORDER BY {distance} LIMIT %(pool)s) "
        "SELECT id, 1 - dist, %(estimate)s FROM s ORDER BY dist, id LIMIT %(limit)s"
    )
    return Statement(tuple(settings), sql, {**params, "estimate": plan.estimate, "pool": int(plan.pool)})


async def run_part(
    db: PostgresDatabase, part: Part, vec: npt.NDArray[np.float32], embed_model: str, limit: int, s: ScanSettings
) -> list[tuple[Any, ...]]:
    """``(chunk id, cosine similarity, total)`` of the part's best ``limit`` chunks, best
    first (ties by chunk id). ``total``: the chunks in scope with a positive similarity
    when exact, the part's estimated size when a graph answered."""
    async with db.reading() as conn, conn.transaction():
        st = statement(conn, part, vec, embed_model, limit, s)
        for setting in st.settings:
            await conn.execute(f"SET LOCAL {setting}")  # type: ignore[arg-type]
        cur = await conn.execute(st.sql, st.params)  # type: ignore[arg-type]
        return list(await cur.fetchall())


__all__ = ["Part", "Plan", "ScanSettings", "Statement", "run_part", "statement"]
