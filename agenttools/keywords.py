"""The keyword index of seed 001: keywords extracted from external answers, kept for later queries.

The model calls ``index_keywords`` after ``perplexity_search``; every keyword is
normalised (NFKC + casefold, whitespace collapsed, edge punctuation dropped) into a
*key* that is UNIQUE in the table, so "Straße", "STRASSE" and full-width "ＳＴＲＡＳＳＥ"
are one keyword. Re-indexing a known keyword merges it (``usage_count + 1``,
``last_used_at`` / ``updated_at`` set) and adds an association to the query, the external
result and the conversation — in one ``BEGIN IMMEDIATE`` transaction with
``INSERT … ON CONFLICT DO UPDATE``, so concurrent calls (on this connection or another
process's) never lose an update.

``lookup(text)`` is the read side: the keys that occur in a query as whole tokens or
phrases point at the stored external answers, which ``knowledge_base_search`` returns.
"""

from __future__ import annotations

import asyncio
import time
import unicodedata
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import aiosqlite

from agenttools.external_results import ExternalResult, ExternalResultStore
from agenttools.rag.sqlite import apply_migrations, open_connection, write_transaction

MIGRATIONS_TABLE = "keywords_migrations"

MIN_CHARS = 2
MAX_CHARS = 50
MAX_WORDS = 6
MIN_PER_CALL = 3
MAX_PER_CALL = 10
_SQL_IN_CHUNK = 500
_MAX_QUERY_TOKENS = 256

# Punctuation kept at token edges because it changes meaning ("C#", "AT&T", "50%").
_KEEP_EDGE = frozenset("#%&@+")

STOP_WORDS: frozenset[str] = frozenset(
    """
    a an the and or but nor so yet if then else of in on at to for from by with without
    into onto over under about above below between among through during before after
    is are was were be been being am do does did doing have has had having can could
    shall should will would may might must not no yes it its it's this that these those
    there here what which who whom whose when where why how i me my we us our you your
    he him his she her they them their as than too very just also only all any both each
    few more most other some such own same s t don't isn't aren't wasn't weren't
    """.split()
)

# Words that are real words but say nothing as a keyword (seed 000: "information", "a").
VAGUE_WORDS: frozenset[str] = frozenset(
    """
    information info data thing things stuff something anything everything answer answers
    question questions result results query queries search searches topic topics subject
    content details detail overview summary general various misc miscellaneous example
    examples item items way ways lot lots kind type types part parts aspect aspects fact
    facts issue issues case cases point points source sources reference references
    perplexity keyword keywords knowledge web internet online article page link url
    """.split()
)

GENERIC_WORDS: frozenset[str] = STOP_WORDS | VAGUE_WORDS


# --------------------------------------------------------------------------- normalisation


def display_form(raw: str) -> str:
    """What we store and show: NFKC (full-width → ASCII), whitespace collapsed, trimmed."""
    return " ".join(unicodedata.normalize("NFKC", raw).split())


def _strip_edge_punctuation(token: str) -> str:
    start, end = 0, len(token)
    while start < end and _is_edge_punct(token[start]):
        start += 1
    while end > start and _is_edge_punct(token[end - 1]):
        end -= 1
    return token[start:end]


def _is_edge_punct(ch: str) -> bool:
    return ch not in _KEEP_EDGE and unicodedata.category(ch)[0] == "P"


