"""A PostgreSQL URL libpq cannot parse never puts its password in a command's one line.

libpq quotes the part of a URL it cannot parse, the password included (a ``%`` not
followed by two hex digits, a space), and ``serve``'s start-up line (printed after the
app's log scrubber is gone), the CLI's "cannot open the PostgreSQL …" and
``migrate-db``'s refusal printed that text as it came. Real processes: no server is
needed, the URL fails to parse before any connection."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.support.procs import run_cli
from tests.support.server import free_port

pytestmark = pytest.mark.slow  # `agentchat` CLI subprocesses

KEY = "replicas-share-this-key-0123456789"
#: Passwords libpq rejects, quoting them: a bad percent-encoding; a space. (One shorter
#: than ``SecretScrubber``'s 8 characters is left, as everywhere: masking it would mask
#: the user and database names docker-compose gives the same five letters.)
BAD_URLS = {
    "p%zzSecretPw1": "postgresql://bob:p%zzSecretPw1@127.0.0.1:9/agent",
    "secret Pw 2": "postgresql://bob:secret Pw 2@127.0.0.1:9/agent",
}


async def _agentchat(tmp_path: Path, url: str, *argv: str) -> tuple[int, str]:
    env = {
        **os.environ,
        "AGENT_DB_PATH": str(tmp_path / "agent.sqlite3"),
        "AGENT_DATABASE_URL": url,
        "AGENT_SECRET_KEY": KEY,
        "AGENT_LLM_PROVIDER": "extractive",
        "AGENT_EMBEDDER": "hashing",
        "AGENT_LOG_FORMAT": "text",
    }
    return await run_cli(argv, env)


async def test_an_unparsable_url_never_shows_its_password(tmp_path: Path) -> None:
    runs = []
    for i, (password, url) in enumerate(BAD_URLS.items()):
        here = tmp_path / str(i)
        here.mkdir()
        source = here / "source.sqlite3"  # one each: migrate-db refuses a file another process has open
        source.touch()
        runs += [
            (password, "serve", _agentchat(here, url, "serve", "--host", "127.0.0.1", "--port", str(free_port()),
                                           "--no-backend")),
            (password, "docs", _agentchat(here, url, "docs", "list")),
            (password, "migrate-db", _agentchat(here, url, "migrate-db", "--to", url, "--from", str(source))),
        ]
    answers = await asyncio.gather(*(run for _, _, run in runs))
    for (password, command, _), (rc, out) in zip(runs, answers, strict=True):
        assert rc != 0, (command, out)
        # The line still says what is wrong, only without the password.
        assert "cannot open the PostgreSQL" in out, (command, out)
        assert password not in out, (command, out)
        assert "***" in out, (command, out)
