"""The names and the shape of a bucket's typed side table, the same on both engines.

Each bucket gets a side table ``meta_<bucket>`` (``doc_id`` primary key, one column per
field, one index per column), created on demand when the bucket is, so filters such as
``total_amount > 1000`` run on an index instead of parsing JSON per row. Bucket and
field names become table and column names, which cannot be bound as parameters:
``knowledge`` validates them, and every statement checks them again (``ident``)
against the same strict pattern before interpolating anything. Column types and
indexes are the engines' own (``storage/*/kb_buckets.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_IDENT = re.compile(r"^[a-z][a-z0-9_]{0,40}$")


def ident(name: str) -> str:
    if not isinstance(name, str) or _IDENT.fullmatch(name) is None:
        raise ValueError(f"not a safe identifier: {str(name)[:60]!r}")
    return name


def meta_table(bucket: str) -> str:
    """Quoted table name of the bucket's typed fields."""
    return f'"meta_{ident(bucket)}"'


def create_table_sql(bucket: str, fields: Mapping[str, str], sql_types: Mapping[str, str]) -> str:
    """``CREATE TABLE`` of the side table, with ``sql_types`` mapping a field type to
    the engine's column type."""
    cols = ", ".join(f'"{ident(n)}" {sql_types[t]}' for n, t in fields.items())
    return (
        f"CREATE TABLE IF NOT EXISTS {meta_table(bucket)} (doc_id TEXT PRIMARY KEY "
        f"REFERENCES kb_documents(id) ON DELETE CASCADE{', ' + cols if cols else ''})"
    )
