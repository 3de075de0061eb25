"""How a vector query on PostgreSQL is split into statements (``kb_vectors``).

Every bucket past the exact threshold has its own HNSW graph (``kb_graphs``). A query
is one statement per bucket of its scope whose graph answers it (the scope's share of
that bucket large enough for a walk to pay), and one exact scan of everything else in
scope; ``VectorSearch.candidates`` merges them by cosine, then chunk id. A scope of
several buckets arrives as a list of documents (``knowledge.search``): their buckets are
read from ``kb_documents`` (one ``GROUP BY`` over the listed ids). A scope of every
bucket is one part per graph the counts know (refreshed when this process writes and at
most ``STATS_TTL_S`` old) and an exact scan of every other bucket in ``kb_buckets``, read
by that statement: a bucket another replica created in the meantime is searched at once,
exactly until the counts know its graph. A scope of every bucket but the hidden ones
(``KBScope.hidden_prefix``) has no part for a hidden bucket's graph, and its exact part
leaves the hidden buckets out by each chunk's own ``bucket``.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from storage.kb_records import KBScope
from storage.postgres.database import PostgresDatabase
from storage.postgres.kb_filters_sql import scope_sql
from storage.postgres.kb_graphs import HNSW_MAX_DIM, bucket_key
from storage.postgres.kb_text import named_params
from storage.postgres.kb_vector_scan import Part, Plan


@dataclass(slots=True)
class VectorCounts:
    """Documents and vectors per (embedder, dimension) and bucket."""

    #: (embed_model, dim) -> bucket -> (documents, vectors)
    by_model: dict[tuple[str, int], dict[str, tuple[int, int]]] = field(default_factory=dict)
    #: (dim, bucket key) of the buckets' HNSW graphs (``kb_graphs``).
    graphs: set[tuple[int, str]] = field(default_factory=set)

    def buckets(self, model: str, dim: int) -> list[str]:
        return sorted(b for b, (_d, v) in self.by_model.get((model, dim), {}).items() if v)

    def has_graph(self, dim: int, bucket: str) -> bool:
        return (dim, bucket_key(bucket)) in self.graphs

    def models(self, dim: int) -> set[str]:
        return {m for (m, d), buckets in self.by_model.items() if d == dim and any(v for _, v in buckets.values())}

    def vectors(self, model: str, dim: int, bucket: str | None = None) -> int:
        buckets = self.by_model.get((model, dim), {})
        if bucket is not None:
            return buckets.get(bucket, (0, 0))[1]
        return sum(v for _, v in buckets.values())

    def per_document(self, model: str, dim: int) -> float:
        buckets = self.by_model.get((model, dim), {})
        docs = sum(d for d, _ in buckets.values())
        return sum(v for _, v in buckets.values()) / docs if docs else 1.0


Schema = dict[str, str] | None
SchemaOf = Callable[[str | None], Awaitable[Schema]]


class VectorSearch(Protocol):
    """What the split needs of ``kb_vectors.VectorSearch``."""

    exact_scope_vectors: int
    schema_of: SchemaOf

    @property
    def db(self) -> PostgresDatabase: ...

    async def counts_for(self, model: str, dim: int) -> VectorCounts: ...

    async def estimate(self, scope: KBScope, counts: VectorCounts, model: str, dim: int) -> int: ...

    async def graph_plan(self, estimate: int, total: int, limit: int, *, join: bool, whole: bool = False) -> Plan: ...


async def split(vs: VectorSearch, scope: KBScope, model: str, dim: int, limit: int) -> list[Part]:
    """The statements a query of ``scope`` runs: one per bucket whose graph answers
    (its share of the scope large enough), and one exact scan of the rest."""
    counts = await vs.counts_for(model, dim)
    join = counts.models(dim) != {model}
    graphs = dim <= HNSW_MAX_DIM and any(d == dim for d, _ in counts.graphs)
    by_bucket: dict[str, int] = {}  # bucket with a graph -> the scope's vectors in it
    if not graphs:
        pass
    elif scope.bucket is not None:
        by_bucket[scope.bucket] = await vs.estimate(scope, counts, model, dim)
    elif scope.doc_ids is not None:
        rows = await vs.db.fetchall(
            "SELECT bucket, coalesce(sum(chunk_count), 0) FROM kb_documents WHERE id = ANY(%s::text[]) GROUP BY bucket",
            (list(scope.doc_ids),),
        )
        by_bucket.update((str(b), int(v)) for b, v in rows)
    else:
        by_bucket.update((b, counts.vectors(model, dim, b)) for b in counts.buckets(model, dim) if _shown(scope, b))
    parts: list[Part] = []
    for bucket, estimate in sorted(by_bucket.items()):
        total = counts.vectors(model, dim, bucket)
        if not counts.has_graph(dim, bucket) or total <= vs.exact_scope_vectors:
            continue
        whole = scope.filter is None and scope.doc_id is None and scope.doc_ids is None
        plan = await vs.graph_plan(estimate, total, limit, join=join, whole=whole)
        if not plan.exact:
            where, params = await _conditions(vs, KBScope(bucket, scope.filter, scope.doc_id, scope.doc_ids))
            parts.append(Part(plan, where, params, graph=bucket))
    served = [p.graph for p in parts if p.graph is not None]
    rest = await _rest(vs, scope, counts, model, dim, served)
    if rest is not None:
        where, params, estimate = rest
        parts.append(Part(Plan(True, join=join, estimate=estimate), where, params))
    return parts


async def _conditions(vs: VectorSearch, scope: KBScope) -> tuple[tuple[str, ...], tuple[tuple[str, Any], ...]]:
    """The scope's conditions on ``kb_chunks c`` (the bucket aside: a graph part
    names it as a literal, an exact part through its documents)."""
    params: dict[str, Any] = {}
    if scope.doc_ids is not None:
        params["doc_ids"] = list(scope.doc_ids)
        return ("c.doc_id = ANY(%(doc_ids)s::text[])",), tuple(params.items())
    if scope.filter is None and scope.doc_id is None:
        return (), ()
    inner, inner_params = scope_sql(scope, await vs.schema_of(scope.bucket))
    return ("c.doc_id IN (" + named_params(inner, inner_params, params) + ")",), tuple(params.items())


async def _rest(
    vs: VectorSearch, scope: KBScope, counts: VectorCounts, model: str, dim: int, served: list[str]
) -> tuple[tuple[str, ...], tuple[tuple[str, Any], ...], int] | None:
    """The exact part: what no graph part covers (``None``: nothing)."""
    if scope.bucket is not None:
        if served:
            return None
        if scope.doc_ids is not None:
            where, params = await _conditions(vs, scope)
        else:
            inner, inner_params = scope_sql(
                KBScope(scope.bucket, scope.filter, scope.doc_id), await vs.schema_of(scope.bucket)
            )
            named: dict[str, Any] = {}
            where = ("c.doc_id IN (" + named_params(inner, inner_params, named) + ")",)
            params = tuple(named.items())
        return where, params, await vs.estimate(scope, counts, model, dim)
    if scope.doc_ids is not None:
        where, params = await _conditions(vs, scope)
        if served:
            where = (*where, "c.bucket <> ALL(%(served)s::text[])")
            params = (*params, ("served", served))
        return where, params, math.ceil(len(scope.doc_ids) * counts.per_document(model, dim))
    rest = [b for b in counts.buckets(model, dim) if b not in served and _shown(scope, b)]
    estimate = sum(counts.vectors(model, dim, b) for b in rest)
    # Every bucket but the hidden ones (``KBScope.hidden_prefix``: the conversations'
    # private buckets), by the bucket each chunk stores, in the statement itself: a
    # private bucket another replica made since any list or count was read is out too.
    hidden: tuple[tuple[str, ...], tuple[tuple[str, Any], ...]] = ((), ())
    if scope.hidden_prefix:
        hidden = (
            (f"substr(c.bucket, 1, {len(scope.hidden_prefix)}) <> %(hidden_prefix)s",),
            (("hidden_prefix", scope.hidden_prefix),),
        )
    if not served:
        return hidden[0], hidden[1], estimate
    # Every bucket: those without a graph part, through their documents (the chunks'
    # doc_id index). The buckets are read from ``kb_buckets`` by the statement itself,
    # not from the counts: a bucket another replica created a moment ago is searched at
    # once (exactly, until the counts know its graph), never left out for STATS_TTL_S.
    # The documents are collected first (``ARRAY(...)``, run once) and the chunks looked
    # up by them: as ``IN (subquery)`` the planner, guessing a third of the documents,
    # scanned every chunk and probed each one's document (at 1M chunks, every bucket
    # with a graph and so no document to find: seconds of a parallel scan per search).
    where = (
        "c.doc_id = ANY(ARRAY(SELECT d2.id FROM kb_documents d2 WHERE d2.bucket IN "
        "(SELECT b.name FROM kb_buckets b WHERE b.name <> ALL(%(served)s::text[]))))",
        *hidden[0],
    )
    return where, (("served", served), *hidden[1]), estimate


def _shown(scope: KBScope, bucket: str) -> bool:
    """Whether a bucket is in a scope of every bucket (not one of its hidden ones)."""
    return not (scope.hidden_prefix and bucket.startswith(scope.hidden_prefix))


__all__ = ["Schema", "SchemaOf", "VectorCounts", "VectorSearch", "split"]
