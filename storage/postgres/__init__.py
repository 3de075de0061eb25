"""The scale-out engine: every store on one PostgreSQL database (with pgvector),
migrated once at open — however many replicas open it at the same moment.

Same interfaces, same contract suite (``tests/storage``) as the SQLite engine; needs
the ``postgres`` extra (``pip install 'agentchat[postgres]'``: psycopg 3, psycopg-pool,
pgvector).
"""

from __future__ import annotations

from storage.bundle import SqlStorage
from storage.postgres.database import Conn, PostgresDatabase, PostgresOptions, redact
from storage.postgres.dialect import PostgresSql
from storage.postgres.kb_ddl import ensure_text_indexes
from storage.postgres.kb_index import PostgresKBIndex
from storage.postgres.lock_waits import DEFAULT_LOCK_TIMEOUT_MS, LockRetries
from storage.postgres.migrations import migrate
from storage.postgres.notify import RunEventsListener
from storage.postgres.runs import PostgresRunStore


class PostgresStorage(SqlStorage[PostgresDatabase, PostgresRunStore, PostgresKBIndex]):
    """Every store of the service on one database. Built by ``open_postgres_storage``;
    its ``run_feed`` wakes this process's followers of runs executing on other replicas
    (LISTEN/NOTIFY)."""

    engine = "postgres"

    async def close(self) -> None:
        await self.kb_index.stop_graph_repair()
        await super().close()


#: How often the server checks, while a statement runs, that its client is still there
#: (PostgreSQL >= 14). A request's deadline cuts a connection client-side
#: (``storage/postgres/statement_deadline.py``); without this a live but slow server ran
#: the cut statement to its end beside the pool's replacement connection, so each cut
#: added a backend (a review: 16 backends for a pool of 4 after three waves of cuts).
CLIENT_CHECK_INTERVAL_MS = 1000


async def _configure(conn: Conn) -> None:
    """Every pooled connection speaks pgvector's ``vector`` (binary, numpy in and out),
    and has the server notice a client gone while a statement runs."""
    from pgvector.psycopg import register_vector_async

    await register_vector_async(conn)
    if conn.info.server_version >= 140000:
        await conn.execute(f"SET client_connection_check_interval = {CLIENT_CHECK_INTERVAL_MS}")


def _start_feed(url: str, opts: PostgresOptions, db: PostgresDatabase) -> RunEventsListener:
    async def send(sql: str, payload: str) -> None:
        await db.fetchone(sql, (payload,))

    feed = RunEventsListener(url, connect_timeout_s=opts.connect_timeout_s, send=send)
    feed.start()
    return feed


async def open_postgres_storage(url: str, opts: PostgresOptions | None = None) -> PostgresStorage:
    """Apply every pending migration (once, under an advisory lock, whatever the number
    of replicas starting), then open the pool and start the writer: nothing reads or
    writes a table before the schema is complete."""
    opts = opts or PostgresOptions()
    # The pool's lock_timeout bounds each attempt of a migration step too (never 0 there:
    # a migration waiting forever on a lock would queue every writer of the table).
    retries = LockRetries(lock_timeout_ms=opts.lock_timeout_ms or DEFAULT_LOCK_TIMEOUT_MS)
    version = await migrate(url, connect_timeout=max(1, int(opts.connect_timeout_s)), retries=retries)
    db = await PostgresDatabase.open(url, opts, configure=_configure)
    try:
        db.start()
        # A bulk load into an empty knowledge base builds the postings' B-tree and the
        # chunks' GIN index at its end; one that died before then left them missing
        # (exact without them, but slow).
        await db.transact(ensure_text_indexes)
        kb_index = PostgresKBIndex(db)
        # Likewise a bucket's HNSW graph (and every graph of a database upgraded past
        # migration 26, which drops the per-dimension ones) - in the background: at 1M
        # vectors that is minutes, and a start must not wait for it (nor a liveness
        # probe kill it half-way). Until built, that bucket's searches are exact.
        kb_index.start_graph_repair(max(1, int(opts.connect_timeout_s)))
        return PostgresStorage.assemble(
            db=db,
            sql=PostgresSql(db),
            schema_version=version,
            runs=PostgresRunStore(db),
            kb_index=kb_index,
            run_feed=_start_feed(url, opts, db),
        )
    except BaseException:
        await db.close()
        raise


__all__ = ["PostgresDatabase", "PostgresOptions", "PostgresStorage", "open_postgres_storage", "redact"]
