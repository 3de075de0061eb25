"""Named secrets on SQLite, shared by every process on the file (``app_secrets``)."""

from __future__ import annotations

import sqlite3

from storage.sqlite.database import SqliteDatabase


class SqliteSecretStore:
    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db

    async def get_or_create(self, name: str, value: str) -> str:
        """Insert ``value`` unless ``name`` has one, then read what is stored: one write
        transaction (SQLite has one writer), so processes starting together agree."""

        def tx(conn: sqlite3.Connection) -> str:
            conn.execute("INSERT OR IGNORE INTO app_secrets(name, value) VALUES (?, ?)", (name, value))
            row = conn.execute("SELECT value FROM app_secrets WHERE name = ?", (name,)).fetchone()
            return str(row[0])

        return await self.db.transact_sync(tx)
