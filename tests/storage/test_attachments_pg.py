"""Issue 25 item 4 over PostgreSQL: the attachment story of ``tests/test_attachments.py``
(two JWT users, searched only in its own conversation, bad uploads, removed with the
conversation) with ``AGENT_DATABASE_URL``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.config import Settings
from tests.support.postgres import TestPostgres
from tests.test_attachments import scenario
from tests.test_compat_faces_owners import env


@pytest.fixture
async def pg_url(pg_server: TestPostgres) -> AsyncIterator[str]:
    with pg_server.database() as url:
        yield url


async def test_attachments_over_postgresql(pg_url: str, tmp_path: Path) -> None:
    key = "replicas-share-this-key-0123456789"  # PostgreSQL wants the signing key set
    settings = Settings.from_env(env(tmp_path, AGENT_DATABASE_URL=pg_url, AGENT_SECRET_KEY=key))
    await scenario(settings, "postgres")
