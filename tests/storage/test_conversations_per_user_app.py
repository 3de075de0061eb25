"""Issue 21 on PostgreSQL: two JWT users choosing one conversation id on every face
(AI SDK, OpenAI, native chat and runs) each get their own conversation — the story of
``tests/test_compat_faces_owners.py`` over ``AGENT_DATABASE_URL``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.config import Settings
from tests.support.postgres import TestPostgres
from tests.test_compat_faces_owners import env, scenario


@pytest.fixture
async def pg_url(pg_server: TestPostgres) -> AsyncIterator[str]:
    with pg_server.database() as url:
        yield url


async def test_two_users_share_an_id_on_every_face_over_postgresql(pg_url: str, tmp_path: Path) -> None:
    settings = Settings.from_env(
        env(tmp_path, AGENT_DATABASE_URL=pg_url, AGENT_SECRET_KEY="replicas-share-this-key-0123456789")
    )
    await scenario(settings, "postgres")
