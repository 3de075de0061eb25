"""Typed bucket fields as real, indexed columns: the ``meta_<bucket>`` side tables.

Each bucket gets a side table ``meta_<bucket>`` (``doc_id`` primary key, one column per
field, one index per column), created on demand when the bucket is, so filters such as
``total_amount > 1000`` run on an index instead of parsing JSON per row. The JSON
``metadata`` column of the document keeps everything (typed or not) for display.

Bucket and field names become table and column names, which cannot be bound as
parameters: ``knowledge`` validates them, and every statement here checks them again
against the same strict pattern before interpolating anything.
"""

from __future__ import annotations

from collections.abc import Mapping

from storage.kb_tables import create_table_sql, ident, meta_table

SQL_TYPES = {
    "TEXT": "TEXT COLLATE NOCASE",
    "INTEGER": "INTEGER",
    "REAL": "REAL",
    "DATE": "TEXT",  # ISO YYYY-MM-DD sorts and compares correctly as text
    "BOOLEAN": "INTEGER",
}


def create_table_statements(bucket: str, fields: Mapping[str, str]) -> list[str]:
    stmts = [create_table_sql(bucket, fields, SQL_TYPES)]
    stmts += [index_statement(bucket, n) for n in fields]
    return stmts


def add_column_statements(bucket: str, name: str, ftype: str) -> list[str]:
    return [
        f'ALTER TABLE {meta_table(bucket)} ADD COLUMN "{ident(name)}" {SQL_TYPES[ftype]}',
        index_statement(bucket, name),
    ]


def index_statement(bucket: str, name: str) -> str:
    ident(bucket)
    ident(name)
    return f'CREATE INDEX IF NOT EXISTS "meta_{bucket}__{name}" ON "meta_{bucket}"("{name}")'


def upsert_statement(bucket: str, fields: Mapping[str, str]) -> str:
    names = ["doc_id", *(ident(n) for n in fields)]
    cols = ", ".join(f'"{n}"' for n in names)
    marks = ", ".join("?" * len(names))
    return f"INSERT OR REPLACE INTO {meta_table(bucket)} ({cols}) VALUES ({marks})"


def select_fields_statement(bucket: str, fields: Mapping[str, str]) -> str:
    cols = ", ".join(f'"{ident(f)}"' for f in fields)
    return f"SELECT {cols} FROM {meta_table(bucket)} WHERE doc_id = ?"
