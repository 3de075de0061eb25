"""``agentchat migrate-db`` ends with what to start the service with: the target's URL and
the SQLite service's key. Before, the copy's last line was "every count matches"; the
first serve on the target then refused for want of a key and said to set one, and a new
key fails the runs the SQLite service left unfinished and breaks its stream links
(docs/scaling.md, "The keys go with it"): the key to give is the key file's content."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from app.config import Settings
from app.keyring import key_file_for, resolve_keyring
from storage.sqlite import open_sqlite_storage
from tests.support.postgres import TestPostgres
from tests.support.procs import REPO, child_env


async def test_the_copy_ends_naming_the_url_and_the_key_file_whose_content_keeps_the_keys(
    pg_server: TestPostgres, tmp_path: Path
) -> None:
    db = tmp_path / "agentchat.sqlite3"
    settings = Settings.from_env({"AGENT_DB_PATH": str(db)})
    lite = await open_sqlite_storage(db)
    try:
        await lite.conversations.claim("conv-1", "user-1")
        on_sqlite = await resolve_keyring(settings, lite.secrets, engine="sqlite")  # writes <db>.key, as serve does
    finally:
        await lite.close()
    key_file = key_file_for(db)
    assert key_file.is_file()

    with pg_server.database(empty=True) as url:
        done = subprocess.run(
            [sys.executable, "-m", "app.cli", "migrate-db", "--to", url, "--from", str(db)],
            cwd=REPO, env=child_env({}), capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert "every count matches" in lines[-2], done.stderr
    assert lines[-1].startswith("next: start the service with AGENT_DATABASE_URL set to the target"), lines[-1]
    assert f'AGENT_SECRET_KEY="$(cat {key_file})"' in lines[-1], lines[-1]

    # What the line says to do keeps the keys: the file's content as AGENT_SECRET_KEY on
    # PostgreSQL signs and seals as the SQLite service did.
    on_postgres = await resolve_keyring(
        Settings.from_env({"AGENT_SECRET_KEY": key_file.read_text().strip()}), lite.secrets, engine="postgres"
    )
    assert on_postgres.stream_secret == on_sqlite.stream_secret
