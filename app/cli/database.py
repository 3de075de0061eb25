"""The database of the CLI's commands: the server's, chosen the same way.

``agentchat ingest``, ``buckets``, ``docs`` and ``keywords prune`` open storage through
``storage.open.open_storage`` with the target the service uses (``AGENT_DATABASE_URL``
when set, else the SQLite file at ``AGENT_DB_PATH``): a command never writes one
database while the service reads another. A database that cannot be opened is one
clear line naming it (password removed) and exit code 1, never a traceback, and never
a quiet fall-back to a local file.

Only the commands that write documents or buckets (``ingest``, ``buckets create``) may
create the SQLite file. The others (listing, removing, pruning, compacting) on a machine
with no database yet say so in one line and exit 1 (``NoDatabaseYet``): they used to
create an empty file, with a WARNING about creating it, to list nothing from it.

Every command that opened the database names it in its output (``CliDatabase.line``):
the absolute path of the SQLite file, or the PostgreSQL URL without its password, and
when the command created the file, that it did. ``AGENT_DB_PATH`` defaults to the
relative ``data/agentchat.sqlite3``: ``agentchat ingest`` run from another folder made
a new database there with rc 0 and "1 documents added", a log line its only sign, and
the server never saw the bucket. The line makes that visible at once.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.config import Settings

#: The pool a CLI command needs: one writer and a reader or two, not the service's.
CLI_MAX_CONNECTIONS = 4


class StorageUnavailable(RuntimeError):
    """The configured database could not be opened; the message names it and says why."""


class NoDatabaseYet(StorageUnavailable):
    """A command that needs an existing database found no SQLite file: none is created."""


@dataclass(frozen=True, slots=True)
class CliDatabase:
    """The database a command works on, as its output names it (``line``)."""

    #: ``SQLite file /abs/path`` or ``PostgreSQL postgresql://user:***@host/db``.
    shown: str
    #: The SQLite file was not there before this command (which made it).
    created: bool = False
    #: ``AGENT_DB_PATH`` as given, when it is relative (to the current directory).
    relative: Path | None = None

    def line(self) -> str:
        """``database: …``, the last line of a command's output."""
        if self.relative is None:
            return f"database: created a new {self.shown}" if self.created else f"database: {self.shown}"
        where = f"{self.shown} ({_relative_note(self.relative)})"
        if self.created:  # most likely not the server's: said so, with the way out
            return (f"database: created a new {where}; a server started in another directory does not see it "
                    "(set AGENT_DB_PATH to an absolute path)")
        return f"database: {where}"


def cli_database(settings: Settings) -> CliDatabase:
    """Which database the command is about to open, and whether it is there yet: call it
    before opening (a command that may create the SQLite file creates it then)."""
    from storage.open import is_postgres_url

    target = storage_target(settings)
    if is_postgres_url(target):
        return CliDatabase(shown_target(target))
    path = Path(target)
    return CliDatabase(shown_target(target), created=not path.exists(), relative=None if path.is_absolute() else path)


def shown_target(target: str | Path) -> str:
    """``describe_target`` with a SQLite file's absolute path: the commands' words (a
    relative ``AGENT_DB_PATH`` means a different file in each directory)."""
    from storage.open import is_postgres_url

    return describe_target(target) if is_postgres_url(target) else f"SQLite file {Path(target).absolute()}"


def _relative_note(path: Path) -> str:
    return f"AGENT_DB_PATH {path} is relative to the current directory {Path.cwd()}"


def _require_existing(target: str | Path) -> None:
    """``NoDatabaseYet`` when ``target`` is a SQLite file that is not there. A PostgreSQL
    database is the server's to have: opening it (and migrating) creates no file."""
    from storage.open import is_postgres_url

    if is_postgres_url(target):
        return
    path = Path(target)
    if not path.exists():
        where = "" if path.is_absolute() else f" ({_relative_note(path)})"
        raise NoDatabaseYet(
            f"no database yet at {path.absolute()}{where}; run `make run` (or `agentchat serve`) or "
            "`agentchat ingest` to create it"
        )


def storage_target(settings: Settings) -> str | Path:
    """What the service opens: the PostgreSQL URL when one is set, else the SQLite file."""
    return settings.database_url or settings.db_path


def describe_target(target: str | Path) -> str:
    """The database for a person to read: a PostgreSQL URL without its password, or the path."""
    from storage.open import is_postgres_url

    if is_postgres_url(target):
        from storage.postgres import redact

        return f"PostgreSQL {redact(str(target))}"
    return f"SQLite file {target}"


def _sqlite_options(settings: Settings, target: str | Path) -> Any:
    """The SQLite file's options for a command: the service's write retry, and gaps
    between bulk writes while a ``serve`` holds the file's writer lock
    (``storage.sqlite.group_gap``: a command writes without that lock, and its ingest
    back to back held every live stream's next token). ``None`` for PostgreSQL."""
    from storage.open import is_postgres_url

    if is_postgres_url(target):
        return None
    from storage.sqlite import SqliteOptions

    return SqliteOptions(write_retry_s=settings.db_write_retry_s, yield_to_writer_group=True)


def _open_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [OSError, sqlite3.Error, RuntimeError]
    try:
        import psycopg
    except ImportError:  # pragma: no cover - the postgres extra is not installed
        pass
    else:
        errors.append(psycopg.Error)
    return tuple(errors)


def _first_line(exc: BaseException, target: str | Path) -> str:
    """The error's text on one line, without the target's password (libpq quotes the
    part of a URL it cannot parse, the password included)."""
    from app.ops.masking import without_url_secrets

    text = " ".join(str(exc).split()) or type(exc).__name__
    return without_url_secrets(text, str(target))[:300]


async def open_cli_storage(settings: Settings, *, create: bool) -> Any:
    """The migrated storage bundle of the configured database (``StorageUnavailable`` if not);
    without ``create``, a SQLite file that is not there is ``NoDatabaseYet``."""
    from storage.open import open_storage

    target = storage_target(settings)
    if not create:
        _require_existing(target)
    try:
        return await open_storage(
            target,
            write_retry_s=settings.db_write_retry_s,
            max_connections=CLI_MAX_CONNECTIONS,
            options=_sqlite_options(settings, target),
        )
    except _open_errors() as exc:
        raise StorageUnavailable(f"cannot open the {shown_target(target)}: {_first_line(exc, target)}") from exc


async def open_cli_kb(settings: Settings, embedder: Any, *, create: bool) -> Any:
    """The knowledge base on the configured database; closing it closes the storage
    (``StorageUnavailable`` if it cannot be opened; without ``create``, ``NoDatabaseYet``
    for a SQLite file that is not there)."""
    target = storage_target(settings)
    if not create:
        _require_existing(target)
    # After that check: importing the knowledge base (numpy, the storage's records) is most
    # of such a command's start-up, and ``no database yet`` needs none of it.
    from app.cli.kb_file import open_kb_file

    try:
        return await open_kb_file(
            target,
            embedder,
            write_retry_s=settings.db_write_retry_s,
            max_connections=CLI_MAX_CONNECTIONS,
            options=_sqlite_options(settings, target),
        )
    except _open_errors() as exc:
        raise StorageUnavailable(f"cannot open the {shown_target(target)}: {_first_line(exc, target)}") from exc


__all__ = [
    "CLI_MAX_CONNECTIONS",
    "CliDatabase",
    "NoDatabaseYet",
    "StorageUnavailable",
    "cli_database",
    "describe_target",
    "open_cli_kb",
    "open_cli_storage",
    "shown_target",
    "storage_target",
]
