"""The CLI's commands open the database the service opens (``storage.open``): PostgreSQL
when ``AGENT_DATABASE_URL`` is set, else the SQLite file; a PostgreSQL that cannot be
reached is one clear line and exit code 1, never a SQLite file made on the side."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from storage.open import open_storage
from storage.postgres import redact
from tests.support.postgres import TestPostgres
from tests.support.procs import agentchat, child_env
from tests.support.server import free_port

pytestmark = pytest.mark.slow  # `agentchat` CLI subprocesses


@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
async def test_ingest_buckets_and_docs_use_the_configured_engine(
    engine: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    sqlite_file = tmp_path / "agent.db"
    d = tmp_path / "manual"
    d.mkdir()
    (d / "a.md").write_text("# Alpha\n\nThe alpha page.\n")
    (d / "b.md").write_text("# Beta\n\nThe beta page.\n")

    async def check(env: dict[str, str], target: str | Path, url: str = "") -> None:
        code, out, err = await agentchat(env, "ingest", str(d), "--bucket", "manual", "--quiet")
        assert code == 0 and "2 documents added" in out, out + err
        code, out, _ = await agentchat(env, "buckets")
        assert code == 0 and out.split()[:2] == ["manual", "documents=2"]
        code, out, _ = await agentchat(env, "docs", "list", "--bucket", "manual")
        assert code == 0 and len(out.splitlines()) == 3
        # Each names the database it worked on (a PostgreSQL URL without its password).
        named = f"database: SQLite file {target}" if engine == "sqlite" else f"database: PostgreSQL {redact(url)}"
        assert out.splitlines()[-1] == named
        code, out, _ = await agentchat(env, "keywords", "prune", "--min-usage", "1", "--older-than", "30")
        assert code == 0 and out.startswith("pruned 0 keywords") and out.splitlines()[-1] == named
        storage = await open_storage(target)  # the rows are where the service would read them
        try:
            assert [(b.name, b.documents) for b in await storage.kb_index.list_buckets()] == [("manual", 2)]
        finally:
            await storage.close()

    if engine == "sqlite":
        await check(child_env({"AGENT_DB_PATH": str(sqlite_file)}), sqlite_file)
        return
    server: TestPostgres = request.getfixturevalue("pg_server")
    with server.database() as url:
        await check(child_env({"AGENT_DB_PATH": str(sqlite_file), "AGENT_DATABASE_URL": url}), url, url)
    assert not sqlite_file.exists()


async def test_an_unreachable_postgresql_is_an_error_not_a_local_file(tmp_path: Path) -> None:
    sqlite_file = tmp_path / "agent.db"
    url = f"postgresql://agent:s3cret@127.0.0.1:{free_port()}/agentchat"  # nothing listens there
    env = child_env({"AGENT_DB_PATH": str(sqlite_file), "AGENT_DATABASE_URL": url})
    (tmp_path / "a.md").write_text("# A\n\nText.\n")
    commands = (["buckets"], ["docs", "list"], ["ingest", str(tmp_path / "a.md"), "--quiet"],
                ["keywords", "prune", "--min-usage", "1", "--older-than", "1"])
    # Side by side: each is a process of its own that starts the app's imports (~1 s of
    # CPU, 4-5 s on a loaded machine) to fail at its first connect.
    answers = await asyncio.gather(*(agentchat(env, *argv) for argv in commands))
    for argv, (code, out, err) in zip(commands, answers, strict=True):
        assert code == 1, (argv, out, err)
        assert out == ""
        last = err.splitlines()[-1]
        assert "cannot open the PostgreSQL postgresql://agent@127.0.0.1" in last and "Connection refused" in last
        assert "s3cret" not in err and "Traceback" not in err
    assert not sqlite_file.exists()
