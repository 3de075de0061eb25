"""The small interfaces each engine's knowledge-base index fills in for the portable
logic (``storage.stores.kb_index``): its full-text ranking (``TextSearch``) and its typed
bucket tables' DDL (``BucketTables``), and ``parts``, the id lists cut to a size every
engine binds.

Why apart: they are the contract between the portable index and the engines
(``storage.sqlite`` and ``storage.postgres`` implement them); reading it should not
mean reading the index's SQL.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from storage.kb_filters_sql import Schema
from storage.kb_records import (
    KBRanked,
    KBScope,
    KBTextTuning,
)

_PART = 500  # ids per IN (...) list


class TextSearch(Protocol):
    """An engine's full-text ranking, with whatever statistics it caches."""

    def changed(self) -> None:
        """The index was written: cached statistics are stale."""
        ...

    async def selective_terms(self, terms: Sequence[str], min_matches: int, tuning: KBTextTuning) -> list[str]: ...

    async def term_splits(
        self, candidates: Mapping[str, Sequence[Sequence[str]]], tuning: KBTextTuning
    ) -> dict[str, tuple[str, ...]]: ...

    async def text_candidates(
        self, terms: Sequence[str], scope: KBScope, limit: int, tuning: KBTextTuning, schema: Schema | None = None
    ) -> KBRanked: ...


class BucketTables(Protocol):
    """An engine's DDL and statements of the typed side tables (its ``kb_buckets``)."""

    @property
    def SQL_TYPES(self) -> Mapping[str, str]:
        """A field type -> the engine's column type."""
        ...

    def create_table_statements(self, bucket: str, fields: Mapping[str, str]) -> list[str]: ...

    def add_column_statements(self, bucket: str, name: str, ftype: str) -> list[str]: ...

    def index_statements(self, bucket: str, fields: Mapping[str, str]) -> list[str]:
        """The field indexes of the bucket's ``fields`` (all of them), after columns were
        added: an engine whose indexes span several fields builds them again."""
        ...

    def upsert_statement(self, bucket: str, fields: Mapping[str, str]) -> str: ...

    def select_fields_statement(self, bucket: str, fields: Mapping[str, str]) -> str: ...


def parts(ids: Sequence[Any]) -> list[Sequence[Any]]:
    return [ids[i : i + _PART] for i in range(0, len(ids), _PART)]


__all__ = ["BucketTables", "TextSearch", "parts"]
