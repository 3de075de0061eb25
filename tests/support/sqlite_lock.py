"""Another process holding a SQLite file's write lock (``BEGIN EXCLUSIVE``): what a
backup tool, a second writer or an operator's ``sqlite3`` shell does to a live service."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from tests.support.deadline import reap

LOCKER = (
    "import sqlite3, sys\n"
    "c = sqlite3.connect(sys.argv[1], timeout=60, isolation_level=None)\n"
    "c.execute('BEGIN EXCLUSIVE')\n"
    "print('locked', flush=True)\n"
    "sys.stdin.readline()\n"
    "c.execute('ROLLBACK')\n"
    "c.close()\n"
)


@contextlib.asynccontextmanager
async def sqlite_file_locked(path: str | Path) -> AsyncIterator[None]:
    """Another process holds the file's write lock until the block ends."""
    locker = await asyncio.create_subprocess_exec(
        sys.executable, "-c", LOCKER, str(path), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    assert locker.stdout is not None and locker.stdin is not None
    try:
        line = await asyncio.wait_for(locker.stdout.readline(), 60)
        assert line.strip() == b"locked", line
        yield
    finally:
        with contextlib.suppress(Exception):
            locker.stdin.write(b"release\n")
            await locker.stdin.drain()
        await reap(locker, "the SQLite lock holder", terminate=False)
