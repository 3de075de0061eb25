"""Whether another process has the SQLite file open, checked before and after the copy.

Why apart: it is the one piece of the copy that knows SQLite's file locking (the WAL
``-shm`` lock byte), not its tables.
"""

from __future__ import annotations

import fcntl
from pathlib import Path

_DMS_BYTE = 128  # SQLite's "dead man switch" lock byte in the -shm file (os_unix.c)


def sqlite_in_use(path: Path) -> bool:
    """Whether another process has the SQLite file open. In WAL mode every connection
    holds a shared lock on one byte of the ``-shm`` file for as long as it is open (how
    SQLite itself tells whether it is the first); a write lock on that byte is refused
    while any other process holds it. Call it only while this process has no connection
    to the file: closing a descriptor drops all of a process's locks on that file."""
    shm = Path(f"{path}-shm")
    if not shm.exists():
        return False
    with open(shm, "r+b") as f:
        try:
            fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, _DMS_BYTE)
        except OSError:
            return True
        fcntl.lockf(f, fcntl.LOCK_UN, 1, _DMS_BYTE)
    return False
