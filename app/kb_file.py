"""A knowledge base on its own SQLite file, for the CLI, benchmarks and tests.

The service opens the storage once (``app.wiring``) and builds its ``KnowledgeBase`` on
``storage.kb_index`` (``app.rooms``). A command or a test that needs only the knowledge
base opens it here: the file is migrated like the service's, and closing the KB closes
the storage it opened.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from knowledge.kb import KnowledgeBase
from knowledge.types import KBConfig
from storage.sqlite import SqliteOptions, open_sqlite_storage
from toolindex.embedder import Embedder


async def open_kb_file(
    path: str | os.PathLike[str],
    embedder: Embedder | None,
    *,
    config: KBConfig | None = None,
    options: SqliteOptions | None = None,
) -> KnowledgeBase:
    """Open (creating and migrating if needed) the storage at ``path`` and load the KB
    on it; ``await kb.aclose()`` closes both."""
    storage = await open_sqlite_storage(os.fspath(path), options)
    try:
        return await KnowledgeBase.create(
            storage.kb_index,
            embedder,
            config=config,
            schema_version=storage.schema_version,
            on_close=storage.close,
        )
    except BaseException:
        await storage.close()
        raise


@asynccontextmanager
async def kb_file(
    path: str | os.PathLike[str], embedder: Embedder | None, *, config: KBConfig | None = None
) -> AsyncIterator[KnowledgeBase]:
    """``async with kb_file(path, embedder) as kb:`` — ``open_kb_file`` closed on exit."""
    kb = await open_kb_file(path, embedder, config=config)
    try:
        yield kb
    finally:
        await kb.aclose()


__all__ = ["kb_file", "open_kb_file"]
