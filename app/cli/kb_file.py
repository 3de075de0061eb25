"""A knowledge base on its own storage, for the CLI, benchmarks and tests.

The service opens the storage once (``app.wiring``) and builds its ``KnowledgeBase`` on
``storage.kb_index`` (``app.rooms``). A command or a test that needs only the knowledge
base opens it here, through the same ``storage.open.open_storage`` as the service (a
``postgresql://`` URL opens PostgreSQL, anything else is a SQLite file), migrated like
the service's; closing the KB closes the storage it opened.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from knowledge.kb import KnowledgeBase
from knowledge.types import KBConfig
from storage.open import open_storage
from storage.sqlite import SqliteOptions
from toolindex.embedder import Embedder


async def open_kb_file(
    path: str | os.PathLike[str],
    embedder: Embedder | None,
    *,
    config: KBConfig | None = None,
    options: SqliteOptions | None = None,
    write_retry_s: float | None = None,
    max_connections: int | None = None,
) -> KnowledgeBase:
    """Open (creating and migrating if needed) the storage at ``path`` — a SQLite file
    or a PostgreSQL URL — and load the KB on it; ``await kb.aclose()`` closes both."""
    storage = await open_storage(
        os.fspath(path), options=options, write_retry_s=write_retry_s, max_connections=max_connections
    )
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
