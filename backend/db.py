"""The backend's single aiosqlite connection, its write lock and numbered migrations.

One connection is enough for a reference backend: aiosqlite runs it on its own thread
so the event loop never blocks, and a write lock keeps multi-statement writes from
interleaving with each other (reads may run freely between them).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite
from starlette.requests import Request

MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        """
        CREATE TABLE roles (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            description TEXT NOT NULL DEFAULT ''
        );
        CREATE TABLE users (
            id TEXT PRIMARY KEY,
            username TEXT NOT NULL UNIQUE,
            first_name TEXT NOT NULL,
            last_name TEXT NOT NULL,
            email TEXT NOT NULL,
            is_active INTEGER NOT NULL DEFAULT 1,
            created_date TEXT NOT NULL
        );
        CREATE TABLE user_roles (
            user_id TEXT NOT NULL REFERENCES users(id),
            role_id TEXT NOT NULL REFERENCES roles(id),
            PRIMARY KEY (user_id, role_id)
        );
        CREATE TABLE api_tokens (
            token TEXT PRIMARY KEY,
            user_id TEXT NOT NULL REFERENCES users(id)
        );
        CREATE TABLE entity_types (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL UNIQUE
        );
        CREATE TABLE entities (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            entity_type_id TEXT NOT NULL REFERENCES entity_types(id),
            schema_name TEXT NOT NULL,
            is_active INTEGER NOT NULL DEFAULT 1,
            UNIQUE (schema_name, name)
        );
        CREATE TABLE trigger_types (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            description TEXT NOT NULL DEFAULT '',
            is_active INTEGER NOT NULL DEFAULT 1
        );
        CREATE TABLE action_types (
            type TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            description TEXT NOT NULL,
            category TEXT NOT NULL,
            supports_manual_execution INTEGER NOT NULL,
            is_async INTEGER NOT NULL,
            config_schema TEXT NOT NULL,
            output_ports TEXT NOT NULL,
            sort_order INTEGER NOT NULL
        );
        CREATE TABLE rules (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            description TEXT NOT NULL DEFAULT '',
            entity_id TEXT NOT NULL REFERENCES entities(id),
            trigger_type_id TEXT NOT NULL REFERENCES trigger_types(id),
            trigger_conditions TEXT,
            canvas_layout TEXT,
            is_active INTEGER NOT NULL DEFAULT 1,
            is_default INTEGER NOT NULL DEFAULT 0,
            created_by TEXT NOT NULL,
            updated_by TEXT NOT NULL,
            created_date TEXT NOT NULL,
            updated_date TEXT NOT NULL
        );
        CREATE INDEX rules_by_name ON rules(name);
        CREATE TABLE rule_actions (
            id TEXT PRIMARY KEY,
            rule_id TEXT NOT NULL REFERENCES rules(id) ON DELETE CASCADE,
            position INTEGER NOT NULL,
            name TEXT NOT NULL,
            description TEXT NOT NULL DEFAULT '',
            action_type TEXT NOT NULL REFERENCES action_types(type),
            action_config TEXT NOT NULL,
            is_active INTEGER NOT NULL DEFAULT 1,
            template_id TEXT
        );
        CREATE INDEX rule_actions_by_rule ON rule_actions(rule_id, position);
        CREATE TABLE rule_edges (
            id TEXT PRIMARY KEY,
            rule_id TEXT NOT NULL REFERENCES rules(id) ON DELETE CASCADE,
            source_action_id TEXT,
            target_action_id TEXT NOT NULL,
            edge_type TEXT NOT NULL,
            source_output TEXT,
            edge_order INTEGER NOT NULL,
            created_date TEXT NOT NULL
        );
        CREATE INDEX rule_edges_by_rule ON rule_edges(rule_id, edge_order);
        CREATE TABLE alerts (
            id TEXT PRIMARY KEY,
            alert_type TEXT NOT NULL,
            severity TEXT NOT NULL,
            title TEXT NOT NULL,
            message TEXT NOT NULL,
            context TEXT,
            source_entity_name TEXT,
            source_entity_id TEXT,
            source_rule_id TEXT,
            action_url TEXT,
            status TEXT NOT NULL,
            expires_date TEXT,
            created_date TEXT NOT NULL,
            updated_date TEXT NOT NULL
        );
        CREATE INDEX alerts_by_created ON alerts(created_date DESC, id);
        CREATE TABLE alert_recipients (
            alert_id TEXT NOT NULL REFERENCES alerts(id) ON DELETE CASCADE,
            recipient_type TEXT NOT NULL CHECK (recipient_type IN ('user', 'role')),
            recipient_id TEXT NOT NULL,
            PRIMARY KEY (alert_id, recipient_type, recipient_id)
        );
        CREATE INDEX alert_recipients_by_recipient ON alert_recipients(recipient_type, recipient_id);
        CREATE TABLE alert_acknowledgments (
            id TEXT PRIMARY KEY,
            alert_id TEXT NOT NULL REFERENCES alerts(id) ON DELETE CASCADE,
            user_id TEXT NOT NULL REFERENCES users(id),
            acknowledged_date TEXT NOT NULL,
            notes TEXT NOT NULL DEFAULT ''
        );
        CREATE TABLE table_configs (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            description TEXT NOT NULL DEFAULT '',
            config TEXT NOT NULL,
            created_by TEXT NOT NULL,
            updated_by TEXT NOT NULL,
            created_date TEXT NOT NULL,
            updated_date TEXT NOT NULL,
            is_system INTEGER NOT NULL DEFAULT 0
        );
        CREATE TABLE schema_tables (
            schema_name TEXT NOT NULL,
            table_name TEXT NOT NULL,
            row_count_estimate INTEGER NOT NULL,
            PRIMARY KEY (schema_name, table_name)
        );
        CREATE TABLE schema_columns (
            schema_name TEXT NOT NULL,
            table_name TEXT NOT NULL,
            ordinal INTEGER NOT NULL,
            name TEXT NOT NULL,
            data_type TEXT NOT NULL,
            is_nullable INTEGER NOT NULL,
            is_primary_key INTEGER NOT NULL,
            default_value TEXT,
            PRIMARY KEY (schema_name, table_name, name)
        );
        CREATE TABLE schema_foreign_keys (
            name TEXT NOT NULL,
            schema_name TEXT NOT NULL,
            table_name TEXT NOT NULL,
            column_name TEXT NOT NULL,
            referenced_schema TEXT NOT NULL,
            referenced_table TEXT NOT NULL,
            referenced_column TEXT NOT NULL,
            PRIMARY KEY (schema_name, table_name, name)
        );
        CREATE TABLE backend_meta (
            key TEXT PRIMARY KEY,
            value TEXT NOT NULL
        );
        """,
    ),
)


class Database:
    """Owns the connection; reads go straight through, writes take ``write()``."""

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn
        self._write_lock = asyncio.Lock()

    @classmethod
    async def open(cls, path: str | Path) -> Database:
        conn = await aiosqlite.connect(str(path))
        conn.row_factory = sqlite3.Row
        await conn.execute("PRAGMA foreign_keys = ON")
        if str(path) != ":memory:":
            await conn.execute("PRAGMA journal_mode = WAL")
        return cls(conn)

    async def close(self) -> None:
        await self._conn.close()

    async def migrate(self) -> list[int]:
        """Apply every migration not yet recorded; return the versions applied now."""
        await self._conn.execute(
            "CREATE TABLE IF NOT EXISTS backend_migrations ("
            "version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL DEFAULT (datetime('now')))"
        )
        await self._conn.commit()
        done = {int(r[0]) for r in await self.fetch_all("SELECT version FROM backend_migrations")}
        applied: list[int] = []
        async with self._write_lock:
            for version, script in MIGRATIONS:
                if version in done:
                    continue
                # executescript commits first; record the version in the same script so a
                # crash cannot leave a half-applied migration marked as done.
                await self._conn.executescript(
                    f"BEGIN;\n{script}\nINSERT INTO backend_migrations(version) VALUES ({version});\nCOMMIT;"
                )
                applied.append(version)
        return applied

    async def fetch_all(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        async with self._conn.execute(sql, params) as cur:
            return list(await cur.fetchall())

    async def fetch_one(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Row | None:
        async with self._conn.execute(sql, params) as cur:
            return await cur.fetchone()

    async def fetch_value(self, sql: str, params: Sequence[Any] = ()) -> Any:
        row = await self.fetch_one(sql, params)
        return None if row is None else row[0]

    @asynccontextmanager
    async def write(self) -> AsyncIterator[Writer]:
        """A serialised write transaction: committed on success, rolled back on error."""
        async with self._write_lock:
            await self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield Writer(self._conn)
            except BaseException:
                await self._conn.rollback()
                raise
            await self._conn.commit()


class Writer:
    """The statements allowed inside ``Database.write()``."""

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        cur = await self._conn.execute(sql, params)
        count = cur.rowcount
        await cur.close()
        return count

    async def execute_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        await self._conn.executemany(sql, rows)


def request_db(request: Request) -> Database:
    """The database the app's lifespan opened."""
    db = request.app.state.db
    assert isinstance(db, Database)
    return db
