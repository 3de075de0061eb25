"""The embedded engine: every store on one SQLite file, migrated once at open.

``SqliteStorage`` and ``open_sqlite_storage`` live in ``storage.sqlite.engine`` and load
at their first use: importing a light module of the package (``writer_lock``,
``runtime_dir``, what a ``serve --workers`` supervisor needs) then loads no store and no
numpy (~0.3 s of CPU of every supervisor's start)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from storage.sqlite.connections import SqliteOptions
    from storage.sqlite.database import SqliteDatabase
    from storage.sqlite.engine import SqliteStorage, open_sqlite_storage

_FROM = {
    "SqliteOptions": "storage.sqlite.connections",
    "SqliteDatabase": "storage.sqlite.database",
    "SqliteStorage": "storage.sqlite.engine",
    "open_sqlite_storage": "storage.sqlite.engine",
}


def __getattr__(name: str) -> Any:
    """The engine's names, imported at their first use (PEP 562); anything else is a
    submodule or missing (``from storage.sqlite import kb_fts`` still imports it)."""
    if name in _FROM:
        import importlib

        return getattr(importlib.import_module(_FROM[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["SqliteDatabase", "SqliteOptions", "SqliteStorage", "open_sqlite_storage"]
