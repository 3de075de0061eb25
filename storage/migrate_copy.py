"""``agentchat migrate-db``: copy a SQLite database of the service into PostgreSQL.

What it does, in order:

1. Refuses a SQLite file that another process has open (``sqlite_in_use``: a live
   server, an ingest), since rows written during the copy could be missed.
2. Migrates both ends with their own runners (``storage.sqlite.migrations``,
   ``storage.postgres.migrations``): the steps carry the same numbers on both engines,
   so equal versions mean the same tables; unequal ones are refused.
3. Copies every table the two schemas share (an unknown SQLite table is refused, never
   skipped), parents before children, plus each bucket's ``meta_<bucket>`` table
   (created on the target from the bucket's schema). Rows go in batches, each batch one
   PostgreSQL transaction that also records how far the copy got in
   ``agentchat_migrate_db`` — so an interrupted copy (even SIGKILL) resumes after the
   last committed batch, and a batch replayed anyway is absorbed by
   ``ON CONFLICT DO NOTHING``: no duplicates, no loss. Batches are read by keyset
   pagination on each table's primary key (never ``OFFSET``).
4. Carries what differs between the engines: identity columns keep their values
   (``OVERRIDING SYSTEM VALUE``; ``runs.seq`` and ``keyword_associations.seq``, which
   SQLite keeps as the rowid, take the rowid), chunk vectors become pgvector values,
   ``kb_chunks.ntok`` is computed, ``kb_chunks.bucket`` is its document's, the
   ``tsvector`` fills itself (a generated column).
5. Moves every sequence past the copied ids, builds the HNSW graph of each bucket past
   the exact threshold (once, after the rows: faster than row by row), runs ``ANALYZE``.
6. Counts every table on both sides; a difference is ``CountMismatch`` (exit 1).

This is the only module of the copy that opens connections; ``app/cli.py`` wires it.
"""

from __future__ import annotations

import contextlib
import fcntl
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import orjson
import psycopg

from storage.postgres import kb_buckets as pg_buckets
from storage.postgres.database import redact
from storage.postgres.kb_graphs import buckets_past, ensure_graph
from storage.postgres.kb_index import clean, token_count
from storage.postgres.kb_vectors import EXACT_SCOPE_VECTORS
from storage.postgres.migrations import migrate as migrate_postgres

PROGRESS_TABLE = "agentchat_migrate_db"
#: Session advisory lock held while copying (released when the connection ends, even on
#: SIGKILL): one migrate-db per target at a time.
COPY_LOCK = 0x6D69677261746564  # "migrated"
#: Parents first (foreign keys); tables not named here follow in name order, and each
#: ``meta_<bucket>`` right after the documents.
ORDER = (
    "conversations",
    "messages",
    "runs",
    "run_events",
    "tool_calls",
    "workflow_drafts",
    "external_results",
    "keywords",
    "keyword_associations",
    "keyword_terms",
    "external_vectors",
    "kb_buckets",
    "kb_documents",
    "kb_chunks",
)
#: SQLite tables that are not data: bookkeeping, and FTS5's own index of ``kb_chunks``
#: (PostgreSQL's ``tsvector`` is computed from the rows).
NOT_DATA = ("schema_version", "sqlite_", "kb_chunks_fts")
#: target column -> source column, where the engines name them differently
RENAMED = {("kb_chunks", "embedding"): "vector"}
_DMS_BYTE = 128  # SQLite's "dead man switch" lock byte in the -shm file (os_unix.c)


class MigrateError(RuntimeError):
    """The copy cannot start or did not end well; the message says why."""


class SourceInUse(MigrateError):
    pass


class TargetNotEmpty(MigrateError):
    pass


class CountMismatch(MigrateError):
    def __init__(self, mismatches: list[tuple[str, int, int]]) -> None:
        self.mismatches = mismatches
        lines = ", ".join(f"{t}: {s} in SQLite, {p} in PostgreSQL" for t, s, p in mismatches)
        super().__init__(f"row counts differ after the copy ({lines})")


class TableProgress(Protocol):
    def advance(self, rows: int) -> None: ...

    def close(self) -> None: ...


ProgressFactory = Callable[[str, int, int], TableProgress]
"""``(table, total rows, rows already copied)`` -> a progress reporter for that table."""


@dataclass(slots=True)
class TableCount:
    table: str
    source: int
    target: int
    copied: int = 0


@dataclass(slots=True)
class CopyReport:
    schema_version: int
    resumed: bool
    tables: list[TableCount] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Column:
    target: str
    source: str | None  # None: computed (``kb_chunks.ntok``, ``kb_chunks.bucket``) or the rowid
    kind: str  # text | bytea | int | float | bool | vector | doc_bucket


@dataclass(frozen=True, slots=True)
class TablePlan:
    name: str
    key: tuple[str, ...]  # source keyset columns (primary key, or the rowid)
    select: tuple[str, ...]  # source expressions read per row
    columns: tuple[Column, ...]


