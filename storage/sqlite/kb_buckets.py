"""Typed bucket fields as real, indexed columns: the ``meta_<bucket>`` side tables.

Each bucket gets a side table ``meta_<bucket>`` (``doc_id`` primary key, one column per
field, one index per field), created on demand when the bucket is, so filters such as
``total_amount > 1000`` run on an index instead of parsing JSON per row. The JSON
``metadata`` column of the document keeps everything (typed or not) for display.

Each field's index covers the row: its own column, ``doc_id``, then the bucket's other
fields. SQLite answers a conjunction (``year = 2021 AND amount > 1000``) from one
index and checks the other conditions in the index entry: with an index of the first
column alone, every entry of its match sent SQLite back to the table for the rest of
the row (at 1M chunks, a filter keeping 38k of 71k invoices of one year: ~52 ms of CPU
for the documents through ``year`` alone, ~15 ms through the covering index).
``doc_id`` comes second so that the documents of an equality come out in id order:
the chunks are looked up by ``doc_id`` next (the filtered ranking's join, the vector
mask), and in the order of the other fields they were random reads of a large file
(the same join at 1M: 78 ms of CPU with the one-column index, 138 with the other
fields before ``doc_id``, 47 with ``doc_id`` second). A bucket with many fields
covers ``MAX_INDEX_FIELDS`` of them per index (the index would otherwise copy the
whole table once per field); a condition on a field left out reads the row, as
before. Adding a field rebuilds the bucket's indexes (their columns change);
migration 24 rebuilt the one-column indexes of existing files.

Bucket and field names become table and column names, which cannot be bound as
parameters: ``knowledge`` validates them, and every statement here checks them again
against the same strict pattern before interpolating anything.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping

import orjson

from storage.kb_tables import create_table_sql, ident, meta_table

SQL_TYPES = {
    "TEXT": "TEXT COLLATE NOCASE",
    "INTEGER": "INTEGER",
    "REAL": "REAL",
    "DATE": "TEXT",  # ISO YYYY-MM-DD sorts and compares correctly as text
    "BOOLEAN": "INTEGER",
}

#: Typed fields in one field's index (its own first, then the others as declared;
#: ``doc_id`` second is not counted).
MAX_INDEX_FIELDS = 8


def create_table_statements(bucket: str, fields: Mapping[str, str]) -> list[str]:
    return [create_table_sql(bucket, fields, SQL_TYPES), *index_statements(bucket, fields)]


def add_column_statements(bucket: str, name: str, ftype: str) -> list[str]:
    """The new column only: its index, and the others' new shape, come from
    ``index_statements`` once every new column is there."""
    return [f'ALTER TABLE {meta_table(bucket)} ADD COLUMN "{ident(name)}" {SQL_TYPES[ftype]}']


def index_columns(fields: Mapping[str, str], name: str) -> list[str]:
    """The columns of ``name``'s index, in order."""
    others = [ident(f) for f in fields if f != name][: MAX_INDEX_FIELDS - 1]
    return [ident(name), "doc_id", *others]


def index_statements(bucket: str, fields: Mapping[str, str]) -> list[str]:
    """Every field's index, built again (an index named as before but with other
    columns must be dropped first: ``CREATE INDEX IF NOT EXISTS`` would keep it)."""
    ident(bucket)
    out: list[str] = []
    for name in fields:
        index = f'"meta_{bucket}__{ident(name)}"'
        cols = ", ".join(f'"{c}"' for c in index_columns(fields, name))
        out.append(f"DROP INDEX IF EXISTS {index}")
        out.append(f"CREATE INDEX {index} ON {meta_table(bucket)}({cols})")
    return out


def rebuild_field_indexes(conn: sqlite3.Connection) -> None:
    """Migration 24: every bucket's field indexes in their covering shape. Costs one
    index build per field (a sort of the side table: ~5 s a field for 500k documents).
    Runs on the connection's own thread, inside the step's transaction
    (``storage.sqlite.migrations``)."""
    buckets = [(str(n), orjson.loads(s)) for n, s in conn.execute("SELECT name, schema FROM kb_buckets ORDER BY name")]
    for bucket, fields in buckets:
        if not fields:
            continue
        table = f"meta_{ident(bucket)}"
        if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone() is None:
            continue
        for stmt in index_statements(bucket, fields):
            conn.execute(stmt)


def upsert_statement(bucket: str, fields: Mapping[str, str]) -> str:
    names = ["doc_id", *(ident(n) for n in fields)]
    cols = ", ".join(f'"{n}"' for n in names)
    marks = ", ".join("?" * len(names))
    return f"INSERT OR REPLACE INTO {meta_table(bucket)} ({cols}) VALUES ({marks})"


def select_fields_statement(bucket: str, fields: Mapping[str, str]) -> str:
    cols = ", ".join(f'"{ident(f)}"' for f in fields)
    return f"SELECT {cols} FROM {meta_table(bucket)} WHERE doc_id = ?"
