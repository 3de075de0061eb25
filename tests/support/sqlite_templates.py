"""Migrated SQLite files to copy, like the PostgreSQL template (``tests/support/postgres.py``).

A test that needs an empty agent database, or the reference backend's seeded one, of its
own gets a copy of a file made once a session (``sqlite_templates`` in tests/conftest.py)
instead of running every migration - and the backend's seed - for each test: on a fresh
file that is ~0.1 CPU-s a test, most of a tool test's time. The copy is the test's own, so
nothing one test writes reaches another; the templates are closed before any copy is made
(a closed SQLite file holds its whole content: no ``-wal`` beside it)."""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import dataclass
from pathlib import Path

from backend.db import Database
from backend.seed_loader import seed_database
from storage.sqlite import open_sqlite_storage


@dataclass(frozen=True, slots=True)
class SqliteTemplates:
    """The closed template files: ``agent`` (the agent's storage, every migration
    applied, no rows) and ``backend`` (the reference backend's, migrated and seeded)."""

    agent: Path
    backend: Path

    def agent_copy(self, dest: Path) -> Path:
        """A copy of the agent template at ``dest`` (``open_sqlite_storage(dest)``)."""
        return copy_database(self.agent, dest)

    def backend_copy(self, dest: Path) -> Path:
        """A copy of the backend template at ``dest`` (``create_backend_app(dest)``)."""
        return copy_database(self.backend, dest)


def build_sqlite_templates(folder: Path) -> SqliteTemplates:
    """Both templates in ``folder``; blocking (a session fixture's, before its tests)."""
    templates = SqliteTemplates(folder / "agent-template.sqlite3", folder / "backend-template.db")
    asyncio.run(_build(templates))
    for path in (templates.agent, templates.backend):
        assert not path.with_name(path.name + "-wal").exists(), f"{path} was not closed whole"
    return templates


async def _build(templates: SqliteTemplates) -> None:
    storage = await open_sqlite_storage(templates.agent)
    await storage.close()
    db = await Database.open(templates.backend)
    try:
        await db.migrate()
        assert await seed_database(db)
    finally:
        await db.close()


def copy_database(template: Path, dest: Path) -> Path:
    """A closed SQLite file ``template``'s bytes and mode at ``dest`` (also for a module's
    own prepared file): the agent's file is made ``0600`` (``storage/sqlite/database.py``),
    and so is its copy."""
    shutil.copyfile(template, dest)
    shutil.copymode(template, dest)
    return dest


__all__ = ["SqliteTemplates", "build_sqlite_templates", "copy_database"]