def tokens(text: str) -> list[str]:
    """Case-free tokens of ``text``: NFKC, casefold, split on whitespace, edge punctuation off."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    out = []
    for raw in folded.split():
        tok = _strip_edge_punctuation(raw)
        if tok:
            out.append(tok)
    return out


def keyword_key(text: str) -> str:
    """The UNIQUE key of a keyword; a query contains it when its tokens contain this phrase."""
    return " ".join(tokens(text))


# --------------------------------------------------------------------------- validation


@dataclass(frozen=True, slots=True)
class Candidate:
    """A keyword that passed validation: its unique key and its display form."""

    key: str
    display: str


@dataclass(frozen=True, slots=True)
class Rejection:
    """A keyword the model must fix; ``reason`` is a stable code, ``message`` says how."""

    keyword: str
    reason: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"keyword": self.keyword, "reason": self.reason, "message": self.message}


@dataclass(frozen=True, slots=True)
class KeywordValidation:
    accepted: tuple[Candidate, ...]
    rejected: tuple[Rejection, ...]
    duplicates: tuple[str, ...]  # given more than once in this call (merged, not rejected)


def check_keyword(raw: object) -> Candidate | Rejection:
    """Validate one keyword against seed 001's rules (2-50 chars trimmed, not generic)."""
    if not isinstance(raw, str):
        return Rejection(repr(raw)[:60], "not_text", "Each keyword must be a string.")
    display = display_form(raw)
    if not display:
        return Rejection(raw, "empty", "Keyword is empty after trimming whitespace.")
    if len(display) < MIN_CHARS:
        return Rejection(raw, "too_short", f"Keyword must be at least {MIN_CHARS} characters after trimming.")
    if len(display) > MAX_CHARS:
        return Rejection(
            raw,
            "too_long",
            f"Keyword is {len(display)} characters; the limit is {MAX_CHARS}. Use a shorter phrase.",
        )
    toks = tokens(display)
    if not toks or not any(ch.isalnum() for ch in "".join(toks)):
        return Rejection(raw, "no_letters", "Keyword must contain letters or digits.")
    if len(toks) > MAX_WORDS:
        return Rejection(raw, "too_many_words", f"Keyword has {len(toks)} words; use at most {MAX_WORDS}.")
    key = " ".join(toks)
    if key in GENERIC_WORDS or all(t in STOP_WORDS for t in toks):
        return Rejection(
            raw,
            "generic",
            "Keyword is too generic; use a specific term such as a name, product, "
            "technology or 'topic + domain' phrase.",
        )
    return Candidate(key=key, display=display)


def validate_keywords(raw_keywords: Sequence[object]) -> KeywordValidation:
    """Check each keyword and merge duplicates of the same key within the call."""
    accepted: dict[str, Candidate] = {}
    rejected: list[Rejection] = []
    duplicates: list[str] = []
    for raw in raw_keywords:
        checked = check_keyword(raw)
        if isinstance(checked, Rejection):
            rejected.append(checked)
        elif checked.key in accepted:
            duplicates.append(checked.display)
        else:
            accepted[checked.key] = checked
    return KeywordValidation(tuple(accepted.values()), tuple(rejected), tuple(duplicates))


# --------------------------------------------------------------------------- store

