"""Buckets and their typed metadata fields: the schema rules and the schema cache.

A bucket may declare typed fields (``{"total_amount": "REAL"}``); the storage engine
keeps them as real, indexed columns so filters such as ``total_amount > 1000`` run on an
index instead of parsing JSON per row, while the document's JSON ``metadata`` keeps
everything (typed or not) for display. Here: which schemas are allowed, how a record's
metadata is coerced onto one, and ``Buckets``, the known schemas over a ``KBIndex``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from knowledge.filters import coerce_typed, is_bad
from knowledge.names import check_bucket_name, check_field_name
from knowledge.types import FIELD_TYPES, BucketInfo
from storage.interfaces import KBIndex


class UnknownBucketError(ValueError):
    """A search or ingest named a bucket that does not exist; the message lists those that do."""


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


def typed_values(fields: Mapping[str, str], metadata: Mapping[str, Any]) -> list[Any]:
    """``typed_row`` without the errors (a value that does not fit is NULL): how
    existing documents fill fields added to their bucket later."""
    return typed_row(fields, metadata)[0]


class Buckets:
    """The bucket schemas, cached; reloaded when an unknown bucket is asked for, and
    after another process changed the knowledge base (``knowledge.freshness``)."""

    def __init__(self, index: KBIndex) -> None:
        self._index = index
        self._schemas: dict[str, dict[str, str]] = {}
        #: Counts this process's creates and deletes of buckets.
        self._changes = 0
        #: How many ``load`` reads are under way, and what was created (a schema) or
        #: deleted (``None``) here meanwhile, with its count: a read that began before
        #: such a change may not hold it and must not overwrite the cache without it
        #: (a bucket created here would vanish from every-bucket searches until the
        #: next change made elsewhere). Kept only while a read is under way.
        self._loading = 0
        self._during_load: dict[str, tuple[int, dict[str, str] | None]] = {}

    def __len__(self) -> int:
        return len(self._schemas)

    def names(self) -> list[str]:
        """The buckets known since the last ``load`` (or created here since)."""
        return list(self._schemas)

    def cached(self, bucket: str) -> dict[str, str] | None:
        return self._schemas.get(bucket)

    async def load(self) -> None:
        """Read every schema anew; a bucket this process created or deleted while the
        read ran keeps what this process did (the read may predate it)."""
        began = self._changes
        self._loading += 1
        try:
            schemas = await self._index.bucket_schemas()
        finally:
            self._loading -= 1
        for name, (count, schema) in self._during_load.items():
            if count <= began:
                continue  # made before this read began: the read holds it
            if schema is None:
                schemas.pop(name, None)
            else:
                schemas[name] = dict(schema)
        if not self._loading:
            self._during_load.clear()
        self._schemas = schemas

    def _changed(self, name: str, schema: dict[str, str] | None) -> None:
        self._changes += 1
        if self._loading:
            self._during_load[name] = (self._changes, schema)

    async def create(self, name: str, fields: Mapping[str, str] | None = None) -> dict[str, str]:
        """Create ``name`` with typed ``fields``, or add new fields to an existing bucket.

        Existing documents get the new columns filled from their JSON metadata where
        the value fits. Changing the type of an existing field is refused.
        """
        check_bucket_name(name)
        schema = validate_schema(fields or {})
        merged = await self._index.create_bucket(name, schema, typed_row=typed_values)
        self._schemas[name] = merged
        self._changed(name, merged)
        return dict(merged)

    async def exists(self, name: str) -> bool:
        if name in self._schemas:
            return True
        await self.load()
        return name in self._schemas

    def forget(self, name: str) -> None:
        """After the bucket was deleted."""
        self._schemas.pop(name, None)
        self._changed(name, None)

    async def ensure(self, name: str) -> None:
        if name in self._schemas:
            return
        await self.load()
        if name not in self._schemas:
            await self.create(name, {})

    async def schema(self, bucket: str) -> dict[str, str]:
        """The typed fields of ``bucket``; ``UnknownBucketError`` names no other bucket:
        which buckets a caller may hear of (not another user's private ones) is
        ``knowledge.bucket_privacy``'s to say, and it checks a named bucket first."""
        if bucket not in self._schemas:
            await self.load()
        if bucket not in self._schemas:
            raise UnknownBucketError(f"unknown bucket {bucket[:60]!r}")
        return dict(self._schemas[bucket])

    async def infos(self) -> list[BucketInfo]:
        return [
            BucketInfo(b.name, b.fields, b.documents, b.chunks, b.created_at) for b in await self._index.list_buckets()
        ]