def sqlite_in_use(path: Path) -> bool:
    """Whether another process has the SQLite file open. In WAL mode every connection
    holds a shared lock on one byte of the ``-shm`` file for as long as it is open (how
    SQLite itself tells whether it is the first); a write lock on that byte is refused
    while any other process holds it. Call it only while this process has no connection
    to the file: closing a descriptor drops all of a process's locks on that file."""
    shm = Path(f"{path}-shm")
    if not shm.exists():
        return False
    with open(shm, "r+b") as f:
        try:
            fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, _DMS_BYTE)
        except OSError:
            return True
        fcntl.lockf(f, fcntl.LOCK_UN, 1, _DMS_BYTE)
    return False


def _kind(data_type: str, udt: str) -> str:
    if udt == "vector":
        return "vector"
    if data_type in ("bytea",):
        return "bytea"
    if data_type in ("integer", "bigint", "smallint"):
        return "int"
    if data_type in ("double precision", "real", "numeric"):
        return "float"
    if data_type == "boolean":
        return "bool"
    return "text"


def _convert(kind: str, value: Any) -> Any:
    if value is None:
        return None
    if kind == "text":
        if isinstance(value, bytes | memoryview):
            value = bytes(value).decode("utf-8", "replace")
        return clean(value if isinstance(value, str) else str(value))
    if kind == "bytea":
        return value.encode() if isinstance(value, str) else bytes(value)
    if kind == "int":
        return int(value)
    if kind == "float":
        return float(value)
    if kind == "bool":
        return bool(value)
    return np.frombuffer(bytes(value), dtype="<f4").astype(np.float32)  # vector


def _order(tables: Sequence[str]) -> list[str]:
    rank = {t: i for i, t in enumerate(ORDER)}
    meta = sorted(t for t in tables if t.startswith("meta_"))
    known = sorted((t for t in tables if t in rank), key=rank.__getitem__)
    rest = sorted(t for t in tables if t not in rank and not t.startswith("meta_"))
    out = known + rest
    at = out.index("kb_documents") + 1 if "kb_documents" in out else len(out)
    return out[:at] + meta + out[at:]


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _col(name: str) -> str:
    """A source column in SQLite (``rowid`` stays bare: it is not a declared column)."""
    return name if name == "rowid" else _q(name)


class _Copier:
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
                columns.append(Column(name, source, _kind(data_type, udt)))
                used.add(source)
            elif table == "kb_chunks" and name == "ntok":
                columns.append(Column(name, None, "int"))
            elif table == "kb_chunks" and name == "bucket":
                columns.append(Column(name, None, "doc_bucket"))  # its document's (``copy_table``)
            elif identity == "YES":
                columns.append(Column(name, None, "int"))  # SQLite's rowid: the same order
        lost = [c for c in source_cols if c not in used]
        if lost:
            raise MigrateError(f"columns {lost} of {table} have no counterpart in PostgreSQL")
        key = tuple(pk) if pk else ("rowid",)
        computed = ("ntok", "bucket")
        wants_rowid = key == ("rowid",) or any(c.source is None and c.target not in computed for c in columns)
        select = tuple(dict.fromkeys([*key, *(["rowid"] if wants_rowid else []), *source_cols]))
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
                out.append(_convert(c.kind, values[c.source]))
            elif c.target == "ntok":
                out.append(token_count(*(str(values.get(k) or "") for k in ("title", "heading", "text"))))
            elif c.kind == "doc_bucket":
                out.append(None)
            else:
                out.append(int(values["rowid"]))
        return tuple(out)

    async def copy_table(self, plan: TablePlan, progress: TableProgress | None) -> int:
        last_key, _done = await self.progress_of(plan.name)
        cols = ", ".join(_q(c.target) for c in plan.columns)
        stage = _q(f"_copy_{plan.name}")
        # A chunk's bucket is its document's (copied before it: parents first).
        doc_bucket = "(SELECT d.bucket FROM kb_documents d WHERE d.id = s.doc_id)"
        picks = ", ".join(doc_bucket if c.kind == "doc_bucket" else f"s.{_q(c.target)}" for c in plan.columns)
        await self.target.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS {stage} ON COMMIT DELETE ROWS AS "  # type: ignore[arg-type]
            f"SELECT {cols} FROM {_q(plan.name)} WITH NO DATA"
        )
        keys = ", ".join(_col(k) for k in plan.key)
        read = f"SELECT {', '.join(_col(s) for s in plan.select)} FROM {_q(plan.name)}"
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
                    f"INSERT INTO {_q(plan.name)} ({cols}) OVERRIDING SYSTEM VALUE "  # type: ignore[arg-type]
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
                f"SELECT setval(%s::regclass, greatest((SELECT max({_q(column)}) FROM {_q(table)}), "
                f"(SELECT last_value FROM {seq})), true) WHERE EXISTS (SELECT 1 FROM {_q(table)})",
                (seq,),
            )

    async def build_indexes(self) -> None:
        """The HNSW graph of every bucket past the exact threshold (``kb_graphs``)."""
        for dim, bucket in await buckets_past(self.target, EXACT_SCOPE_VECTORS):
            async with self.target.transaction():
                await ensure_graph(self.target, dim, bucket, bulk_build=True)

    async def count_source(self, table: str) -> int:
        return int((await self.lite(f"SELECT count(*) FROM {_q(table)}"))[0][0])

    async def count(self, table: str) -> tuple[int, int]:
        dst = await self.pg(f"SELECT count(*) FROM {_q(table)}")  # type: ignore[arg-type]
        return await self.count_source(table), int(dst[0][0])


