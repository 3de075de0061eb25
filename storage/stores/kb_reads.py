"""The reading side of the portable knowledge-base index: buckets and their cached
schemas, document states and listings, scopes, full-text candidates, chunk rows and
the documents still to embed (``storage.interfaces.KBIndex``).

Why apart: the reads are half of the index and change for other reasons than its
writes (a listing's page, a hydrated row's fields); ``storage.stores.kb_index`` builds
the writes on this class, and each engine's ``kb_index`` on that one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
import orjson

from storage.kb_filters_sql import FilterSql
from storage.kb_records import (
    KBBucketRecord,
    KBChunkRow,
    KBChunkText,
    KBCounts,
    KBDocState,
    KBDocumentListing,
    KBDocumentRecord,
    KBFileDocument,
    KBRanked,
    KBScope,
    KBTextTuning,
    KBUnembedded,
)
from storage.sql import SqlEngine
from storage.stores.kb_engine_parts import BucketTables, TextSearch, parts


class KBReads:
    """The reads of the KB index on one database, with the state they share with the
    writes (the engine's parts, the cached bucket schemas)."""

    #: Whether the engine's filter conditions depend on a field's type (then the
    #: bucket's schema is read, and cached, for every filtered scope).
    schema_in_filters: ClassVar[bool] = False
    #: A condition on a chunk ``c``: its stored vector cannot be read at ``?`` dimensions
    #: (none, or another width) - what ``iter_vectors`` counts as unreadable.
    unreadable_vector_sql: ClassVar[str]

    def __init__(
        self, sql: SqlEngine, *, buckets: BucketTables, filters: FilterSql, text: TextSearch, location: str
    ) -> None:
        self._sql = sql
        self._buckets = buckets
        self._filters = filters
        self._text = text
        self._location = location
        self._schemas: dict[str, dict[str, str]] = {}
        #: Counts the changes of ``_schemas`` made by this process's bucket writes (and
        #: its forgetting them): a schema read that began before one may not hold it and
        #: does not overwrite the cache then.
        self._schema_changes = 0

    @property
    def location(self) -> str:
        return self._location

    def _stats_changed(self) -> None:
        self._text.changed()

    async def _schema(self, bucket: str | None) -> dict[str, str] | None:
        """The bucket's typed fields, cached (fields are only ever added, never retyped)."""
        if bucket is None:
            return None
        known = self._schemas.get(bucket)
        if known is None:
            began = self._schema_changes
            row = await self._sql.fetchone("SELECT schema FROM kb_buckets WHERE name = ?", (bucket,))
            known = orjson.loads(row[0]) if row else {}
            if self._schema_changes == began:
                self._schemas[bucket] = known
        return known

    async def _filter_schema(self, scope: KBScope) -> dict[str, str] | None:
        if not self.schema_in_filters or scope.filter is None:
            return None
        return await self._schema(scope.bucket)

    # ------------------------------------------------------------------ buckets
    async def bucket_schemas(self) -> dict[str, dict[str, str]]:
        began = self._schema_changes
        rows = await self._sql.fetchall("SELECT name, schema FROM kb_buckets")
        out = {name: orjson.loads(schema) for name, schema in rows}
        if self._schema_changes == began:  # else the cache stays as the change left it
            self._schemas = {k: dict(v) for k, v in out.items()}
        return out

    async def list_buckets(self) -> list[KBBucketRecord]:
        rows = await self._sql.fetchall(
            "SELECT b.name, b.schema, b.created_at, count(d.id), coalesce(sum(d.chunk_count), 0) "
            "FROM kb_buckets b LEFT JOIN kb_documents d ON d.bucket = b.name "
            "GROUP BY b.name ORDER BY b.name"
        )
        return [KBBucketRecord(n, orjson.loads(s), int(dc), int(cc), c) for n, s, c, dc, cc in rows]

    # ------------------------------------------------------------------ documents
    async def document_states(self, doc_ids: Sequence[str]) -> dict[str, KBDocState]:
        out: dict[str, KBDocState] = {}
        for part in parts(doc_ids):
            rows = await self._sql.fetchall(
                "SELECT id, content_hash, embed_model, embed_dim, bucket, file_stamp, chunk_rules, origin "
                f"FROM kb_documents WHERE id IN ({self._sql.dialect.marks(len(part))})",
                part,
            )
            for doc_id, h, model, dim, b, stamp, rules, origin in rows:
                out[doc_id] = KBDocState(h, model, dim, b, stamp, None if rules is None else int(rules), origin)
        return out

    async def source_documents(self, bucket: str, origin: str, *, prefix: bool) -> list[tuple[str, str]]:
        if prefix and origin:
            # A byte-wise range on the (bucket, origin) index instead of LIKE (no escaping, no scan).
            upper = origin[:-1] + chr(ord(origin[-1]) + 1)
            sql = "SELECT id, origin FROM kb_documents WHERE bucket = ? AND origin >= ? AND origin < ?"
            params: tuple[Any, ...] = (bucket, origin, upper)
        else:
            sql, params = "SELECT id, origin FROM kb_documents WHERE bucket = ? AND origin = ?", (bucket, origin)
        return [(str(i), str(s)) for i, s in await self._sql.fetchall(sql, params)]

    async def file_documents(self, bucket: str, origin: str, *, prefix: bool) -> list[KBFileDocument]:
        """``source_documents`` with each document's file stamp and embedder."""
        cols = "SELECT id, origin, file_stamp, embed_model, embed_dim, chunk_rules FROM kb_documents WHERE bucket = ?"
        if prefix and origin:
            upper = origin[:-1] + chr(ord(origin[-1]) + 1)
            sql, params = f"{cols} AND origin >= ? AND origin < ?", [bucket, origin, upper]
        else:
            sql, params = f"{cols} AND origin = ?", [bucket, origin]
        rows = await self._sql.fetchall(sql, params)
        return [
            KBFileDocument(str(i), str(o), s, m, d, None if r is None else int(r)) for i, o, s, m, d, r in rows
        ]

    # ------------------------------------------------------------------ scopes
    async def scoped_doc_ids(self, scope: KBScope) -> list[str]:
        if scope.doc_ids is not None:
            return list(scope.doc_ids)
        # The filter fragments are in the engine's own paramstyle: run as they are.
        sql, params = self._filters.scope_sql(scope, await self._filter_schema(scope))
        return [r[0] for r in await self._sql.db.fetchall(sql, params)]

    async def docs_in_scope(self, scope: KBScope, doc_ids: Sequence[str]) -> list[str]:
        # The scope's own statement restricted to the ids asked about: the database
        # answers for a bucket, a filter, a document or the hidden private buckets alike.
        if scope.doc_ids is not None:
            inside = set(scope.doc_ids)
            return [d for d in doc_ids if d in inside]
        sql, params = self._filters.scope_sql(scope, await self._filter_schema(scope))
        found: list[str] = []
        for part in parts(list(doc_ids)):
            marks = ", ".join([self._filters.mark] * len(part))
            rows = await self._sql.db.fetchall(
                f"WITH s(id) AS ({sql}) SELECT id FROM s WHERE id IN ({marks})", [*params, *part]
            )
            found.extend(str(r[0]) for r in rows)
        return found

    async def count_without_vectors(self, scope: KBScope, embed_model: str, embed_dim: int) -> int:
        # ``count_documents``' statement with ``counts``' condition of a document without
        # current vectors, that condition first: a search's warning counts what it
        # searched, never the index. Not the scope's id list joined back: on SQLite that
        # looked each of a bucket's documents up again (100k documents, one bucket: ~70
        # against ~25 ms; every shared bucket alike).
        mark = self._filters.mark
        d = self._sql.dialect
        stale = f"(d.embed_model {d.differs_from} {mark} OR d.embed_dim {d.differs_from} {mark})"
        if scope.doc_ids is not None:
            total = 0
            for part in parts(list(scope.doc_ids)):
                marks = ", ".join([mark] * len(part))
                row = await self._sql.db.fetchone(
                    f"SELECT count(*) FROM kb_documents d WHERE {stale} AND d.id IN ({marks})",
                    [embed_model, embed_dim, *part],
                )
                total += int(row[0]) if row else 0
            return total
        joins, where, params = self._filters.join_sql(scope, await self._filter_schema(scope))
        row = await self._sql.db.fetchone(
            f"SELECT count(*) FROM kb_documents d{joins} WHERE {stale}" + (f" AND {where}" if where else ""),
            [embed_model, embed_dim, *params],
        )
        return int(row[0]) if row else 0

    async def scoped_chunk_ids(self, scope: KBScope) -> npt.NDArray[np.int64]:
        if scope.chunk_ids is not None:
            return np.unique(np.asarray(scope.chunk_ids, np.int64))
        ids: list[int] = []
        if scope.doc_ids is not None:
            for part in parts(list(scope.doc_ids)):
                rows = await self._sql.fetchall(
                    f"SELECT id FROM kb_chunks WHERE doc_id IN ({self._sql.dialect.marks(len(part))})", part
                )
                ids.extend(int(r[0]) for r in rows)
        else:
            sql, params = self._filters.scope_sql(scope, await self._filter_schema(scope))
            rows = await self._sql.db.fetchall(f"SELECT c.id FROM kb_chunks c WHERE c.doc_id IN ({sql})", params)
            ids.extend(int(r[0]) for r in rows)
        return np.unique(np.asarray(ids, np.int64))

    async def count_documents(self, scope: KBScope) -> int:
        sql, params = self._filters.count_sql(scope, await self._filter_schema(scope))
        row = await self._sql.db.fetchone(sql, params)
        return int(row[0]) if row else 0

    # ------------------------------------------------------------------ full text
    async def selective_terms(self, terms: Sequence[str], min_matches: int, tuning: KBTextTuning) -> list[str]:
        return await self._text.selective_terms(terms, min_matches, tuning)

    async def term_splits(
        self, candidates: Mapping[str, Sequence[Sequence[str]]], tuning: KBTextTuning
    ) -> dict[str, tuple[str, ...]]:
        return await self._text.term_splits(candidates, tuning)

    async def text_candidates(self, terms: Sequence[str], scope: KBScope, limit: int, tuning: KBTextTuning) -> KBRanked:
        return await self._text.text_candidates(terms, scope, limit, tuning, await self._filter_schema(scope))

    # ------------------------------------------------------------------ rows
    async def hydrate(self, chunk_ids: Sequence[int]) -> list[KBChunkRow]:
        if not chunk_ids:
            return []
        ids = [int(i) for i in chunk_ids]
        marks = self._sql.dialect.marks(len(ids))
        rows = await self._sql.fetchall(
            "SELECT c.id, c.doc_id, c.position, c.title, c.heading, c.text, d.bucket, d.source, d.url, d.metadata,"
            " c.page, c.page_end "
            f"FROM kb_chunks c JOIN kb_documents d ON d.id = c.doc_id WHERE c.id IN ({marks})",
            ids,
        )
        meta_cache: dict[str, dict[str, Any]] = {}
        out = []
        for cid, doc_id, pos, title, heading, text, bucket, source, url, meta_json, page, page_end in rows:
            meta = meta_cache.get(doc_id)
            if meta is None:
                meta = meta_cache[doc_id] = orjson.loads(meta_json)
            out.append(KBChunkRow(cid, doc_id, pos, title, heading, text, bucket, source, url, meta, page, page_end))
        return out

    async def get_document(self, doc_id: str) -> KBDocumentRecord | None:
        row = await self._sql.fetchone(
            "SELECT id, bucket, title, source, url, content_hash, embed_model, embed_dim, metadata, chars,"
            " chunk_count, created_at, updated_at FROM kb_documents WHERE id = ?",
            (doc_id,),
        )
        if row is None:
            return None
        (did, bucket, title, source, url, chash, model, dim, meta_json, chars, nchunks, created, updated) = row
        typed: dict[str, Any] = {}
        srow = await self._sql.fetchone("SELECT schema FROM kb_buckets WHERE name = ?", (bucket,))
        schema: dict[str, str] = orjson.loads(srow[0]) if srow else {}
        if schema:
            trow = await self._sql.fetchone(self._buckets.select_fields_statement(bucket, schema), (did,))
            if trow is not None:
                for (f, t), v in zip(schema.items(), trow, strict=True):
                    typed[f] = bool(v) if t == "BOOLEAN" and v is not None else v
        return KBDocumentRecord(
            did,
            bucket,
            title,
            source,
            url,
            chash,
            model,
            dim,
            orjson.loads(meta_json),
            typed,
            chars,
            nchunks,
            created,
            updated,
        )

    async def list_documents(
        self, bucket: str | None, *, limit: int, after: str | None = None
    ) -> list[KBDocumentListing]:
        where, params = [], []
        if bucket is not None:
            where.append("bucket = ?")
            params.append(bucket)
        if after is not None:
            where.append("id > ?")
            params.append(after)
        sql = (
            "SELECT id, bucket, title, source, url, chars, chunk_count, updated_at FROM kb_documents"
            + (" WHERE " + " AND ".join(where) if where else "")
            + f" ORDER BY id{self._sql.dialect.byte_order} LIMIT ?"
        )
        rows = await self._sql.fetchall(sql, (*params, max(0, int(limit))))
        return [KBDocumentListing(str(i), b, t, s, u, int(c), int(n), up) for i, b, t, s, u, c, n, up in rows]

    async def counts(
        self,
        embed_model: str | None,
        embed_dim: int | None,
        *,
        hidden_prefix: str | None = None,
        chunk_rules: int | None = None,
    ) -> KBCounts:
        """In one statement, so the hidden part is of the same rows as the totals."""
        same = self._sql.dialect.same_as
        current = f"embed_model {same} ? AND embed_dim {same} ?"
        hidden = f"substr(bucket, 1, {len(hidden_prefix or '')}) = ?"
        # A document stored before the rules were recorded (NULL) was cut by unknown ones:
        # older. Higher rules are a newer release's (a rolling upgrade, a rollback): apart.
        # The rules are tested first: most rows fail them and skip the bucket's prefix,
        # so the second sum costs no more than the one ``<>`` sum did (SQLite's AND stops early).
        older = f"(chunk_rules IS NULL OR chunk_rules < ?) AND NOT {hidden}" if chunk_rules is not None else "0 = 1"
        newer = f"chunk_rules > ? AND NOT {hidden}" if chunk_rules is not None else "0 = 1"
        row = await self._sql.fetchone(
            "SELECT count(*), coalesce(sum(chunk_count), 0), "
            f"coalesce(sum(CASE WHEN {current} THEN 0 ELSE 1 END), 0), "
            f"coalesce(sum(CASE WHEN {hidden} THEN 1 ELSE 0 END), 0), "
            f"coalesce(sum(CASE WHEN {hidden} THEN chunk_count ELSE 0 END), 0), "
            f"coalesce(sum(CASE WHEN {hidden} AND {current} THEN chunk_count ELSE 0 END), 0), "
            f"coalesce(sum(CASE WHEN {older} THEN 1 ELSE 0 END), 0), "
            f"coalesce(sum(CASE WHEN {newer} THEN 1 ELSE 0 END), 0)"
            " FROM kb_documents",
            # No prefix: ``substr(bucket, 1, 0)`` is '' and never equals '-': nothing is hidden.
            (
                embed_model, embed_dim, *([hidden_prefix or "-"] * 3), embed_model, embed_dim,
                *(() if chunk_rules is None else (chunk_rules, hidden_prefix or "-") * 2),
            ),
        )  # fmt: skip
        docs, chunks, stale, h_docs, h_chunks, h_current, older_docs, newer_docs = (
            (int(x) for x in row) if row else (0,) * 8
        )
        return KBCounts(docs, chunks, stale, h_docs, h_chunks, h_current, older_docs, newer_docs)

    async def vector_embedders(self) -> list[tuple[str, int, int]]:
        rows = await self._sql.fetchall(
            "SELECT embed_model, embed_dim, count(*) FROM kb_documents"
            " WHERE embed_model IS NOT NULL AND embed_dim IS NOT NULL GROUP BY embed_model, embed_dim"
        )
        return sorted(((str(m), int(d), int(n)) for m, d, n in rows), key=lambda r: (-r[2], r[0], r[1]))

    # ------------------------------------------------------------------ re-embedding
    async def documents_without_vectors(
        self, embed_model: str, embed_dim: int, *, limit: int, after: str | None = None
    ) -> list[KBUnembedded]:
        d = self._sql.dialect
        docs = await self._sql.fetchall(
            "SELECT id, bucket, title, content_hash FROM kb_documents"
            f" WHERE (embed_model {d.differs_from} ? OR embed_dim {d.differs_from} ?) AND chunk_count > 0"
            f" AND id{d.byte_order} > ? ORDER BY id{d.byte_order} LIMIT ?",
            (embed_model, embed_dim, after or "", max(0, int(limit))),
        )
        return await self._with_chunks(docs)

    async def documents_with_unreadable_vectors(
        self, embed_model: str, embed_dim: int, doc_ids: Sequence[str]
    ) -> list[KBUnembedded]:
        """Checked against the stored vectors themselves: the caller's ids come from a
        matrix loaded earlier, and a document re-ingested or re-embedded since (by
        another process too) has readable vectors of its own."""
        d = self._sql.dialect
        docs: list[Sequence[Any]] = []
        for part in parts(list(doc_ids)):
            docs.extend(
                await self._sql.fetchall(
                    "SELECT id, bucket, title, content_hash FROM kb_documents"
                    f" WHERE embed_model = ? AND embed_dim = ? AND id IN ({d.marks(len(part))})"
                    " AND EXISTS (SELECT 1 FROM kb_chunks c WHERE c.doc_id = kb_documents.id"
                    f" AND ({self.unreadable_vector_sql})) ORDER BY id{d.byte_order}",
                    (embed_model, embed_dim, *part, embed_dim),
                )
            )
        return await self._with_chunks(docs)

    async def _with_chunks(self, docs: Sequence[Sequence[Any]]) -> list[KBUnembedded]:
        """``(id, bucket, title, content_hash)`` rows with their chunks' text in position order."""
        if not docs:
            return []
        d = self._sql.dialect
        ids = [str(r[0]) for r in docs]
        chunks: dict[str, list[KBChunkText]] = {}
        rows = await self._sql.fetchall(
            f"SELECT doc_id, id, heading, text FROM kb_chunks WHERE doc_id IN ({d.marks(len(ids))})"
            " ORDER BY doc_id, position",
            ids,
        )
        for doc_id, cid, heading, text in rows:
            chunks.setdefault(str(doc_id), []).append(KBChunkText(int(cid), heading or "", text or ""))
        return [KBUnembedded(str(i), b, t or "", h, tuple(chunks.get(str(i), ()))) for i, b, t, h in docs]


__all__ = ["KBReads"]
