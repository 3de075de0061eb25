"""Typed bucket fields as real, indexed columns: the ``meta_<bucket>`` side tables.

As in the SQLite engine: one side table per bucket (``doc_id`` primary key, one column
per field, one index per column), created when the bucket is, so filters such as
``total_amount > 1000`` run on an index. Differences: TEXT fields are compared
case-insensitively through ``lower()`` (SQLite's ``NOCASE``: ASCII only, which is what
``lower()`` does under the byte-wise ``"C"`` collation these columns use) with an index
on ``lower(column)``; DATE is ISO text, also byte-wise; BOOLEAN is 0/1 in a ``BIGINT``.

Bucket and field names become table and column names: ``ident`` checks them against
the same strict pattern as the SQLite engine before anything is interpolated. Index
names longer than PostgreSQL's 63 bytes are replaced by a hash (PostgreSQL would
otherwise truncate them, and two long names could meet). Statements with parameters
are portable SQL (``?``, ``storage.dialect``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from storage.kb_tables import create_table_sql, ident, meta_table

SQL_TYPES = {
    "TEXT": 'TEXT COLLATE "C"',
    "INTEGER": "BIGINT",
    "REAL": "DOUBLE PRECISION",
    "DATE": 'TEXT COLLATE "C"',
    "BOOLEAN": "BIGINT",
}


def _index_name(bucket: str, name: str) -> str:
    full = f"meta_{bucket}__{name}"
    if len(full) <= 63:
        return full
    return "meta_ix_" + hashlib.sha1(full.encode()).hexdigest()[:24]


def create_table_statements(bucket: str, fields: Mapping[str, str]) -> list[str]:
    return [create_table_sql(bucket, fields, SQL_TYPES), *index_statements(bucket, fields)]


def add_column_statements(bucket: str, name: str, ftype: str) -> list[str]:
    """The new column only: its index comes from ``index_statements``."""
    return [f'ALTER TABLE {meta_table(bucket)} ADD COLUMN IF NOT EXISTS "{ident(name)}" {SQL_TYPES[ftype]}']


def index_statements(bucket: str, fields: Mapping[str, str]) -> list[str]:
    """Every field's index, where missing: one column each (PostgreSQL combines the
    indexes of a conjunction itself, a bitmap AND)."""
    return [index_statement(bucket, n, t) for n, t in fields.items()]


def index_statement(bucket: str, name: str, ftype: str) -> str:
    ident(bucket)
    ident(name)
    expr = f'lower("{name}")' if ftype == "TEXT" else f'"{name}"'
    return f'CREATE INDEX IF NOT EXISTS "{_index_name(bucket, name)}" ON "meta_{bucket}"(({expr}))'


def upsert_statement(bucket: str, fields: Mapping[str, str]) -> str:
    names = ["doc_id", *(ident(n) for n in fields)]
    cols = ", ".join(f'"{n}"' for n in names)
    marks = ", ".join("?" * len(names))
    updates = ", ".join(f'"{n}" = excluded."{n}"' for n in names[1:])
    conflict = f"DO UPDATE SET {updates}" if updates else "DO NOTHING"
    return f"INSERT INTO {meta_table(bucket)} ({cols}) VALUES ({marks}) ON CONFLICT (doc_id) {conflict}"


def select_fields_statement(bucket: str, fields: Mapping[str, str]) -> str:
    cols = ", ".join(f'"{ident(f)}"' for f in fields)
    return f"SELECT {cols} FROM {meta_table(bucket)} WHERE doc_id = ?"
