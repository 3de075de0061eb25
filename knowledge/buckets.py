"""Bucket schemas: typed metadata fields stored as real, indexed columns.

Each bucket with fields gets a side table ``meta_<bucket>`` (``doc_id`` primary key,
one column per field, one index per column) so filters such as
``total_amount > 1000`` run on an index instead of parsing JSON per row. The JSON
``metadata`` column of the document keeps everything (typed or not) for display.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from knowledge.filters import coerce_typed, is_bad
from knowledge.names import check_bucket_name, check_field_name
from knowledge.types import FIELD_TYPES

_SQL_TYPES = {
    "TEXT": "TEXT COLLATE NOCASE",
    "INTEGER": "INTEGER",
    "REAL": "REAL",
    "DATE": "TEXT",  # ISO YYYY-MM-DD sorts and compares correctly as text
    "BOOLEAN": "INTEGER",
}


def validate_schema(fields: Mapping[str, Any]) -> dict[str, str]:
    """Check names and types; returns the normalised ``{field: TYPE}``."""
    if not isinstance(fields, Mapping):
        raise ValueError("fields must be an object of {name: type}")
    if len(fields) > 64:
        raise ValueError("a bucket may declare at most 64 fields")
    out: dict[str, str] = {}
    for name, ftype in fields.items():
        check_field_name(name)
        t = str(ftype).strip().upper() if isinstance(ftype, str) else ""
        if t not in FIELD_TYPES:
            raise ValueError(f"field {name!r}: type must be one of {', '.join(sorted(FIELD_TYPES))}")
        out[name] = t
    return out


def meta_table(bucket: str) -> str:
    """Quoted table name; the bucket name is validated first, so this is safe to interpolate."""
    return f'"meta_{check_bucket_name(bucket)}"'


def create_table_statements(bucket: str, fields: Mapping[str, str]) -> list[str]:
    table = meta_table(bucket)
    cols = ", ".join(f'"{check_field_name(n)}" {_SQL_TYPES[t]}' for n, t in fields.items())
    stmts = [
        f"CREATE TABLE IF NOT EXISTS {table} (doc_id TEXT PRIMARY KEY "
        f"REFERENCES kb_documents(id) ON DELETE CASCADE{', ' + cols if cols else ''})"
    ]
    stmts += [index_statement(bucket, n) for n in fields]
    return stmts


def add_column_statements(bucket: str, name: str, ftype: str) -> list[str]:
    return [
        f'ALTER TABLE {meta_table(bucket)} ADD COLUMN "{check_field_name(name)}" {_SQL_TYPES[ftype]}',
        index_statement(bucket, name),
    ]


def index_statement(bucket: str, name: str) -> str:
    check_bucket_name(bucket)
    check_field_name(name)
    return f'CREATE INDEX IF NOT EXISTS "meta_{bucket}__{name}" ON "meta_{bucket}"("{name}")'


def upsert_statement(bucket: str, fields: Mapping[str, str]) -> str:
    names = ["doc_id", *(check_field_name(n) for n in fields)]
    cols = ", ".join(f'"{n}"' for n in names)
    marks = ", ".join("?" * len(names))
    return f"INSERT OR REPLACE INTO {meta_table(bucket)} ({cols}) VALUES ({marks})"


def typed_row(fields: Mapping[str, str], metadata: Mapping[str, Any]) -> tuple[list[Any], list[str]]:
    """Coerce a record's metadata onto the schema: ``(values in field order, errors)``.

    Missing fields are NULL; a present value that does not fit its type is an error
    (the record is rejected, never stored half-typed).
    """
    values: list[Any] = []
    errors: list[str] = []
    for name, ftype in fields.items():
        raw = metadata.get(name)
        if raw is None:
            values.append(None)
            continue
        v = coerce_typed(ftype, raw)
        if is_bad(v):
            shown = repr(raw)
            errors.append(f"field {name!r} expects {ftype}, got {shown[:40]}")
            values.append(None)
        else:
            values.append(v)
    return values, errors
