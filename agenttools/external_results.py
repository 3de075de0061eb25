"""Stored answers from external search (Perplexity): what was asked, what came back, cited where.

Every successful ``perplexity_search`` is kept with an id so that (a) the keywords the
model extracts can point at it (``index_keywords``), (b) a later
``knowledge_base_search`` whose query contains those keywords returns it again without
a second paid call (seed 002, SC-006), and (c) a final answer can cite it.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiosqlite
import orjson

from agenttools.rag.sqlite import apply_migrations, open_connection

MIGRATIONS_TABLE = "external_results_migrations"

_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE IF NOT EXISTS external_results (
        result_id TEXT PRIMARY KEY,
        provider TEXT NOT NULL,
        query TEXT NOT NULL,
        answer TEXT NOT NULL,
        citations TEXT NOT NULL DEFAULT '[]',
        model TEXT,
        query_id TEXT,
        conversation_id TEXT,
        created_at REAL NOT NULL
    );
    CREATE INDEX IF NOT EXISTS idx_external_results_query_id ON external_results(query_id);
    CREATE INDEX IF NOT EXISTS idx_external_results_created ON external_results(created_at)
    """,
)


@dataclass(frozen=True, slots=True)
class Citation:
    """One web source behind an external answer.

    ``index`` is the 1-based position in the provider's list, i.e. the ``[n]`` marker the
    answer text uses, so ``"<result_id>#<index>"`` names the same source the text cites.
    """

    index: int
    url: str
    title: str = ""
    date: str | None = None
    snippet: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"index": self.index, "url": self.url, "title": self.title}
        if self.date:
            d["date"] = self.date
        if self.snippet:
            d["snippet"] = self.snippet
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Citation:
        return cls(
            index=int(d["index"]),
            url=str(d["url"]),
            title=str(d.get("title") or ""),
            date=d.get("date"),
            snippet=d.get("snippet"),
        )


@dataclass(frozen=True, slots=True)
class ExternalResult:
    """A stored external answer. ``matched_keywords`` is filled only by keyword lookups."""

    id: str
    provider: str
    query: str
    answer: str
    citations: tuple[Citation, ...]
    model: str | None
    query_id: str | None
    conversation_id: str | None
    created_at: float
    matched_keywords: tuple[str, ...] = field(default=())

    def citation_source_id(self, citation: Citation) -> str:
        return f"{self.id}#{citation.index}"


def new_result_id() -> str:
    """``px_`` + 16 hex chars: short enough for a model to copy, safe in any id validator."""
    return "px_" + secrets.token_hex(8)


class ExternalResultStore:
    """Async store of external answers on the shared SQLite file (own connection)."""

    def __init__(self, db: aiosqlite.Connection, *, clock: Callable[[], float] = time.time) -> None:
        self._db = db
        self._clock = clock

    @classmethod
    async def open(cls, path: str | Path, *, clock: Callable[[], float] = time.time) -> ExternalResultStore:
        db = await open_connection(path)
        try:
            await apply_migrations(db, MIGRATIONS_TABLE, _MIGRATIONS)
        except BaseException:
            await db.close()
            raise
        return cls(db, clock=clock)

    async def close(self) -> None:
        await self._db.close()

    async def __aenter__(self) -> ExternalResultStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def save(
        self,
        *,
        provider: str,
        query: str,
        answer: str,
        citations: Sequence[Citation],
        model: str | None = None,
        query_id: str | None = None,
        conversation_id: str | None = None,
    ) -> ExternalResult:
        result = ExternalResult(
            id=new_result_id(),
            provider=provider,
            query=query,
            answer=answer,
            citations=tuple(citations),
            model=model,
            query_id=query_id,
            conversation_id=conversation_id,
            created_at=self._clock(),
        )
        await self._db.execute_fetchall(
            "INSERT INTO external_results"
            " (result_id, provider, query, answer, citations, model, query_id, conversation_id, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                result.id,
                provider,
                query,
                answer,
                orjson.dumps([c.to_dict() for c in result.citations]).decode(),
                model,
                query_id,
                conversation_id,
                result.created_at,
            ),
        )
        return result

    async def get(self, result_id: str) -> ExternalResult | None:
        found = await self.get_many([result_id])
        return found[0] if found else None

    async def get_many(self, result_ids: Sequence[str]) -> list[ExternalResult]:
        """The results that exist, in the order of ``result_ids`` (unknown ids skipped)."""
        ids = list(dict.fromkeys(result_ids))
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        rows = await self._db.execute_fetchall(
            "SELECT result_id, provider, query, answer, citations, model, query_id,"
            f" conversation_id, created_at FROM external_results WHERE result_id IN ({marks})",
            ids,
        )
        by_id = {row[0]: _row_to_result(row) for row in rows}
        return [by_id[i] for i in ids if i in by_id]


def _row_to_result(row: Sequence[Any]) -> ExternalResult:
    return ExternalResult(
        id=row[0],
        provider=row[1],
        query=row[2],
        answer=row[3],
        citations=tuple(Citation.from_dict(c) for c in orjson.loads(row[4] or "[]")),
        model=row[5],
        query_id=row[6],
        conversation_id=row[7],
        created_at=float(row[8]),
    )
