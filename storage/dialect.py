"""What SQLite and PostgreSQL spell differently, and nothing else.

The stores in ``storage.stores`` are written once, in *portable* SQL: ``?`` for every
parameter, ``ON CONFLICT … DO NOTHING/UPDATE`` for upserts (both engines speak it),
``IN (?, ?, …)`` for lists. A ``Dialect`` turns that text into the engine's own
(``render``) and supplies the few pieces that really differ: the current time as an
expression, row locking (``FOR UPDATE``; SQLite's one writer needs none), advisory
locks (PostgreSQL orders concurrent replicas with them; SQLite's writer already runs
one transaction at a time), and text that PostgreSQL cannot hold (NUL characters).

The two instances live with their engines (``storage.sqlite.dialect``,
``storage.postgres.dialect``), next to the executor each engine provides
(``storage.sql.SqlEngine``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

Statement = tuple[str, Sequence[Any]]


@dataclass(frozen=True, slots=True)
class Dialect:
    name: Literal["sqlite", "postgres"]
    #: ``qmark`` (``?``, SQLite) or ``format`` (``%s``, psycopg).
    paramstyle: Literal["qmark", "format"]
    #: Seconds since the epoch as a ``DOUBLE``, evaluated when the statement runs.
    now: str
    #: Appended to a ``SELECT`` that must keep its rows locked until the transaction ends.
    for_update: str
    #: ``SELECT`` taking a transaction-scoped advisory lock on a text key (``None``: the
    #: engine serialises write transactions already).
    text_lock_sql: str | None
    #: The same, on a 64-bit integer key.
    number_lock_sql: str | None
    #: Text columns reject NUL characters (PostgreSQL).
    text_rejects_nul: bool
    #: A float32 vector as a parameter (SQLite: its bytes; PostgreSQL: pgvector's adapter).
    encode_vector: Callable[[np.ndarray], Any]
    #: A stored vector, as read, back to a float32 array.
    decode_vector: Callable[[Any], np.ndarray]
    #: Null-safe equality and inequality (``a IS b`` / ``a IS NOT DISTINCT FROM b``).
    same_as: str
    differs_from: str
    #: Appended to a text expression so it compares byte by byte (SQLite's default;
    #: PostgreSQL's ``"C"`` collation whatever the database's locale).
    byte_order: str
    #: Events of runs not yet settled are appended to ``run_log`` (SQLite, issue 23;
    #: ``storage.stores.event_log`` says why and how they are read).
    live_log: bool = False

    def render(self, portable: str) -> str:
        """``portable`` (``?`` placeholders) in this engine's paramstyle. Portable SQL
        never holds a ``?`` or ``%`` inside a literal: values are always parameters."""
        if self.paramstyle == "qmark":
            return portable
        return portable.replace("%", "%%").replace("?", "%s")

    def marks(self, count: int) -> str:
        """``?, ?, …`` (portable) for an ``IN`` list or a ``VALUES`` row of ``count``."""
        return ", ".join("?" * count)

    def lock(self, key: str | int) -> Statement | None:
        """The statement that takes the advisory lock ``key`` until the transaction
        ends, or ``None`` where the engine needs none."""
        sql = self.text_lock_sql if isinstance(key, str) else self.number_lock_sql
        return None if sql is None else (sql, (key,))

    def text(self, value: str | None) -> str | None:
        """``value`` as the engine can store it: a NUL becomes U+FFFD where text
        columns reject it (a tool's output might hold one)."""
        if self.text_rejects_nul and value is not None and "\x00" in value:
            return value.replace("\x00", "\ufffd")
        return value


__all__ = ["Dialect", "Statement"]
