"""Which tables the copy moves, in which order, and how each column's value converts
from SQLite to PostgreSQL (``TablePlan``, ``Column``).

Why apart: the differences between the two engines' rows (names, kinds, computed and
identity columns) are decided here, free of I/O, so the copier only reads and writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from storage.postgres.kb_chunk_sql import clean

#: Parents first (foreign keys); tables not named here follow in name order, and each
#: ``meta_<bucket>`` right after the documents.
ORDER = (
    "conversations",
    "messages",
    "runs",
    "run_events",
    "tool_calls",
    "workflow_drafts",
    "external_results",
    "keywords",
    "keyword_associations",
    "keyword_terms",
    "external_vectors",
    "kb_buckets",
    "kb_documents",
    "kb_chunks",
)
#: SQLite tables that are not data: bookkeeping (the chunk ids issued included: the
#: target's sequence is set past the copied ids; and ``kb_generation``: each database
#: counts its own knowledge-base writes from its migration's row, read afresh by the
#: processes that start on the copy), FTS5's own index of ``kb_chunks`` (PostgreSQL's
#: ``tsvector`` is computed from the rows), and the live log of runs' events, which the
#: copy settles into ``run_events`` first (``storage.stores.event_log``: what is left in
#: it are copies already settled).
NOT_DATA = ("schema_version", "sqlite_", "kb_chunks_fts", "kb_chunk_ids", "kb_generation", "run_log")
#: SQLite's own columns, with no counterpart in PostgreSQL: where a run's rows in the live log are.
SQLITE_ONLY = {("runs", "log_from"), ("runs", "log_first"), ("runs", "log_until")}
#: target column -> source column, where the engines name them differently
RENAMED = {("kb_chunks", "embedding"): "vector"}


@dataclass(frozen=True, slots=True)
class Column:
    target: str
    source: str | None  # None: computed (``kb_chunks.ntok``, ``kb_chunks.bucket``) or the rowid
    kind: str  # text | bytea | int | float | bool | vector | doc_bucket


@dataclass(frozen=True, slots=True)
class TablePlan:
    name: str
    key: tuple[str, ...]  # source keyset columns (primary key, or the rowid)
    select: tuple[str, ...]  # source expressions read per row
    columns: tuple[Column, ...]


def column_kind(data_type: str, udt: str) -> str:
    if udt == "vector":
        return "vector"
    if data_type in ("bytea",):
        return "bytea"
    if data_type in ("integer", "bigint", "smallint"):
        return "int"
    if data_type in ("double precision", "real", "numeric"):
        return "float"
    if data_type == "boolean":
        return "bool"
    return "text"


def convert_value(kind: str, value: Any) -> Any:
    if value is None:
        return None
    if kind == "text":
        if isinstance(value, bytes | memoryview):
            value = bytes(value).decode("utf-8", "replace")
        return clean(value if isinstance(value, str) else str(value))
    if kind == "bytea":
        return value.encode() if isinstance(value, str) else bytes(value)
    if kind == "int":
        return int(value)
    if kind == "float":
        return float(value)
    if kind == "bool":
        return bool(value)
    return np.frombuffer(bytes(value), dtype="<f4").astype(np.float32)  # vector


def copy_order(tables: Sequence[str]) -> list[str]:
    rank = {t: i for i, t in enumerate(ORDER)}
    meta = sorted(t for t in tables if t.startswith("meta_"))
    known = sorted((t for t in tables if t in rank), key=rank.__getitem__)
    rest = sorted(t for t in tables if t not in rank and not t.startswith("meta_"))
    out = known + rest
    at = out.index("kb_documents") + 1 if "kb_documents" in out else len(out)
    return out[:at] + meta + out[at:]


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def source_col(name: str) -> str:
    """A source column in SQLite (``rowid`` stays bare: it is not a declared column)."""
    return name if name == "rowid" else quote_ident(name)
