"""Named secrets on PostgreSQL, shared by every replica (``app_secrets``)."""

from __future__ import annotations

from storage.postgres.database import Conn, PostgresDatabase


class PostgresSecretStore:
    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db

    async def get_or_create(self, name: str, value: str) -> str:
        """Insert ``value`` unless ``name`` has one, then read what is stored. Of replicas
        inserting at once, the second waits on the first's row lock and inserts nothing;
        its read (READ COMMITTED, a new snapshot per statement) sees the winner's value."""

        async def tx(conn: Conn) -> str:
            await conn.execute(
                "INSERT INTO app_secrets(name, value) VALUES (%s, %s) ON CONFLICT (name) DO NOTHING", (name, value)
            )
            cur = await conn.execute("SELECT value FROM app_secrets WHERE name = %s", (name,))
            row = await cur.fetchone()
            assert row is not None  # inserted above, or by the replica that won
            return str(row[0])

        return await self.db.transact(tx)
