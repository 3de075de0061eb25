"""Issue 25's history routes over PostgreSQL: the story of ``tests/test_history_routes.py``
(every route for its owner and another JWT user; a delete while a run is live) with
``AGENT_DATABASE_URL``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.config import Settings
from tests.support.postgres import TestPostgres
from tests.test_compat_faces_owners import env
from tests.test_history_routes import live_delete, scenario


@pytest.fixture
async def pg_url(pg_server: TestPostgres) -> AsyncIterator[str]:
    with pg_server.database() as url:
        yield url


def pg_settings(tmp_path: Path, url: str) -> Settings:
    key = "replicas-share-this-key-0123456789"
    return Settings.from_env(env(tmp_path, AGENT_DATABASE_URL=url, AGENT_SECRET_KEY=key))


async def test_history_routes_over_postgresql(pg_url: str, tmp_path: Path) -> None:
    await scenario(pg_settings(tmp_path, pg_url), "postgres")


async def test_delete_while_a_run_is_live_over_postgresql(pg_url: str, tmp_path: Path) -> None:
    await live_delete(pg_settings(tmp_path, pg_url))
