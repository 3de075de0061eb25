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
        """Store ``value`` under ``name`` and return what it replaced (``None``: nothing),
        as one atomic step: processes replacing at the same moment each read the value
        they replace, as if one ran after the other (``app/key_check.py``: replicas with
        different keys starting together on a fresh database must not both read
        nothing). The first write comes first: ``INSERT … ON CONFLICT DO NOTHING`` - the
        one that inserts replaced nothing; on PostgreSQL another waits on its uncommitted
        row and then inserts nothing. Else a no-op ``UPDATE`` takes the row's lock before
        the read (READ COMMITTED: the read's snapshot is taken after the lock, so it sees
        the last committed value and nobody changes it before this write). SQLite's one
        writer runs them one at a time anyway. Before, the read came first and did not
        lock: on PostgreSQL every start of a fresh database read nothing."""

        async def tx(conn: Tx) -> str | None:
            inserted = await conn.fetchone(
                "INSERT INTO app_secrets(name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING RETURNING name",
                (name, value),
            )
            if inserted is not None:
                return None
            await conn.execute("UPDATE app_secrets SET value = value WHERE name = ?", (name,))
            row = await conn.fetchone("SELECT value FROM app_secrets WHERE name = ?", (name,))
            await conn.execute("UPDATE app_secrets SET value = ? WHERE name = ?", (value, name))
            return None if row is None else str(row[0])

        return await self.db.transact(tx)
