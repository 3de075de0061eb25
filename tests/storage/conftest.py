"""The engines the storage contract suite runs against.

``store_engine`` yields a whole storage bundle (``.conversations``, ``.runs``,
``.drafts``, ``.keywords``, ``.external_results``, ``.kb_index`` …) on a fresh database
of each engine: a SQLite file copied from the session's migrated one (``sqlite_templates``,
tests/conftest.py), and a PostgreSQL database copied from the migrated template of the
session's server (``pg_server``, ``tests/conftest.py``). Every contract
test runs against both; a PostgreSQL that cannot start fails the tests, it never skips them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.postgres import TestPostgres
from tests.support.sqlite_templates import SqliteTemplates
from tests.support.storage import opened_storage

ENGINES = ["sqlite", "postgres"]


@pytest.fixture(params=ENGINES)
async def target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """Where a knowledge base file or database is opened (``open_kb_file``), fresh, on each
    engine: a SQLite file's path, or a PostgreSQL database's URL."""
    if request.param == "sqlite":
        yield str(tmp_path / "kb.db")
        return
    server: TestPostgres = request.getfixturevalue("pg_server")
    with server.database() as url:
        yield url


@pytest.fixture(params=ENGINES)
async def store_engine(
    request: pytest.FixtureRequest, tmp_path: Path, sqlite_templates: SqliteTemplates
) -> AsyncIterator[Any]:
    if request.param == "sqlite":  # a copy of the migrated template, as PostgreSQL's is
        async with opened_storage(sqlite_templates.agent_copy(tmp_path / "contract.db")) as storage:
            yield storage
    elif request.param == "postgres":
        from storage.postgres import open_postgres_storage

        server: TestPostgres = request.getfixturevalue("pg_server")
        with server.database() as url:
            pg_storage = await open_postgres_storage(url)
            try:
                yield pg_storage
            finally:
                await pg_storage.close()
    else:  # pragma: no cover - a new engine must be wired here
        raise AssertionError(f"unknown storage engine {request.param!r}")


@pytest.fixture(params=ENGINES)
async def shared_db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[dict[str, str]]:
    """The environment that points several in-process replicas at one database of each
    engine: one SQLite file, or one PostgreSQL database of the session's server."""
    if request.param == "sqlite":
        yield {"AGENT_DB_PATH": str(tmp_path / "shared.sqlite3")}
    else:
        server: TestPostgres = request.getfixturevalue("pg_server")
        with server.database() as url:
            # PostgreSQL replicas share a key the database does not hold (app/keyring.py).
            yield {"AGENT_DATABASE_URL": url, "AGENT_DB_PATH": str(tmp_path / "unused.sqlite3"),
                   "AGENT_SECRET_KEY": "replicas-share-this-key-0123456789"}


@pytest.fixture(params=ENGINES)
async def two_bundles(
    request: pytest.FixtureRequest, tmp_path: Path, sqlite_templates: SqliteTemplates
) -> AsyncIterator[tuple[Any, Any]]:
    """Two storage bundles on one fresh database of each engine, as two processes have:
    each its own connections, nothing shared in memory."""
    if request.param == "sqlite":
        from storage.sqlite import open_sqlite_storage

        path = sqlite_templates.agent_copy(tmp_path / "kb.sqlite3")
        first, second = await open_sqlite_storage(path), await open_sqlite_storage(path)
        try:
            yield first, second
        finally:
            await first.close()
            await second.close()
        return
    from storage.postgres import open_postgres_storage

    server: TestPostgres = request.getfixturevalue("pg_server")
    with server.database() as url:
        pg_first, pg_second = await open_postgres_storage(url), await open_postgres_storage(url)
        try:
            yield pg_first, pg_second
        finally:
            await pg_first.close()
            await pg_second.close()
