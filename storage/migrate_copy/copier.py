"""One copy in progress: plans each table from both schemas, copies it in batches that
each record how far they got (so a copy resumes after its last committed batch), then
moves the sequences on, builds the graphs and counts both sides.

Why apart: the per-table work of the copy, apart from the order of the steps and the
connections (``sqlite_to_postgres``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import orjson
import psycopg

from storage.migrate_copy.outcome import MigrateError
from storage.migrate_copy.progress import TableProgress
from storage.migrate_copy.table_plan import (
    NOT_DATA,
    RENAMED,
    SQLITE_ONLY,
    Column,
    TablePlan,
    column_kind,
    convert_value,
    quote_ident,
    source_col,
)
from storage.postgres import kb_buckets as pg_buckets
from storage.postgres.kb_chunk_sql import token_count
from storage.postgres.kb_graphs import buckets_past, ensure_graph
from storage.postgres.kb_vectors import EXACT_SCOPE_VECTORS

PROGRESS_TABLE = "agentchat_migrate_db"
#: One row per source whose copy completed (every count matched): each table's count
#: then. A copy run again finds it and copies nothing into a target that serves since.
DONE_TABLE = "agentchat_migrate_db_done"


class Copier:
    def __init__(self, source: Any, target: psycopg.AsyncConnection[Any], source_id: str, batch_rows: int) -> None:
        self.source = source  # storage.sqlite.SqliteStorage
        self.target = target
        self.source_id = source_id
        self.batch_rows = max(1, batch_rows)

    async def lite(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return list(await self.source.db.fetchall(sql, params))

    async def pg(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[tuple[Any, ...]]:
        cur = await self.target.execute(sql, params)  # type: ignore[arg-type]
        return list(await cur.fetchall()) if cur.description else []

    # -------------------------------------------------------------- planning
    async def source_tables(self) -> list[str]:
        rows = await self.lite("SELECT name FROM sqlite_master WHERE type = 'table'")
        return [r[0] for r in rows if not str(r[0]).startswith(NOT_DATA)]

    async def ensure_meta_tables(self, tables: Sequence[str]) -> None:
        """Each bucket's typed-field table, made on the target from the bucket's schema."""
        rows = await self.lite("SELECT name, schema FROM kb_buckets")
        schemas = {name: orjson.loads(schema) for name, schema in rows}
        for table in tables:
            if not table.startswith("meta_"):
                continue
            bucket = table[len("meta_") :]
            if bucket not in schemas:
                raise MigrateError(f"table {table} belongs to no bucket of kb_buckets")
            async with self.target.transaction():
                for stmt in pg_buckets.create_table_statements(bucket, schemas[bucket]):
                    await self.target.execute(stmt)  # type: ignore[arg-type]

    async def plan(self, table: str) -> TablePlan:
        info = await self.lite(f"SELECT name, type, pk FROM pragma_table_info('{table}')")
        source_cols = [str(r[0]) for r in info]
        pk = [str(r[0]) for r in sorted((r for r in info if r[2]), key=lambda r: int(r[2]))]
        rows = await self.pg(
            "SELECT column_name, data_type, udt_name, is_generated, is_identity FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = %s ORDER BY ordinal_position",
            (table,),
        )
        if not rows:
            raise MigrateError(f"table {table} of the SQLite file has no counterpart in PostgreSQL")
        columns: list[Column] = []
        used: set[str] = set()
        for name, data_type, udt, generated, identity in rows:
            if generated == "ALWAYS":
                continue  # e.g. kb_chunks.tsv: PostgreSQL computes it
            source = RENAMED.get((table, name), name)
            if source in source_cols:
                columns.append(Column(name, source, column_kind(data_type, udt)))
                used.add(source)
            elif table == "kb_chunks" and name == "ntok":
                columns.append(Column(name, None, "int"))
            elif table == "kb_chunks" and name == "bucket":
                columns.append(Column(name, None, "doc_bucket"))  # its document's (``copy_table``)
            elif identity == "YES":
                columns.append(Column(name, None, "int"))  # SQLite's rowid: the same order
        lost = [c for c in source_cols if c not in used and (table, c) not in SQLITE_ONLY]
        if lost:
            raise MigrateError(f"columns {lost} of {table} have no counterpart in PostgreSQL")
        key = tuple(pk) if pk else ("rowid",)
        computed = ("ntok", "bucket")
        wants_rowid = key == ("rowid",) or any(c.source is None and c.target not in computed for c in columns)
        kept = [c for c in source_cols if (table, c) not in SQLITE_ONLY]
        select = tuple(dict.fromkeys([*key, *(["rowid"] if wants_rowid else []), *kept]))
        return TablePlan(table, key, select, tuple(columns))

    # -------------------------------------------------------------- copying
    async def progress_of(self, table: str) -> tuple[list[Any] | None, int]:
        rows = await self.pg(
            f"SELECT last_key, rows FROM {PROGRESS_TABLE} WHERE source = %s AND tbl = %s", (self.source_id, table)
        )
        if not rows:
            return None, 0
        return (orjson.loads(rows[0][0]) if rows[0][0] else None), int(rows[0][1])

    def _row(self, plan: TablePlan, raw: tuple[Any, ...]) -> tuple[Any, ...]:
        values = dict(zip(plan.select, raw, strict=True))
        out = []
        for c in plan.columns:
            if c.source is not None:
                out.append(convert_value(c.kind, values[c.source]))
            elif c.target == "ntok":
                out.append(token_count(*(str(values.get(k) or "") for k in ("title", "heading", "text"))))
            elif c.kind == "doc_bucket":
                out.append(None)
            else:
                out.append(int(values["rowid"]))
        return tuple(out)

    async def copy_table(self, plan: TablePlan, progress: TableProgress | None) -> int:
        last_key, _done = await self.progress_of(plan.name)
        cols = ", ".join(quote_ident(c.target) for c in plan.columns)
        stage = quote_ident(f"_copy_{plan.name}")
        # A chunk's bucket is its document's (copied before it: parents first).
        doc_bucket = "(SELECT d.bucket FROM kb_documents d WHERE d.id = s.doc_id)"
        picks = ", ".join(doc_bucket if c.kind == "doc_bucket" else f"s.{quote_ident(c.target)}" for c in plan.columns)
        await self.target.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS {stage} ON COMMIT DELETE ROWS AS "  # type: ignore[arg-type]
            f"SELECT {cols} FROM {quote_ident(plan.name)} WITH NO DATA"
        )
        keys = ", ".join(source_col(k) for k in plan.key)
        read = f"SELECT {', '.join(source_col(s) for s in plan.select)} FROM {quote_ident(plan.name)}"
        key_at = [plan.select.index(k) for k in plan.key]
        after = f" WHERE ({keys}) > ({', '.join('?' for _ in plan.key)})" if len(plan.key) > 1 else f" WHERE {keys} > ?"
        copied = 0
        while True:
            params = list(last_key) if last_key is not None else []
            sql = read + (after if last_key is not None else "") + f" ORDER BY {keys} LIMIT {self.batch_rows}"
            batch = await self.lite(sql, params)
            if not batch:
                break
            new_key = [batch[-1][i] for i in key_at]
            async with self.target.transaction(), self.target.cursor() as cur:
                async with cur.copy(f"COPY {stage} ({cols}) FROM STDIN") as copy:  # type: ignore[arg-type]
                    for raw in batch:
                        await copy.write_row(self._row(plan, raw))
                await cur.execute(
                    f"INSERT INTO {quote_ident(plan.name)} ({cols}) OVERRIDING SYSTEM VALUE "  # type: ignore[arg-type]
                    f"SELECT {picks} FROM {stage} s ON CONFLICT DO NOTHING"
                )
                await cur.execute(
                    f"INSERT INTO {PROGRESS_TABLE} (source, tbl, last_key, rows, updated_at) "
                    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (source, tbl) DO UPDATE SET "
                    "last_key = excluded.last_key, rows = {0}.rows + excluded.rows, "
                    "updated_at = excluded.updated_at".format(PROGRESS_TABLE),
                    (self.source_id, plan.name, orjson.dumps(new_key).decode(), len(batch), time.time()),
                )
            last_key = new_key
            copied += len(batch)
            if progress is not None:
                progress.advance(len(batch))
            if len(batch) < self.batch_rows:
                break
        return copied

    # -------------------------------------------------------------- finishing
    async def advance_sequences(self) -> None:
        """Every sequence behind a column (identity or ``nextval`` default) past the
        largest copied value, never backwards."""
        rows = await self.pg(
            "SELECT table_name, column_name, pg_get_serial_sequence(quote_ident(table_name), column_name) "
            "FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND (is_identity = 'YES' OR column_default LIKE 'nextval(%%')"
        )
        for table, column, seq in rows:
            if seq is None:
                continue
            await self.pg(
                f"SELECT setval(%s::regclass, greatest((SELECT max({quote_ident(column)}) FROM {quote_ident(table)}), "
                f"(SELECT last_value FROM {seq})), true) WHERE EXISTS (SELECT 1 FROM {quote_ident(table)})",
                (seq,),
            )

    async def build_indexes(self) -> None:
        """The HNSW graph of every bucket past the exact threshold (``kb_graphs``)."""
        for dim, bucket in await buckets_past(self.target, EXACT_SCOPE_VECTORS):
            async with self.target.transaction():
                await ensure_graph(self.target, dim, bucket, bulk_build=True)

    # -------------------------------------------------------------- completion
    async def completed(self) -> tuple[float, dict[str, int]] | None:
        """(when, each table's count then) of this source's completed copy, if any."""
        rows = await self.pg(f"SELECT finished_at, counts FROM {DONE_TABLE} WHERE source = %s", (self.source_id,))
        if not rows:
            return None
        return float(rows[0][0]), {str(k): int(v) for k, v in orjson.loads(rows[0][1]).items()}

    async def mark_completed(self, counts: dict[str, int]) -> None:
        await self.pg(
            f"INSERT INTO {DONE_TABLE} (source, counts, finished_at) VALUES (%s, %s, %s) "
            "ON CONFLICT (source) DO UPDATE SET counts = excluded.counts, finished_at = excluded.finished_at",
            (self.source_id, orjson.dumps(counts).decode(), time.time()),
        )

    async def count_source(self, table: str) -> int:
        return int((await self.lite(f"SELECT count(*) FROM {quote_ident(table)}"))[0][0])

    async def count(self, table: str) -> tuple[int, int]:
        dst = await self.pg(f"SELECT count(*) FROM {quote_ident(table)}")  # type: ignore[arg-type]
        return await self.count_source(table), int(dst[0][0])
