"""Named secrets shared by every process and replica on the database (``app_secrets``)."""

from __future__ import annotations

from storage.sql import SqlEngine, Tx


class SqlSecretStore:
    def __init__(self, sql: SqlEngine) -> None:
        self.db = sql

    async def get_or_create(self, name: str, value: str) -> str:
        """Insert ``value`` unless ``name`` has one, then read what is stored, in one
        write transaction, so processes starting together agree: SQLite's one writer
        runs them one at a time; on PostgreSQL the second waits on the first's row lock
        and inserts nothing, and its read (READ COMMITTED, a new snapshot per statement)
        sees the winner's value."""

        async def tx(conn: Tx) -> str:
            await conn.execute(
                "INSERT INTO app_secrets(name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING", (name, value)
            )
            row = await conn.fetchone("SELECT value FROM app_secrets WHERE name = ?", (name,))
            assert row is not None  # inserted above, or by the replica that won
            return str(row[0])

        return await self.db.transact(tx)

    async def replace(self, name: str, value: str) -> str | None:
        """Read what ``name`` holds and store ``value`` in its place, in one write
        transaction. Two processes replacing at the same moment may both read the value
        stored before them (PostgreSQL reads without locking); the later write stays."""

        async def tx(conn: Tx) -> str | None:
            row = await conn.fetchone("SELECT value FROM app_secrets WHERE name = ?", (name,))
            await conn.execute(
                "INSERT INTO app_secrets(name, value) VALUES (?, ?) "
                "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                (name, value),
            )
            return None if row is None else str(row[0])

        return await self.db.transact(tx)
