"""``agentchat serve`` that cannot start says why in one line (exit code 3), as the other
commands do, instead of a JSON traceback and a bare "the service did not start": the
database unreachable, a database that does not exist, PostgreSQL without
``AGENT_SECRET_KEY``, a user that may not create the ``vector`` extension. The traceback
is still there at ``AGENT_LOG_LEVEL=debug``. Real processes, a real PostgreSQL."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

from storage.sqlite.engine import open_sqlite_storage
from tests.support.postgres import TestPostgres
from tests.support.procs import run_cli
from tests.support.server import free_port
from tests.support.sqlite_lock import sqlite_file_locked

KEY = "replicas-share-this-key-0123456789"


async def _serve(tmp_path: Path, **env: str) -> tuple[int, str]:
    full = {
        **os.environ,
        "AGENT_DB_PATH": str(tmp_path / "agent.sqlite3"),
        "AGENT_LLM_PROVIDER": "extractive",
        "AGENT_EMBEDDER": "hashing",
        "AGENT_LOG_FORMAT": "text",
        **env,
    }
    return await run_cli(["serve", "--host", "127.0.0.1", "--port", str(free_port()), "--no-backend"], full)


def _one_line(rc: int, out: str, *needles: str) -> None:
    assert rc == 3, (rc, out)
    assert "Traceback" not in out, out
    said = [line for line in out.splitlines() if "the service did not start" in line]
    assert len(said) == 1, out
    for needle in needles:
        assert needle in said[0], (needle, said[0])
    assert len(out.splitlines()) <= 6, out


async def test_an_unreachable_database_is_one_line(tmp_path: Path) -> None:
    rc, out = await _serve(tmp_path, AGENT_DATABASE_URL="postgresql://postgres@127.0.0.1:9/agent", AGENT_SECRET_KEY=KEY)
    _one_line(rc, out, "cannot open the PostgreSQL postgresql://***@127.0.0.1:9/agent", "Connection refused")


async def test_the_traceback_is_kept_at_debug_level(tmp_path: Path) -> None:
    rc, out = await _serve(
        tmp_path, AGENT_DATABASE_URL="postgresql://postgres@127.0.0.1:9/agent", AGENT_SECRET_KEY=KEY,
        AGENT_LOG_LEVEL="debug",
    )
    assert rc == 3 and "Traceback" in out and "OperationalError" in out, out


async def test_a_missing_database_no_key_and_no_pgvector_rights_are_one_line(
    tmp_path: Path, pg_server: TestPostgres
) -> None:
    """Three failed starts side by side (each its own process, folder and database): what
    each one says is its own; waiting for them in turn only added their start-ups up."""
    role = f"weak_{uuid.uuid4().hex[:8]}"
    name = pg_server.new_database(empty=True)
    try:
        pg_server.admin(f"CREATE ROLE {role} LOGIN")
        pg_server.admin(f'ALTER DATABASE "{name}" OWNER TO {role}')
        weak = f"postgresql://{role}@{pg_server.host}:{pg_server.port}/{name}"
        with pg_server.database(empty=True) as url:
            folders = [tmp_path / f"start-{i}" for i in range(3)]
            for folder in folders:
                folder.mkdir()
            missing, no_key, no_rights = await asyncio.gather(
                _serve(folders[0], AGENT_DATABASE_URL=pg_server.url("no_such_db"), AGENT_SECRET_KEY=KEY),
                _serve(folders[1], AGENT_DATABASE_URL=url),
                _serve(folders[2], AGENT_DATABASE_URL=weak, AGENT_SECRET_KEY=KEY),
            )
        _one_line(*missing, "cannot open the PostgreSQL", 'database "no_such_db" does not exist')
        _one_line(*no_key, "PostgreSQL needs AGENT_STREAM_TOKEN_SECRET or AGENT_SECRET_KEY")
        _one_line(*no_rights, "create the vector extension (pgvector)", "CREATE EXTENSION vector")
    finally:
        pg_server.drop_database(name)
        pg_server.admin(f"DROP ROLE IF EXISTS {role}")


async def test_a_statement_failing_on_an_opened_database_is_not_cannot_open(
    tmp_path: Path, pg_server: TestPostgres
) -> None:
    """A database that opens but where a statement of the start-up fails (here a table
    ``runs`` of someone else's, without the columns the migration indexes) is not
    "cannot open the PostgreSQL": the line says a statement failed, with its SQLSTATE,
    and its traceback follows at ERROR (a migration's SQL may be the bug); a traceback
    only at DEBUG and "cannot open" before."""
    import psycopg

    with pg_server.database(empty=True) as url:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE runs (id text PRIMARY KEY, note text)")
        rc, out = await _serve(tmp_path, AGENT_DATABASE_URL=url, AGENT_SECRET_KEY=KEY)
    said = [line for line in out.splitlines() if "the service did not start" in line]
    assert rc == 3 and len(said) == 1, out
    assert "cannot open" not in said[0], said[0]
    assert "a start-up statement failed on the PostgreSQL" in said[0] and "SQLSTATE" in said[0], said[0]
    assert "Traceback" in out, out


async def test_a_sqlite_file_another_process_keeps_locked_is_named(tmp_path: Path) -> None:
    """The start-up waits ``AGENT_DB_WRITE_RETRY_S`` for a file another process writes
    (bb72065), then failed with "OperationalError: database is locked" alone: which file,
    and what may hold it, were not said in the line that ends the start."""
    db = tmp_path / "agent.sqlite3"
    storage = await open_sqlite_storage(db)
    await storage.close()
    async with sqlite_file_locked(db):
        rc, out = await _serve(tmp_path, AGENT_DB_WRITE_RETRY_S="0.5")
    _one_line(rc, out, f"the SQLite file {db} stayed locked", "database is locked", "AGENT_DB_WRITE_RETRY_S, 0.5 s")
