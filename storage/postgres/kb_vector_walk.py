"""How far an iterative HNSW walk goes on PostgreSQL (pgvector ≥ 0.8), and the memory
the walk needs to get that far (``kb_vectors.VectorSearch.graph_plan`` uses it).

Why a rule of its own: two limits end pgvector's iterative scan, and the plan must set
both or the one it forgets decides.

* **The walk grows with the graph.** A whole bucket's graph past ``LARGE_GRAPH_VECTORS``
  hands over a pool of ``LARGE_GRAPH_POOL_FACTOR`` x ``limit`` chunks per
  ``LARGE_GRAPH_UNIT`` vectors (at least one unit, at most ``LARGE_GRAPH_MAX_POOL``),
  and may visit ``WALK_TUPLES_PER_POOL`` index tuples per chunk of the pool. A fixed
  pool walked a fixed share of a bigger graph: on the 1M bench (pgvector 0.8.5, m 16 /
  ef_construction 64, ``bench/pg_recall.py``) a pool of 2,000 within 20,000 tuples
  agreed 1.0 with the exact top 10 on the 250k-vector buckets but 0.5 on the 500k one,
  whose queries sit in a flat neighbourhood (exact cosine top-1 / 10th / 100th 0.41 /
  0.39 / 0.36); 50–100k tuples and a pool of 3,500–5,000 reached 0.97 there
  (``bench/pg_recall_walk.py``). Past the cap a bucket's recall falls with its size: the
  10M plan splits such buckets (docs/scaling.md). A scope inside such a graph (a
  filter) needs a pool grown the same way (``POOL_FACTOR`` x ``limit`` per unit), over
  its share of the graph, so it is walked further or, when the walk would visit more
  tuples than the scope holds, scanned exactly: with the fixed pool of 1,000 the 1M
  bench's invoice filters (7.6 % of a 500k graph) went through the graph and agreed
  0.88, at the exact scan's latency; its datasheet filters (12.5 % of 250k) agreed 1.0.
* **The scan's memory follows its tuples.** pgvector stops walking once the scan has
  allocated ``work_mem`` x ``hnsw.scan_mem_multiplier`` and hands over what it has
  seen unvisited, whatever ``hnsw.max_scan_tuples`` says: at pgvector's multiplier of 1
  (4 MB) a walk allowed 100,000 tuples agreed 0.515, as one allowed 20,000; at x4 it
  reached 0.97. The multiplier is sized from the tuple cap (``SCAN_BYTES_PER_TUPLE``
  each, with margin: x4 of 4 MB was enough for 100,000) over the server's ``work_mem``,
  for every iterative plan (a filtered scope's walk too).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: A whole bucket's graph past this many vectors is walked iteratively to a pool wider
#: than ``hnsw.ef_search`` can (1,000).
LARGE_GRAPH_VECTORS = 100_000
#: The pool, in chunks asked for, per ``LARGE_GRAPH_UNIT`` vectors of the bucket.
LARGE_GRAPH_POOL_FACTOR = 20
LARGE_GRAPH_UNIT = 250_000
#: The widest pool (and so the longest walk) a query takes on one graph.
LARGE_GRAPH_MAX_POOL = 10_000
#: Index tuples a whole bucket's walk may visit per chunk of its pool.
WALK_TUPLES_PER_POOL = 20
#: Scan memory per index tuple the walk may visit (bytes, with margin).
SCAN_BYTES_PER_TUPLE = 256
#: pgvector's range of ``hnsw.scan_mem_multiplier``.
MAX_SCAN_MEM_MULTIPLIER = 1000


@dataclass(slots=True)
class WalkRule:
    """The rule's numbers (the module's constants; ``bench/pg_recall.py`` turns them to
    compare rules on one server). ``unit`` 0: the pool does not grow with the graph;
    ``bytes_per_tuple`` 0: the scan's memory is the configured multiplier alone."""

    pool_factor: int = LARGE_GRAPH_POOL_FACTOR
    unit: int = LARGE_GRAPH_UNIT
    max_pool: int = LARGE_GRAPH_MAX_POOL
    tuples_per_pool: int = WALK_TUPLES_PER_POOL
    bytes_per_tuple: int = SCAN_BYTES_PER_TUPLE
    #: A scope inside a big graph (a filter, a list of documents): its pool grows with
    #: the graph past one ``unit`` too (``scoped_pool``), over its share (``graph_plan``).
    scoped: bool = True

    def units(self, total: int) -> float:
        """How many ``unit``s a graph of ``total`` vectors is (at least one)."""
        return max(1.0, total / self.unit) if self.unit > 0 else 1.0

    def large_pool(self, total: int, limit: int) -> int:
        """The pool of a whole bucket of ``total`` vectors (past ``LARGE_GRAPH_VECTORS``)."""
        pool = math.ceil(self.pool_factor * limit * self.units(total))
        return max(limit, min(max(self.max_pool, limit), pool))

    def scoped_pool(self, pool: int, total: int) -> int:
        """A scope's ``pool`` in a graph of ``total`` vectors, grown with the graph."""
        if not self.scoped:
            return pool
        return max(pool, min(self.max_pool, math.ceil(pool * self.units(total))))

    def large_tuples(self, pool: int, floor: int) -> int:
        """The index tuples a whole bucket's walk to ``pool`` may visit."""
        return max(floor, self.tuples_per_pool * pool)

    def mem_multiplier(self, tuples: int, work_mem_bytes: int, floor: int) -> int:
        """``hnsw.scan_mem_multiplier`` for a walk of ``tuples`` under ``work_mem``."""
        floor = max(1, floor)
        if self.bytes_per_tuple <= 0 or work_mem_bytes <= 0:
            return min(MAX_SCAN_MEM_MULTIPLIER, floor)
        needed = math.ceil(tuples * self.bytes_per_tuple / work_mem_bytes)
        return min(MAX_SCAN_MEM_MULTIPLIER, max(floor, needed))


__all__ = [
    "LARGE_GRAPH_MAX_POOL",
    "LARGE_GRAPH_POOL_FACTOR",
    "LARGE_GRAPH_UNIT",
    "LARGE_GRAPH_VECTORS",
    "MAX_SCAN_MEM_MULTIPLIER",
    "SCAN_BYTES_PER_TUPLE",
    "WALK_TUPLES_PER_POOL",
    "WalkRule",
]
