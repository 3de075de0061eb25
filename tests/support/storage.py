"""The storage bundle for tests: one SQLite file, migrated, closed afterwards."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from storage.sqlite import SqliteStorage, open_sqlite_storage


@asynccontextmanager
async def opened_storage(path: str | Path) -> AsyncIterator[SqliteStorage]:
    """``async with opened_storage(tmp_path / "agent.db") as storage: ...``"""
    storage = await open_sqlite_storage(path)
    try:
        yield storage
    finally:
        await storage.close()
