"""``agentchat migrate-db --to postgresql://… [--from agent.db]``: move a SQLite database
of the service into PostgreSQL (the copy itself is ``storage.migrate_copy``).

Exit codes: 0 copied and every table's count matches — or this file's copy into the
target had completed already and the file is unchanged since ("already migrated", with
how many rows the target gained or lost since: the replicas' work, not a failure; nothing
is copied again); 1 the counts differ or the copy failed (re-run to resume: it continues
after the last committed batch); 2 refused before copying (the file is in use, the target
is unreachable, not PostgreSQL, not empty — or holds this file's completed copy and the
file has changed since —, or does not let this user create the ``vector`` extension, the
schema versions differ). Every failure is one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.cli.counts import noun_for, plural
from app.cli.ranges import integer_in
from app.config_env import Bounds

if TYPE_CHECKING:
    from app.config import Settings  # imported by the command that runs: not by its --help

#: Rows per batch of the copy: each batch is one transaction and is held in memory.
BATCH_ROWS_BOUNDS = Bounds(1, 1_000_000)


def add_migrate_command(sub: Any) -> None:
    p = sub.add_parser(
        "migrate-db",
        help="copy the SQLite database into PostgreSQL (resumable, counts checked at the end)",
        description="Copy every table of the SQLite database into PostgreSQL, in batches; stop every "
                    "process using the SQLite file first. Interrupted? Run it again: it resumes.",
    )
    p.add_argument("--to", required=True, metavar="postgresql://…", help="the target database (migrated first)")
    p.add_argument("--from", dest="source", metavar="PATH", help="the SQLite file (default: AGENT_DB_PATH)")
    p.add_argument("--batch-rows", type=integer_in(BATCH_ROWS_BOUNDS), default=2000,
                   help="rows per batch, each one transaction (2000)")


async def run_migrate_db(args: argparse.Namespace, settings: Settings) -> int:
    from storage.open import is_postgres_url
    from storage.sqlite.writer_lock import WriterLock

    if not is_postgres_url(args.to):
        print("agentchat migrate-db: --to must be a postgresql:// URL", file=sys.stderr)
        return 2
    source = Path(args.source) if args.source else settings.db_path
    # The file's writer lock for the whole copy: a serve started meanwhile waits for it
    # (``app.cli.writer_wait``) instead of writing rows the copy has passed already.
    lock = WriterLock(source)
    with contextlib.suppress(OSError):  # a directory nobody can write: no serve can lock it either
        if source.exists() and not lock.try_acquire():
            print(f"agentchat migrate-db: refused: {lock.holder()} holds the writer lock of {source} (a serve, or "
                  "another migrate-db); stop it first", file=sys.stderr)
            return 2
    try:
        return await _copy(args, source)
    finally:
        lock.release()


async def _copy(args: argparse.Namespace, source: Path) -> int:
    """The copy itself, its outcome one line on stderr (module docstring), the lock held."""
    import psycopg

    from app.ops.masking import without_url_secrets
    from storage.migrate_copy.outcome import CountMismatch, MigrateError, SourceInUse, TargetNotEmpty
    from storage.migrate_copy.progress import LineProgress, TqdmProgress
    from storage.migrate_copy.sqlite_to_postgres import copy_sqlite_to_postgres
    from storage.postgres import redact

    print(f"copying {source} into {redact(args.to)}", file=sys.stderr, flush=True)
    # A bar on a terminal; plain lines into a pipe or a file (tqdm's \r frames were
    # unreadable there), as ``agentchat ingest`` does.
    progress = TqdmProgress(sys.stderr) if sys.stderr.isatty() else LineProgress(sys.stderr)
    try:
        report = await copy_sqlite_to_postgres(source, args.to, batch_rows=args.batch_rows, progress=progress)
    except CountMismatch as exc:
        print(f"agentchat migrate-db: {exc}", file=sys.stderr)
        return 1
    except (SourceInUse, TargetNotEmpty) as exc:
        print(f"agentchat migrate-db: refused: {exc}", file=sys.stderr)
        return 2
    except MigrateError as exc:  # TargetUnusable among them: the target unreachable or without pgvector
        print(f"agentchat migrate-db: {without_url_secrets(str(exc), args.to)}", file=sys.stderr)
        return 2
    except (psycopg.Error, OSError) as exc:  # the database went away during the copy
        said = without_url_secrets(" ".join(str(exc).split())[:300] or type(exc).__name__, args.to)
        print(f"agentchat migrate-db: the copy failed: {said}; run it again to resume", file=sys.stderr)
        return 1
    if report.completed_at is not None:
        print(_already_migrated(source, report.completed_at, report.moved_on()), file=sys.stderr)
        return 0
    for t in report.tables:
        print(f"  {t.table:28s} {t.source:>10d} {noun_for(t.source, 'row'):4s}  (copied now {t.copied})",
              file=sys.stderr)
    print(
        f"done: {plural(len(report.tables), 'table')}, {plural(sum(t.target for t in report.tables), 'row')}, "
        f"schema version {report.schema_version}{' (resumed)' if report.resumed else ''}; every count matches",
        file=sys.stderr,
    )
    print(_next_step(source), file=sys.stderr)
    return 0


def _next_step(source: Path) -> str:
    """What to start the replicas with. Without it the first serve on the target refused for
    want of a key and said to set one - any one, and a new key fails the runs the SQLite
    service left unfinished and breaks the stream links it gave out (docs/scaling.md,
    "The keys go with it"); the key to give is the file's content beside the database."""
    from app.keyring import key_file_for

    key_file = key_file_for(source)
    if key_file.is_file():
        key = f'AGENT_SECRET_KEY="$(cat {key_file})" (the SQLite service\'s key file)'
    else:
        key = "the AGENT_SECRET_KEY (or AGENT_STREAM_TOKEN_SECRET) the SQLite service had"
    return (
        f"next: start the service with AGENT_DATABASE_URL set to the target and {key}, so the runs it "
        "left unfinished go on and its stream links still open (docs/scaling.md, \"The keys go with it\")"
    )


def _already_migrated(source: Path, completed_at: float, moved_on: list[tuple[str, int]]) -> str:
    """The one line of a copy run again after it completed: nothing was copied, and how
    far the target has moved on since (the replicas' rows), which is not a failure."""
    import time

    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(completed_at))
    head = f"already migrated: {source} was copied completely at {when}; nothing copied now"
    if not moved_on:
        return f"{head}; the target is as the copy left it"
    more = sum(n for _, n in moved_on if n > 0)
    fewer = sum(-n for _, n in moved_on if n < 0)
    amounts = [f"{more} more {noun_for(more, 'row')}"] if more else []
    amounts += [f"{fewer} fewer" if more else f"{fewer} fewer {noun_for(fewer, 'row')}"] if fewer else []
    tables = ", ".join(f"{t} {n:+d}" for t, n in moved_on)
    return f"{head}; the target has moved on since — {' and '.join(amounts)} ({tables})"


__all__ = ["add_migrate_command", "run_migrate_db"]
