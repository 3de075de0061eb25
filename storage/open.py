"""``open_storage``: the one place that picks the engine from where the data lives.

A ``postgresql://`` (or ``postgres://``) URL opens the PostgreSQL engine — imported
only then, so the embedded default needs none of its packages — and anything else is
the path of a SQLite file.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from storage.postgres import PostgresStorage
    from storage.sqlite import SqliteStorage

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_url(target: str | Path) -> bool:
    return isinstance(target, str) and target.strip().lower().startswith(POSTGRES_SCHEMES)


async def open_storage(
    target: str | Path,
    *,
    write_retry_s: float | None = None,
    options: Any = None,
    max_connections: int | None = None,
    pool_timeout_s: float | None = None,
    idle_in_transaction_s: float | None = None,
) -> SqliteStorage | PostgresStorage:
    """Open (and migrate) the storage at ``target``: a PostgreSQL URL or a SQLite path.

    ``write_retry_s`` applies to either engine, ``max_connections``, ``pool_timeout_s``
    (the wait for a connection) and ``idle_in_transaction_s`` (how long PostgreSQL lets a
    transaction wait for a frozen client, holding its locks) to PostgreSQL's pool;
    ``options`` (``SqliteOptions`` or ``PostgresOptions``) replaces the defaults wholesale."""
    if is_postgres_url(target):
        try:
            from storage.postgres import PostgresOptions, open_postgres_storage
        except ImportError as exc:  # pragma: no cover - depends on the installation
            raise RuntimeError(
                "a postgresql:// database needs the postgres extra: pip install 'agentchat[postgres]'"
            ) from exc
        if options is None:
            options = PostgresOptions()
            if write_retry_s is not None:
                options = dataclasses.replace(options, write_retry_s=write_retry_s)
            if max_connections is not None:
                options = dataclasses.replace(options, max_connections=max_connections)
            if pool_timeout_s is not None:
                options = dataclasses.replace(options, connect_timeout_s=pool_timeout_s)
            if idle_in_transaction_s is not None:
                idle_ms = max(1_000, round(idle_in_transaction_s * 1000))
                options = dataclasses.replace(options, idle_in_transaction_timeout_ms=idle_ms)
        pg_opts = options
        return await open_postgres_storage(str(target).strip(), pg_opts)
    from storage.sqlite import SqliteOptions, open_sqlite_storage

    sq_opts = options or (SqliteOptions(write_retry_s=write_retry_s) if write_retry_s is not None else SqliteOptions())
    return await open_sqlite_storage(target, sq_opts)


__all__ = ["POSTGRES_SCHEMES", "is_postgres_url", "open_storage"]
