"""Running a transaction's statements so that a frozen client never holds its locks for ever.

A replica can stop between two of its own writes to the server: SIGSTOP, a paused VM, a
stop-the-world pause. Its open transaction keeps its row locks — the rows of the runs it
leases among them — and the other replicas' claims skip locked rows, so those runs wait
for it. PostgreSQL ends such a session after ``idle_in_transaction_session_timeout``
(the pool sets it to the run lease: ``database.PostgresOptions``), but it arms that timer
only when it answers a ``Sync`` (``ReadyForQuery``). In a pipeline — what psycopg's
``executemany`` uses — the rows go out one by one and the ``Sync`` only after the last:
a client frozen in between leaves the server waiting for the next message, ``active``
in ``ClientRead``, with no timer at all. That is how a paused replica's run was never
taken over (tests/test_replicas.py's ``paused`` case hung on a loaded machine; 12 of 40
random SIGSTOPs of a writing process left run rows locked past the timeout).

So no statement of a transaction goes out without its ``Sync``: each ``execute`` sends
Parse/Bind/Execute/Sync in one write. The rows of a run of identical single-row
``INSERT … VALUES (…)`` (a burst of run events, the tool-call log) become one multi-row
``INSERT``: one round trip, as cheap as the pipeline was; other repeated statements are
executed one by one. The one window left is a single message larger than the socket
takes in one write (a huge checkpoint), which a freeze would have to hit mid-write.

The knowledge base's bulk loads (``PostgresTx.executemany``) keep their pipelines: they
lock no run, and a round trip per row would cost ingest its speed; a replica frozen
mid-ingest holds those rows of its bucket until it runs again.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

from psycopg import AsyncConnection

from storage.writer import Statement, group_consecutive

#: ``INSERT INTO table(columns) VALUES (%s, …)`` and nothing after: rows of it can share
#: one statement with the same meaning (no ``ON CONFLICT`` that one row's update of
#: another would break, no ``RETURNING``, no sub-select reading earlier rows).
_SINGLE_ROW_INSERT = re.compile(
    r"^\s*INSERT\s+INTO\s+[\w.\"]+\s*\([^()]*\)\s*VALUES\s*(\(\s*%s(?:\s*,\s*%s)*\s*\))\s*$", re.IGNORECASE
)
#: PostgreSQL's limit on a statement's parameters is 65,535; rows per statement stay well
#: below it and the statement text short.
MAX_ROWS_PER_INSERT = 1000
MAX_PARAMS_PER_INSERT = 30_000


def multi_row_inserts(sql: str, rows: Sequence[Sequence[Any]]) -> Iterator[tuple[str, list[Any]]] | None:
    """``rows`` of a single-row ``INSERT … VALUES (…)`` as multi-row statements (the
    rows in order, chunked under the parameter limit); ``None`` when ``sql`` is not one."""
    found = _SINGLE_ROW_INSERT.match(sql)
    if found is None:
        return None
    values = found.group(1)
    width = values.count("%s")
    per = max(1, min(MAX_ROWS_PER_INSERT, MAX_PARAMS_PER_INSERT // width))
    head = sql[: found.start(1)]

    def chunks() -> Iterator[tuple[str, list[Any]]]:
        for i in range(0, len(rows), per):
            chunk = rows[i : i + per]
            yield head + ", ".join([values] * len(chunk)), [p for row in chunk for p in row]

    return chunks()


async def run_statements(conn: AsyncConnection[Any], statements: Sequence[Statement]) -> None:
    """Run ``statements`` in order on ``conn``'s open transaction, each sent with its
    ``Sync`` (see the module docstring): repeated single-row inserts as multi-row ones,
    any other repeated statement row by row."""
    async with conn.cursor() as cur:
        for sql, rows in group_consecutive(statements):
            merged = multi_row_inserts(sql, rows) if len(rows) > 1 else None
            if merged is None:
                for params in rows:
                    await cur.execute(sql, params)  # type: ignore[arg-type]
                continue
            for merged_sql, params in merged:
                await cur.execute(merged_sql, params)  # type: ignore[arg-type]
