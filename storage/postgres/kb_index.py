"""``PostgresKBIndex``: the knowledge base's documents, chunks, full-text index and
vectors on PostgreSQL (``storage.interfaces.KBIndex``), with pgvector's search as
``KBVectorSearch`` (``vector_candidates``).

The logic is ``storage.stores.kb_index`` (written once); this is what PostgreSQL does
its own way:

* Full text: a generated ``tsvector`` column with a GIN index (``migrations``), ranked
  with FTS5's BM25 (``kb_text``), so both engines give the same kind of scores.
* Vectors: pgvector's ``vector`` column. The service's dense side asks
  ``vector_candidates`` (``KBVectorSearch``; ``kb_vectors``): answered inside PostgreSQL,
  exactly for small scopes and through HNSW graphs (cosine) for large ones — one
  partial index per bucket and dimension (``kb_graphs``), made once a bucket holds more
  than ``exact_scope_vectors`` vectors (pgvector indexes at most 2,000 dimensions;
  larger ones are scanned exactly), concurrently, after the write that took it there
  has committed (``kb_graph_builds``). Each chunk carries its document's bucket for them.
  ``iter_vectors`` stays for tools that want every vector (nothing in the service loads
  them into memory on this engine).
* Chunk ids come from a sequence (several replicas may ingest at once); chunks are
  written with ``COPY``.
* Filter conditions depend on a field's type (case folding of TEXT), so the bucket's
  schema is read, and cached, for filtered scopes.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import psycopg

from storage.errors import StorageUnavailable
from storage.kb_records import KBChunkWrite, KBDocumentWrite, KBRanked, KBScope, KBVectorRows, KBVectorWrite
from storage.postgres import kb_buckets
from storage.postgres.database import PostgresDatabase
from storage.postgres.dialect import PostgresSql, PostgresTx
from storage.postgres.kb_bulk_load import BulkLoad
from storage.postgres.kb_chunk_sql import CHUNK_TYPES, COPY_CHUNKS, IN_INDEX_ORDER, POST_CHUNKS, clean, token_count
from storage.postgres.kb_filters_sql import POSTGRES_FILTERS
from storage.postgres.kb_graph_builds import GraphUpkeep
from storage.postgres.kb_text import TextRanker
from storage.postgres.kb_vectors import EXACT_SCOPE_VECTORS, VectorSearch
from storage.postgres.text_schema import POSTINGS_DEFERRED_SETTING
from storage.sql import Tx
from storage.stores.kb_index import SqlKBIndex

log = logging.getLogger("agentchat.storage")

#: During ``bulk_load``, a transaction that writes chunks posts them itself, set-wise
#: (``_post_chunks``), and a first load builds the postings' B-tree once at its end;
#: ``bench/pg_bulk_postings.py`` turns this off to measure the per-statement trigger.
BULK_POSTINGS = True


class PostgresKBIndex(SqlKBIndex):
    """The KB index on one ``PostgresDatabase``; built by ``open_postgres_storage``."""

    vector_column = "embedding"
    unreadable_vector_sql = "c.embedding IS NULL OR vector_dims(c.embedding) <> ?"
    schema_in_filters = True
    #: Three batch writes at once (``KBIndex.writes_in_flight``), each on a pooled
    #: connection of its own: a write is the server's CPU (rows, tsvectors, postings)
    #: while the client prepares the next batch, and with two the rows phase of a bulk
    #: load left CPU unused. ``bench/ingest_ab.py`` at 40k chunks, three alternated
    #: pairs at load 6-7.6: rows 24.4 / 23.1 / 25.0 s -> 19.9 / 22.0 / 22.4 s, server
    #: CPU per chunk unchanged (``bench/results/ingest_pg_s42_writes3_40k.json``).
    writes_in_flight = 3

    def __init__(self, db: PostgresDatabase, *, exact_scope_vectors: int = EXACT_SCOPE_VECTORS) -> None:
        super().__init__(
            PostgresSql(db), buckets=kb_buckets, filters=POSTGRES_FILTERS, text=TextRanker(db), location=db.location
        )
        self._db = db
        self._vectors = VectorSearch(db, self._schema, exact_scope_vectors=exact_scope_vectors)
        #: The buckets' HNSW graphs (``kb_graphs``): made past ``exact_scope_vectors``,
        #: in the background (``kb_graph_builds``).
        self._graphs = GraphUpkeep(db, lambda: self.exact_scope_vectors, changed=self._stats_changed)
        #: ``bulk_load``: the indexes it defers to its end, and the upkeep there (``kb_bulk_load``).
        self._loading = BulkLoad(db, self._graphs, build_graphs=self.ensure_bucket_graphs, changed=self._stats_changed)

    @property
    def exact_scope_vectors(self) -> int:
        """Scopes of at most this many vectors are searched exactly, larger ones through
        their bucket's HNSW graph (``kb_vectors``), which a bucket gets once it holds more
        vectors than this (``kb_graphs``); 0 gives every bucket a graph from its first
        vector and sends every search to the graphs."""
        return self._vectors.exact_scope_vectors

    @exact_scope_vectors.setter
    def exact_scope_vectors(self, value: int) -> None:
        self._vectors.exact_scope_vectors = max(0, int(value))

    def _stats_changed(self) -> None:
        self._text.changed()
        self._vectors.changed()

    # ------------------------------------------------------------------ writes
    async def _chunk_ids(self, tx: Tx, count: int) -> list[int]:
        """From the sequence: several replicas may ingest at once."""
        rows = await tx.fetchall("SELECT nextval('kb_chunks_id_seq') FROM generate_series(1, ?)", (count,))
        return sorted(int(r[0]) for r in rows)

    def _document_row(self, d: KBDocumentWrite, bucket: str, now: str) -> tuple[Any, ...]:
        return (
            d.id, bucket, clean(d.title) or "", clean(d.source) or "", clean(d.url), d.content_hash, d.embed_model,
            d.embed_dim, orjson.dumps(d.metadata, default=str).decode().replace("\\u0000", " "),
            d.chars, len(d.chunks), now, now, clean(d.origin), d.file_stamp, d.chunk_rules,
        )  # fmt: skip

    def _chunk_row(
        self,
        chunk_id: int,
        d: KBDocumentWrite,
        title: str,
        c: KBChunkWrite,
        vector: npt.NDArray[np.float32] | None,
        bucket: str,
    ) -> tuple[Any, ...]:
        heading, text = clean(c.heading) or "", clean(c.text) or ""
        vec = np.asarray(vector, dtype=np.float32) if vector is not None else None
        return (
            chunk_id, d.id, c.position, title, heading, text, token_count(title, heading, text), vec, c.page,
            c.page_end, bucket,
        )  # fmt: skip

    async def _write_chunks(self, tx: Tx, rows: Sequence[tuple[Any, ...]]) -> None:
        """``COPY`` the rows. Outside a bulk load the statement trigger posts them; during
        one this transaction posts them itself, after the copy, in one sorted statement
        (``POST_CHUNKS``) — still before it commits, so no chunk is ever without its
        postings, whatever happens to the load."""
        assert isinstance(tx, PostgresTx)
        conn = tx.connection
        own_postings = self._loading.active and BULK_POSTINGS
        if own_postings:
            await conn.execute("SELECT set_config(%s, 'on', true)", (POSTINGS_DEFERRED_SETTING,))
        async with conn.cursor() as cur, cur.copy(COPY_CHUNKS) as copy:
            copy.set_types(list(CHUNK_TYPES))
            for r in rows:
                await copy.write_row(r)
        if own_postings:
            await conn.execute("SELECT set_config(%s, 'off', true)", (POSTINGS_DEFERRED_SETTING,))
            order = "" if self._loading.postings_index_deferred else IN_INDEX_ORDER
            await conn.execute(POST_CHUNKS + order, ([int(r[0]) for r in rows],))  # type: ignore[arg-type]

    async def _vectors_written(self, tx: Tx, dims: Sequence[int], buckets: Sequence[str] | None) -> None:
        """Inside the write's transaction only a bulk load's note of the graphs to build
        at its end; any other write's graph is queued after its commit (``_after_write``)."""
        assert isinstance(tx, PostgresTx)
        if self._loading.active and buckets is not None:
            for bucket in buckets:
                for dim in dims:
                    await self._graphs.written(tx.connection, dim, bucket)

    async def write_documents(
        self, bucket: str, fields: Mapping[str, str], docs: Sequence[KBDocumentWrite]
    ) -> list[list[int]]:
        ids = await super().write_documents(bucket, fields, docs)
        dims = sorted({int(d.embed_dim or d.vectors.shape[1]) for d in docs if d.vectors is not None})
        await self._after_write(dims, [bucket])
        return ids

    async def store_vectors(self, embed_model: str, embed_dim: int, docs: Sequence[KBVectorWrite]) -> list[str]:
        written = await super().store_vectors(embed_model, embed_dim, docs)
        if written:  # vectors attached to stored chunks: any bucket may have grown
            await self._after_write([embed_dim], None)
        return written

    async def _after_write(self, dims: Sequence[int], buckets: Sequence[str] | None) -> None:
        """After the commit: queue the graph a write made due (built in the background,
        never inside the write). The write has committed whatever happens here, so a
        failure is logged, not raised: the bucket is searched exactly meanwhile, and the
        next write into it (or the next open) asks again."""
        if self._loading.active or not dims:
            return
        try:
            await self._graphs.after_write(dims, buckets)
        except (StorageUnavailable, psycopg.Error) as exc:
            log.warning(
                "knowledge base: could not check the bucket graphs after a write: %s: %s", type(exc).__name__, exc
            )

    async def ensure_bucket_graphs(self, buckets: Sequence[str] | None = None) -> list[tuple[int, str]]:
        """Build the graph of every bucket (of ``buckets``) past the threshold that has
        none, concurrently, and wait for them: at a bulk load's end (the repair at open
        is ``start_graph_repair``). The graphs built here."""
        try:
            return await self._graphs.build_now(buckets)
        finally:
            self._stats_changed()

    def start_graph_repair(self, connect_timeout: int) -> None:
        """At open: build, in the background, every graph a bucket past the threshold
        lacks or has invalid (``GraphUpkeep.repair``); ``stop_graph_repair`` at close."""
        self._graphs.start_repair(connect_timeout)

    async def graph_repair(self) -> list[tuple[int, str]]:
        """The graphs the repair at open built, once it is done (``[]``: none ran)."""
        built = await self._graphs.repaired()
        if built:
            self._stats_changed()
        return built

    async def graph_builds_done(self) -> None:
        """Once every graph build this process queued has run (benches and tests)."""
        await self._graphs.idle()

    async def stop_graph_repair(self) -> None:
        """At close: the repair and every graph build, cancelled on the server too."""
        await self._graphs.stop()

    async def delete_bucket(self, name: str) -> list[str] | None:
        """The bucket's graphs go with it (after its rows, in a transaction of their own:
        a graph left by a crash in between indexes no row, and is taken up again if a
        bucket of that name comes back). Dropped concurrently in the background
        (``kb_graph_builds``): the delete waits for no build under way, and writers are
        not held."""
        gone = await super().delete_bucket(name)
        if gone is not None:
            await self._graphs.drop(name)
            self._stats_changed()
        return gone

    @contextlib.asynccontextmanager
    async def bulk_load(self) -> AsyncIterator[None]:
        """Inserting into an HNSW graph row by row costs milliseconds per vector (it
        capped ingest near 340 chunks/s); building it once over the loaded rows is what
        pgvector recommends for initial loads. So a bucket's graph that did not exist
        when the load began is built at its end if the bucket is then past the threshold
        (even when the load fails half-way: the rows that committed need it); an
        existing one is maintained as usual. Full-text
        postings likewise: each batch posts its own chunks in one sorted statement
        (``_write_chunks``), and a load into an empty knowledge base builds their B-tree
        once at its end, and so does its full-text GIN index."""
        async with self._loading.open(own_postings=BULK_POSTINGS):
            yield

    # ------------------------------------------------------------------ vectors
    async def iter_vectors(self, embed_model: str, dim: int) -> AsyncIterator[KBVectorRows]:
        sql = (
            "SELECT c.id, c.doc_id, d.bucket, c.embedding FROM kb_chunks c JOIN kb_documents d ON d.id = c.doc_id "
            "WHERE d.embed_model = %s AND d.embed_dim = %s ORDER BY c.doc_id, c.position"
        )
        current: str | None = None
        bucket_of = ""
        ids: list[int] = []
        vecs: list[npt.NDArray[np.float32]] = []
        unreadable = 0
        # A server-side cursor (it needs a transaction): 1M vectors never sit in memory twice.
        async with (
            self._db.reading() as conn,
            conn.transaction(),
            conn.cursor(name="kb_vectors", binary=True) as cur,
        ):
            cur.itersize = 5000
            await cur.execute(sql, (embed_model, dim))
            async for cid, doc_id, bucket, vector in cur:
                if doc_id != current:
                    if current is not None and (ids or unreadable):
                        yield _vector_rows(current, bucket_of, ids, vecs, dim, unreadable)
                    current, ids, vecs, bucket_of, unreadable = doc_id, [], [], bucket, 0
                if vector is None:
                    unreadable += 1  # counted, as on SQLite (``KBVectorRows.unreadable``)
                    continue
                arr = vector.to_numpy() if hasattr(vector, "to_numpy") else np.asarray(vector, np.float32)
                if arr.shape[0] != dim:
                    unreadable += 1
                    continue
                ids.append(int(cid))
                vecs.append(arr)
        if current is not None and (ids or unreadable):
            yield _vector_rows(current, bucket_of, ids, vecs, dim, unreadable)

    async def unreadable_vectors(
        self, embed_model: str, dim: int, doc_ids: Sequence[str] | None = None
    ) -> dict[str, int]:
        """Per document of ``embed_model`` at ``dim`` (only ``doc_ids``' when given), its
        chunks whose stored vector is none or of another width: the column is an unsized
        ``vector``, so a copy of a torn SQLite file (``agentchat migrate-db``) or an
        embedder answering another width than it said stores one, and the search leaves
        it out by its own condition (``vector_dims``). One scan of those documents'
        chunks (~0.07 s per 100,000 chunks of 384 dimensions, warm, at load 1.1-3.6; at
        1,000,000 chunks of 384 dimensions with 640 characters of text each, a 1.95 GB
        heap, 1.7-2.0 s warm at load 9-10; cold, the whole heap is read): asked in the
        background after a load (``DatabaseDense.load``: neither a replica's start nor
        ``agentchat ingest`` waits for it) and by the back-fill pass, never by a search."""
        only = "" if doc_ids is None else "AND d.id = ANY(?) "
        rows = await self._sql.fetchall(
            "SELECT c.doc_id, count(*) FROM kb_chunks c JOIN kb_documents d ON d.id = c.doc_id "
            f"WHERE d.embed_model = ? AND d.embed_dim = ? {only}AND ({self.unreadable_vector_sql}) GROUP BY c.doc_id",
            (embed_model, int(dim), *(() if doc_ids is None else (list(doc_ids),)), int(dim)),
        )
        return {str(doc_id): int(n) for doc_id, n in rows}

    async def vector_candidates(
        self, query: npt.NDArray[np.float32], embed_model: str, scope: KBScope, limit: int
    ) -> KBRanked:
        """The ``limit`` chunks nearest to ``query`` by cosine among the vectors of
        ``embed_model`` within ``scope`` (scores: cosine similarity, best first): exact
        for small scopes, through the HNSW index for large ones (``kb_vectors``)."""
        return await self._vectors.candidates(query, embed_model, scope, limit)

    async def cosines(
        self, chunk_ids: Sequence[int], query: npt.NDArray[np.float32], embed_model: str
    ) -> dict[int, float]:
        return await self._vectors.cosines(chunk_ids, query, embed_model)

    async def count_vectors(self, embed_model: str, dim: int) -> int:
        return await self._vectors.count_vectors(embed_model, dim)

    async def vector_index_status(self, *, kept_counts: bool = False) -> dict[str, Any]:
        """``VectorSearch.describe`` (the server's view of every replica's graphs) and
        what this process builds or failed to build (``GraphUpkeep.status``). The
        generation first: its counts are summed over every document again only when the
        knowledge base changed since they were - and never with ``kept_counts``
        (``/readyz``, which asks every few seconds and must not wait for a count)."""
        generation = await self.kb_generation()
        described = await self._vectors.describe(generation, kept_counts=kept_counts)
        return {**described, **self._graphs.status()}

    @property
    def graph_serial_builds(self) -> int:
        """``GraphBuildQueue.serial_builds``: builds run serially for want of shared memory."""
        return self._graphs.serial_builds

    async def has_vectors(self, embed_model: str, dim: int) -> bool:
        return await self._vectors.has_vectors(embed_model, dim)


def _vector_rows(
    doc_id: str, bucket: str, ids: list[int], vecs: list[npt.NDArray[np.float32]], dim: int, unreadable: int
) -> KBVectorRows:
    matrix = np.vstack(vecs).astype(np.float32) if vecs else np.zeros((0, dim), np.float32)
    return KBVectorRows(doc_id, bucket, ids, matrix, unreadable)


__all__ = ["PostgresKBIndex"]