async def copy_sqlite_to_postgres(
    source: Path,
    target_url: str,
    *,
    batch_rows: int = 2000,
    progress: ProgressFactory | None = None,
) -> CopyReport:
    """Copy the SQLite database at ``source`` into the PostgreSQL at ``target_url`` (see
    the module docstring). Raises ``MigrateError`` (``SourceInUse``, ``TargetNotEmpty``,
    ``CountMismatch``) with a message for a human."""
    from pgvector.psycopg import register_vector_async

    from storage.sqlite import open_sqlite_storage

    source = Path(source).expanduser().resolve()
    if not source.is_file():
        raise MigrateError(f"no SQLite database at {source}")
    if sqlite_in_use(source):
        raise SourceInUse(
            f"{source} is open in another process (a running server or CLI): stop every process using it, "
            "then run migrate-db again"
        )
    target_version = await migrate_postgres(target_url)
    lite = await open_sqlite_storage(source)
    try:
        if lite.schema_version != target_version:
            raise MigrateError(
                f"schema versions differ: the SQLite file is at {lite.schema_version}, PostgreSQL "
                f"({redact(target_url)}) at {target_version}; run the same release on both"
            )
        async with await psycopg.AsyncConnection.connect(
            target_url, autocommit=True, application_name="agentchat-migrate-db"
        ) as conn:
            await register_vector_async(conn)
            cur = await conn.execute("SELECT pg_try_advisory_lock(%s)", (COPY_LOCK,))
            row = await cur.fetchone()
            if not (row and row[0]):
                raise MigrateError(f"another migrate-db is copying into {redact(target_url)}; let it finish")
            copier = _Copier(lite, conn, str(source), batch_rows)
            report = await _copy_all(copier, progress, target_version)
    finally:
        await lite.close()
    if sqlite_in_use(source):
        raise SourceInUse(f"{source} was opened by another process during the copy; stop it and run migrate-db again")
    mismatches = [(t.table, t.source, t.target) for t in report.tables if t.source != t.target]
    if mismatches:
        raise CountMismatch(mismatches)
    return report


async def _copy_all(copier: _Copier, progress: ProgressFactory | None, version: int) -> CopyReport:
    await copier.pg(
        f"CREATE TABLE IF NOT EXISTS {PROGRESS_TABLE} (source TEXT NOT NULL, tbl TEXT NOT NULL, "
        "last_key TEXT, rows BIGINT NOT NULL DEFAULT 0, updated_at DOUBLE PRECISION NOT NULL, "
        "PRIMARY KEY (source, tbl))"
    )
    tables = _order(await copier.source_tables())
    resumed = bool(await copier.pg(f"SELECT 1 FROM {PROGRESS_TABLE} WHERE source = %s LIMIT 1", (copier.source_id,)))
    if not resumed:
        filled = []
        for t in tables:
            exists = await copier.pg("SELECT to_regclass(%s)", (t,)) != [(None,)]
            if exists and await copier.pg(f"SELECT 1 FROM {_q(t)} LIMIT 1"):  # type: ignore[arg-type]
                filled.append(t)
        if filled:
            raise TargetNotEmpty(
                f"the PostgreSQL database already holds data (in {', '.join(filled)}); migrate-db copies into a "
                "new, empty database — create one, and start the replicas on it after the copy"
            )
    await copier.ensure_meta_tables(tables)
    report = CopyReport(version, resumed)
    for table in tables:
        plan = await copier.plan(table)
        total = await copier.count_source(table)
        _, done = await copier.progress_of(table)
        bar = progress(table, total, min(done, total)) if progress is not None else None
        try:
            copied = await copier.copy_table(plan, bar)
        finally:
            if bar is not None:
                bar.close()
        report.tables.append(TableCount(table, total, 0, copied))
    await copier.advance_sequences()
    await copier.build_indexes()
    await copier.pg("ANALYZE")
    for entry in report.tables:
        entry.source, entry.target = await copier.count(entry.table)
    return report


class TqdmProgress:
    """One ``tqdm`` bar per table on stderr (``ProgressFactory``)."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream or sys.stderr

    def __call__(self, table: str, total: int, done: int) -> TableProgress:
        from tqdm import tqdm

        bar = tqdm(
            total=total, initial=done, desc=table, unit="row", file=self.stream, dynamic_ncols=True, mininterval=0.5
        )
        return _Bar(bar)


class _Bar:
    def __init__(self, bar: Any) -> None:
        self._bar = bar

    def advance(self, rows: int) -> None:
        self._bar.update(rows)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._bar.close()


__all__ = [
    "CopyReport",
    "CountMismatch",
    "MigrateError",
    "SourceInUse",
    "TableCount",
    "TargetNotEmpty",
    "TqdmProgress",
    "copy_sqlite_to_postgres",
    "sqlite_in_use",
]
