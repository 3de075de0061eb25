"""``copy_sqlite_to_postgres``: the copy's steps in order (see ``storage.migrate_copy``),
and the only module of the copy that opens connections.

Why apart: the order of the steps and the refusals (a source in use, schema versions
that differ, a target that holds data, another copy under way) read as one story here;
the per-table work is ``copier``'s.
"""

from __future__ import annotations

from pathlib import Path

import psycopg

from storage.errors import SchemaTooNew
from storage.migrate_copy.copier import DONE_TABLE, PROGRESS_TABLE, Copier
from storage.migrate_copy.outcome import (
    CopyReport,
    CountMismatch,
    MigrateError,
    SourceChanged,
    SourceInUse,
    TableCount,
    TargetNotEmpty,
    TargetUnusable,
)
from storage.migrate_copy.progress import ProgressFactory
from storage.migrate_copy.source_guard import sqlite_in_use
from storage.migrate_copy.table_plan import copy_order, quote_ident
from storage.postgres.database import redact
from storage.postgres.migrations import migrate as migrate_postgres

#: Session advisory lock held while copying (released when the connection ends, even on
#: SIGKILL): one migrate-db per target at a time.
COPY_LOCK = 0x6D69677261746564  # "migrated"


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
    # The source first: a file a newer release migrated is refused before the target is
    # touched (``SchemaTooNew``), and so is a target a newer release migrated.
    try:
        lite = await open_sqlite_storage(source)
    except SchemaTooNew as exc:
        raise MigrateError(f"the SQLite file {source}: {exc}") from exc
    try:
        try:
            target_version = await migrate_postgres(target_url)
        except SchemaTooNew as exc:
            raise MigrateError(f"PostgreSQL ({redact(target_url)}): {exc}") from exc
        except (psycopg.Error, OSError) as exc:  # unreachable, no such database, no pgvector rights
            raise TargetUnusable.from_error(exc, redact(target_url)) from exc
        if lite.schema_version != target_version:
            raise MigrateError(
                f"schema versions differ: the SQLite file is at {lite.schema_version}, PostgreSQL "
                f"({redact(target_url)}) at {target_version}; run the same release on both"
            )
        # Every run's events into ``run_events``, unfinished runs' included: their rows
        # in SQLite's live log are what a replica on PostgreSQL carries them on from.
        await lite.runs.settle_log(everything=True)
        async with await psycopg.AsyncConnection.connect(
            target_url, autocommit=True, application_name="agentchat-migrate-db"
        ) as conn:
            await register_vector_async(conn)
            cur = await conn.execute("SELECT pg_try_advisory_lock(%s)", (COPY_LOCK,))
            row = await cur.fetchone()
            if not (row and row[0]):
                raise MigrateError(f"another migrate-db is copying into {redact(target_url)}; let it finish")
            copier = Copier(lite, conn, str(source), batch_rows)
            report = await _copy_all(copier, progress, target_version)
    finally:
        await lite.close()
    if report.completed_at is not None:
        return report  # copied before: counted against that copy's own counts (``_already_copied``)
    if sqlite_in_use(source):
        raise SourceInUse(f"{source} was opened by another process during the copy; stop it and run migrate-db again")
    mismatches = [(t.table, t.source, t.target) for t in report.tables if t.source != t.target]
    if mismatches:
        raise CountMismatch(mismatches)
    return report


async def _copy_all(copier: Copier, progress: ProgressFactory | None, version: int) -> CopyReport:
    await copier.pg(
        f"CREATE TABLE IF NOT EXISTS {PROGRESS_TABLE} (source TEXT NOT NULL, tbl TEXT NOT NULL, "
        "last_key TEXT, rows BIGINT NOT NULL DEFAULT 0, updated_at DOUBLE PRECISION NOT NULL, "
        "PRIMARY KEY (source, tbl))"
    )
    await copier.pg(
        f"CREATE TABLE IF NOT EXISTS {DONE_TABLE} (source TEXT PRIMARY KEY, counts TEXT NOT NULL, "
        "finished_at DOUBLE PRECISION NOT NULL)"
    )
    tables = copy_order(await copier.source_tables())
    completed = await copier.completed()
    if completed is not None:
        return await _already_copied(copier, tables, version, *completed)
    resumed = bool(await copier.pg(f"SELECT 1 FROM {PROGRESS_TABLE} WHERE source = %s LIMIT 1", (copier.source_id,)))
    if not resumed:
        filled = []
        for t in tables:
            exists = await copier.pg("SELECT to_regclass(%s)", (t,)) != [(None,)]
            if exists and await copier.pg(f"SELECT 1 FROM {quote_ident(t)} LIMIT 1"):  # type: ignore[arg-type]
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
    if all(t.source == t.target for t in report.tables):
        await copier.mark_completed({t.table: t.source for t in report.tables})
    return report


async def _already_copied(
    copier: Copier, tables: list[str], version: int, finished_at: float, counts: dict[str, int]
) -> CopyReport:
    """This file's copy completed before (every count matched then): nothing is copied
    again. Run once more after the replicas served on the target, a resume copied nothing
    and then counted the target's new rows as a failed copy (exit 1, "run it again to
    resume", which never helps). The file as it was then: the report says so, and how far
    the target has moved on since. A file changed since: refused (``SourceChanged``)."""
    now = {t: await copier.count_source(t) for t in tables}
    changed = [(t, counts.get(t, 0), n) for t, n in now.items() if counts.get(t, 0) != n]
    changed += [(t, n, 0) for t, n in counts.items() if t not in now]
    if changed:
        said = ", ".join(f"{t}: {then} then, {n} now" for t, then, n in changed)
        raise SourceChanged(
            f"{copier.source_id} was copied completely into this database already, and the file has changed "
            f"since ({said}); the target serves since, so migrate-db does not merge the difference into it — "
            "copy into a new, empty database instead"
        )
    report = CopyReport(version, resumed=False, completed_at=finished_at)
    for table in tables:
        (target,) = (await copier.pg(f"SELECT count(*) FROM {quote_ident(table)}"))[0]  # type: ignore[arg-type]
        report.tables.append(TableCount(table, counts[table], int(target)))
    return report