_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE IF NOT EXISTS keywords (
        keyword_id TEXT PRIMARY KEY,
        key TEXT NOT NULL UNIQUE,
        display TEXT NOT NULL CHECK (length(display) BETWEEN 2 AND 50),
        usage_count INTEGER NOT NULL DEFAULT 1 CHECK (usage_count >= 1),
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        last_used_at REAL
    );
    CREATE INDEX IF NOT EXISTS idx_keywords_usage ON keywords(usage_count, last_used_at);
    CREATE TABLE IF NOT EXISTS keyword_associations (
        association_id TEXT PRIMARY KEY,
        keyword_id TEXT REFERENCES keywords(keyword_id) ON DELETE SET NULL,
        keyword_key TEXT NOT NULL,
        query_id TEXT,
        external_result_id TEXT,
        conversation_id TEXT,
        created_at REAL NOT NULL,
        archived_at REAL,
        CHECK (query_id IS NOT NULL OR external_result_id IS NOT NULL)
    );
    CREATE INDEX IF NOT EXISTS idx_keyword_assoc_keyword ON keyword_associations(keyword_id);
    CREATE INDEX IF NOT EXISTS idx_keyword_assoc_query ON keyword_associations(query_id);
    CREATE INDEX IF NOT EXISTS idx_keyword_assoc_result ON keyword_associations(external_result_id);
    CREATE UNIQUE INDEX IF NOT EXISTS uq_keyword_assoc ON keyword_associations(
        keyword_id, ifnull(query_id, ''), ifnull(external_result_id, ''), ifnull(conversation_id, '')
    )
    """,
)


@dataclass(frozen=True, slots=True)
class IndexedKeyword:
    key: str
    display: str
    usage_count: int
    merged: bool  # the keyword existed before this call

    def to_dict(self) -> dict[str, object]:
        return {"keyword": self.display, "usage_count": self.usage_count, "merged": self.merged}


@dataclass(frozen=True, slots=True)
class KeywordRecord:
    keyword_id: str
    key: str
    display: str
    usage_count: int
    created_at: float
    updated_at: float
    last_used_at: float | None


@dataclass(frozen=True, slots=True)
class Association:
    keyword_key: str
    query_id: str | None
    external_result_id: str | None
    conversation_id: str | None
    archived: bool


class KeywordStore:
    """Keywords and their associations on the shared SQLite file (own connection).

    One asyncio lock serialises this connection (SQLite has one transaction per
    connection); ``BEGIN IMMEDIATE`` + busy timeout serialise against other connections.
    """

    def __init__(
        self,
        db: aiosqlite.Connection,
        results: ExternalResultStore,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = db
        self._results = results
        self._clock = clock
        self._lock = asyncio.Lock()

    @classmethod
    async def open(
        cls,
        path: str | Path,
        results: ExternalResultStore,
        *,
        clock: Callable[[], float] = time.time,
    ) -> KeywordStore:
        db = await open_connection(path)
        try:
            await apply_migrations(db, MIGRATIONS_TABLE, _MIGRATIONS)
        except BaseException:
            await db.close()
            raise
        return cls(db, results, clock=clock)

    async def close(self) -> None:
        await self._db.close()

    async def __aenter__(self) -> KeywordStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---------------------------------------------------------------- write side

    async def index(
        self,
        keywords: Sequence[Candidate],
        *,
        query_id: str | None,
        external_result_ids: Sequence[str] = (),
        conversation_id: str | None = None,
    ) -> list[IndexedKeyword]:
        """Upsert ``keywords`` and associate each with the query / results / conversation.

        Keys must be distinct (``validate_keywords`` merges duplicates). One transaction:
        either every keyword and association lands or none does.
        """
        unique = list({c.key: c for c in keywords}.values())
        if not unique:
            return []
        result_ids: list[str | None] = list(dict.fromkeys(external_result_ids)) or [None]
        if query_id is None and result_ids == [None]:
            raise ValueError("an association needs a query id or an external result id")
        now = self._clock()
        values_sql = ",".join("(?, ?, ?, 1, ?, ?, NULL)" for _ in unique)
        params: list[object] = []
        for c in unique:
            params.extend((uuid.uuid4().hex, c.key, c.display, now, now))
        async with self._lock, write_transaction(self._db) as db:
            rows = await db.execute_fetchall(
                "INSERT INTO keywords"
                " (keyword_id, key, display, usage_count, created_at, updated_at, last_used_at)"
                f" VALUES {values_sql}"
                " ON CONFLICT(key) DO UPDATE SET usage_count = usage_count + 1,"
                " updated_at = excluded.updated_at, last_used_at = excluded.updated_at"
                " RETURNING keyword_id, key, display, usage_count",
                params,
            )
            by_key = {row[1]: row for row in rows}
            await db.executemany(
                "INSERT OR IGNORE INTO keyword_associations (association_id, keyword_id,"
                " keyword_key, query_id, external_result_id, conversation_id, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (uuid.uuid4().hex, by_key[c.key][0], c.key, query_id, rid, conversation_id, now)
                    for c in unique
                    for rid in result_ids
                ],
            )
        return [
            IndexedKeyword(
                key=c.key,
                display=str(by_key[c.key][2]),
                usage_count=int(by_key[c.key][3]),
                merged=int(by_key[c.key][3]) > 1,
            )
            for c in unique
        ]

    async def prune(self, min_usage: int, older_than_days: float) -> int:
        """Delete keywords used fewer than ``min_usage`` times and idle for ``older_than_days``.

        "Idle" is measured from ``last_used_at`` (last merge or query match), else
        ``updated_at``. Their associations are kept for audit, marked archived (seed 001:
        "associations preserved"), and no longer lead lookups anywhere. Returns how many
        keywords were pruned.
        """
        if min_usage < 1:
            raise ValueError("min_usage must be >= 1 (every keyword has been used at least once)")
        if older_than_days < 0:
            raise ValueError("older_than_days must be >= 0")
        now = self._clock()
        cutoff = now - older_than_days * 86_400.0
        where = "usage_count < ? AND COALESCE(last_used_at, updated_at) < ?"
        async with self._lock, write_transaction(self._db) as db:
            await db.execute_fetchall(
                "UPDATE keyword_associations SET archived_at = ?, keyword_id = NULL"
                f" WHERE keyword_id IN (SELECT keyword_id FROM keywords WHERE {where})",
                (now, min_usage, cutoff),
            )
            rows = await db.execute_fetchall(
                f"DELETE FROM keywords WHERE {where} RETURNING keyword_id", (min_usage, cutoff)
            )
        return len(list(rows))

    # ---------------------------------------------------------------- read side

    async def lookup(self, text: str, *, limit: int = 3) -> list[ExternalResult]:
        """External answers whose keywords occur in ``text`` (whole tokens / phrases).

        Ranked by how much of the query the matched keywords cover (a three-word phrase
        counts more than a single word), newest first on ties. Matched keywords get
        ``last_used_at`` set, which keeps them from being pruned as idle.
        """
        candidates = _phrases(tokens(text)[:_MAX_QUERY_TOKENS])
        if not candidates:
            return []
        matches: list[tuple[str, str, str]] = []  # (result_id, key, display)
        async with self._lock:
            for chunk in _chunks(sorted(candidates), _SQL_IN_CHUNK):
                marks = ",".join("?" * len(chunk))
                rows = await self._db.execute_fetchall(
                    "SELECT a.external_result_id, k.key, k.display FROM keywords k"
                    " JOIN keyword_associations a ON a.keyword_id = k.keyword_id"
                    f" WHERE k.key IN ({marks}) AND a.external_result_id IS NOT NULL",
                    chunk,
                )
                matches.extend((r[0], r[1], r[2]) for r in rows)
            if matches:
                keys = sorted({m[1] for m in matches})
                marks = ",".join("?" * len(keys))
                async with write_transaction(self._db) as db:
                    await db.execute_fetchall(
                        f"UPDATE keywords SET last_used_at = ? WHERE key IN ({marks})",
                        (self._clock(), *keys),
                    )
        if not matches:
            return []
        matched: dict[str, dict[str, str]] = {}
        for result_id, key, display in matches:
            matched.setdefault(result_id, {})[key] = display
        results = await self._results.get_many(list(matched))
        ranked = sorted(
            results,
            key=lambda r: (sum(len(k.split()) for k in matched[r.id]), r.created_at),
            reverse=True,
        )
        return [_with_keywords(r, tuple(sorted(matched[r.id].values()))) for r in ranked[:limit]]

    async def get(self, keyword: str) -> KeywordRecord | None:
        """The stored keyword that ``keyword`` normalises to (for admin views and tests)."""
        async with self._lock:
            rows = list(
                await self._db.execute_fetchall(
                    "SELECT keyword_id, key, display, usage_count, created_at, updated_at,"
                    " last_used_at FROM keywords WHERE key = ?",
                    (keyword_key(keyword),),
                )
            )
        if not rows:
            return None
        r = rows[0]
        return KeywordRecord(r[0], r[1], r[2], int(r[3]), float(r[4]), float(r[5]), r[6])

    async def associations(self, keyword: str) -> list[Association]:
        """All associations recorded for ``keyword``, archived ones included."""
        async with self._lock:
            rows = await self._db.execute_fetchall(
                "SELECT keyword_key, query_id, external_result_id, conversation_id, archived_at"
                " FROM keyword_associations WHERE keyword_key = ? ORDER BY created_at",
                (keyword_key(keyword),),
            )
        return [Association(r[0], r[1], r[2], r[3], r[4] is not None) for r in rows]

    async def count(self) -> int:
        async with self._lock:
            rows = await self._db.execute_fetchall("SELECT COUNT(*) FROM keywords")
        return int(next(iter(rows))[0])


def _phrases(toks: Sequence[str]) -> set[str]:
    """Every run of 1..MAX_WORDS consecutive tokens: the keys a query could contain."""
    out: set[str] = set()
    for i in range(len(toks)):
        for n in range(1, MAX_WORDS + 1):
            if i + n > len(toks):
                break
            out.add(" ".join(toks[i : i + n]))
    return out


def _chunks(items: Sequence[str], size: int) -> Iterable[Sequence[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _with_keywords(result: ExternalResult, keywords: tuple[str, ...]) -> ExternalResult:
    return replace(result, matched_keywords=keywords)
