"""The keyword index of seed 001: keywords extracted from external answers, kept for later queries.

The model calls ``index_keywords`` after ``perplexity_search``; every keyword is
normalised (NFKC + casefold, whitespace collapsed, edge punctuation dropped) into a
*key* that is UNIQUE in the table, so "Straße", "STRASSE" and full-width "ＳＴＲＡＳＳＥ"
are one keyword. Re-indexing a known keyword merges it (``usage_count + 1``,
``last_used_at`` / ``updated_at`` set) and adds an association to the query, the external
result and the conversation, atomically (``storage.interfaces.KeywordStore.upsert``), so
concurrent calls never lose an update.

``KeywordIndex.lookup(text)`` is the read side (SC-006): which saved answers a later
question asks about. Two kinds of evidence, each on 0..1:

* **terms** — each keyword is stored with its matching terms (``knowledge.textnorm.
  keyword_terms``: stemmed, stop words out, hyphenated words joined), and the query's
  terms are looked up in one indexed read. Word order, plurals, inflections and
  hyphenation do not matter: "applications of quantum computing" contains every term of
  "quantum computing applications". A keyword whose terms are all present counts 1; a
  partial one (matched/total)², so "stock price" alone does not bring back "AAPL stock
  price" but helps the meaning side.
* **meaning** — ``knowledge.saved_answers.SavedAnswerVectors`` (when the KB has an
  embedder): the query vector against the vectors of each result's question and answer
  and of each keyword, as evidence through the embedder's similarity scale.

A result's score is ``1 - (1 - terms)(1 - meaning)``, its best keyword's term evidence
with the best of its question, answer and keyword similarities; results at
``min_score`` (0.5) or above come back best first. Matched keywords get ``last_used_at``
set, which keeps them from being pruned as idle. The rows live in ``storage``; a
keyword's validation and normalisation in ``agenttools.rag.keyword_rules``; scoring, the
prune policy and the clock here.

Everything here is per user (issue 21): a saved answer and a keyword belong to the user
whose run stored them (``owner``), and a lookup searches only the asker's own, since a
web answer repeats what its user asked (Alice's medical leave must not reach Bob).
``shared=True`` (``AGENT_SHARED_WEB_ANSWERS``) makes lookups search every user's
answers — one pool, for single-tenant deployments that want the saved Perplexity calls.
Keywords are still written per owner there, so switching it off again is clean.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Final, Protocol

from agenttools.rag.keyword_rules import Candidate, keyword_key
from knowledge.saved_answers import SemanticMatches
from knowledge.stemmer import Stemmer
from knowledge.textnorm import keyword_terms, query_terms
from storage.interfaces import ExternalResultStore, KeywordStore
from storage.keyword_records import NOBODY, ExternalResult, KeywordAssociation, KeywordRecord

log = logging.getLogger("agenttools.keywords")  # its name before the rag room

#: A saved answer comes back from a lookup at this score (0..1) or above.
MIN_MATCH_SCORE = 0.5
#: A keyword is reported as matched (and kept from idle-pruning) at this evidence.
_KEYWORD_SHOWN = 0.5
#: Why a lookup or a write fell back (``KeywordIndex.fallbacks``' keys, the label of
#: ``agentchat_saved_answer_fallbacks_total``): the whole lookup failed (no saved answer
#: was searched), its meaning side failed (found by keyword terms only), or a saved answer's
#: or its keywords' vectors could not be made (found by terms only until the next start's
#: back-fill gives them theirs).
LOOKUP_FAILED: Final = "lookup_failed"
MEANING_FAILED: Final = "meaning_failed"
NOT_EMBEDDED: Final = "not_embedded"
#: The start-up back-fill of keyword terms and saved-answer vectors failed: what it was to
#: fill in stays missing (found by terms only, or not by its terms) until the next start.
BACKFILL_FAILED: Final = "backfill_failed"

#: Keywords close in meaning to a query that are looked up for their answers (the
#: asker's best ones, from at most ``_SEMANTIC_KEYWORD_CANDIDATES`` of every owner's).
_MAX_SEMANTIC_KEYWORDS = 50
_SEMANTIC_KEYWORD_CANDIDATES = 1_000


# --------------------------------------------------------------------------- index


class SavedAnswerSearch(Protocol):
    """The meaning side of the lookup (``knowledge.saved_answers.SavedAnswerVectors``)."""

    async def remember_result(self, result: ExternalResult) -> None: ...

    async def remember_keywords(self, keywords: Mapping[str, str]) -> None: ...

    async def search(self, text: str) -> SemanticMatches: ...

    async def backfill(self) -> int: ...


@dataclass(frozen=True, slots=True)
class SavedAnswerLookup:
    """What ``KeywordIndex.find`` found, and what it could not search (``warnings``, in
    words for the tool result: a lookup that fell back says so, never passes for one that
    found nothing)."""

    results: list[ExternalResult]
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class IndexedKeyword:
    key: str
    display: str
    usage_count: int
    merged: bool  # the keyword existed before this call

    def to_dict(self) -> dict[str, object]:
        return {"keyword": self.display, "usage_count": self.usage_count, "merged": self.merged}


class KeywordIndex:
    """The keyword rules over the stores: what the RAG tools and the prune route call.

    Storage (``storage.interfaces.KeywordStore`` / ``ExternalResultStore``) keeps rows
    by normalised key; this class normalises, derives each keyword's matching terms,
    scores the saved answers a query leads to (with ``semantic``, the vectors of
    ``knowledge.saved_answers``, when the KB has an embedder), and owns the clock, the
    prune policy and whose answers a lookup sees (the asker's, or with ``shared``
    everyone's). ``owner`` defaults to ``NOBODY``, the owner of no real user: tools and
    benchmarks without users share that one.
    """

    def __init__(
        self,
        keywords: KeywordStore,
        results: ExternalResultStore,
        *,
        semantic: SavedAnswerSearch | None = None,
        min_score: float = MIN_MATCH_SCORE,
        clock: Callable[[], float] = time.time,
        shared: bool = False,
        stemmer: Stemmer | None = None,
    ) -> None:
        self._keywords = keywords
        self._results = results
        #: The memo of the keywords' and questions' word stems (``knowledge.stemmer``):
        #: the app's, given by its wiring; a fresh one for a caller without one.
        self._stemmer = stemmer if stemmer is not None else Stemmer()
        self._semantic = semantic
        self.shared = shared
        self._min_score = min_score
        self._clock = clock
        #: Lookups and writes that fell back, by why (``LOOKUP_FAILED``, ``MEANING_FAILED``,
        #: ``NOT_EMBEDDED``): ``/readyz``'s ``keywords`` and ``/metrics`` read them.
        self.fallbacks: dict[str, int] = {}
        #: The last fallback's why and exception type, and when (``/readyz``, which answers
        #: anyone: never the error's text - a database error's ``DETAIL`` line quotes the
        #: row, a user's keyword and id, and an embedder's may quote the text it embedded;
        #: the log has it all).
        self.last_fallback: str | None = None
        self.last_fallback_at: str | None = None
        #: When the kind of step that last fell back (a lookup; an embedding of a write)
        #: first went through again (``None`` while none has): the fallback is past. Kept
        #: beside it, not cleared, so ``/readyz`` tells a current fallback from a recovered
        #: one and still shows what happened.
        self.last_fallback_recovered_at: str | None = None
        self._last_reason: str | None = None

    def search_by_meaning(self, semantic: SavedAnswerSearch) -> None:
        """Look saved answers up by meaning too from now on: an embedder found after
        start-up (``app.embedder_adoption``); the back-fill gives the stored ones vectors."""
        self._semantic = semantic

    def _fell_back(self, reason: str, exc: BaseException) -> None:
        self.fallbacks[reason] = self.fallbacks.get(reason, 0) + 1
        self.last_fallback = f"{reason}: {type(exc).__name__}"
        self.last_fallback_at = datetime.fromtimestamp(self._clock(), tz=UTC).isoformat(timespec="seconds")
        self.last_fallback_recovered_at = None
        self._last_reason = reason

    def _went_through(self, *reasons: str) -> None:
        """A step that falls back for ``reasons`` did not: a last fallback of one of them is past."""
        if self._last_reason in reasons and self.last_fallback_recovered_at is None:
            self.last_fallback_recovered_at = datetime.fromtimestamp(self._clock(), tz=UTC).isoformat(
                timespec="seconds"
            )

    async def readiness(self) -> dict[str, Any]:
        """Informational (saved answers are a saving, not a need: a run without them asks
        the web or says the knowledge base has nothing): whether they are found by meaning
        too, and the lookups and writes that fell back since start."""
        return {
            "ok": True,
            "by_meaning": self._semantic is not None,
            "fallbacks": dict(sorted(self.fallbacks.items())),
            "last_fallback": self.last_fallback,
            "last_fallback_at": self.last_fallback_at,
            "last_fallback_recovered_at": self.last_fallback_recovered_at,
        }

    # ---------------------------------------------------------------- write side

    async def save_result(self, result: ExternalResult) -> None:
        """Store a new external answer (owned by ``result.owner``), then embed its
        question and answer so later questions find it by meaning (a failed embedding is logged: the keywords still
        find it)."""
        await self._results.save(result)
        if self._semantic is not None:
            try:
                await self._semantic.remember_result(result)
            except Exception as exc:
                self._fell_back(NOT_EMBEDDED, exc)
                log.warning("embedding external result %s failed", result.id, exc_info=True)
            else:
                self._went_through(NOT_EMBEDDED)

    async def index(
        self,
        keywords: Sequence[Candidate],
        *,
        query_id: str | None,
        external_result_ids: Sequence[str] = (),
        conversation_id: str | None = None,
        owner: str = NOBODY,
    ) -> list[IndexedKeyword]:
        """Upsert ``owner``'s ``keywords`` and associate each with the query / results /
        conversation (another user's keyword of the same key is not touched: ``merged``
        speaks of the owner's own).

        Duplicate keys count once (``validate_keywords`` merges them already). One
        transaction: either every keyword, its matching terms and its associations land
        or none does. New keywords are embedded afterwards (outside the transaction).
        """
        unique = {c.key: c.display for c in keywords}
        if not unique:
            return []
        stored = await self._keywords.upsert(
            unique,
            query_id=query_id,
            external_result_ids=external_result_ids,
            conversation_id=conversation_id,
            owner=owner,
            now=self._clock(),
            terms={key: keyword_terms(display, self._stemmer) for key, display in unique.items()},
        )
        if self._semantic is not None:
            try:
                await self._semantic.remember_keywords({r.key: r.display for r in stored})
            except Exception as exc:
                self._fell_back(NOT_EMBEDDED, exc)
                log.warning("embedding %d keywords failed", len(stored), exc_info=True)
            else:
                self._went_through(NOT_EMBEDDED)
        return [IndexedKeyword(r.key, r.display, r.usage_count, merged=r.usage_count > 1) for r in stored]

    async def backfill(self, *, batch: int = 500) -> dict[str, int]:
        """Fill in what data written before keyword terms and vectors existed lacks:
        the terms of old keywords, and (with an embedder) vectors of old results and
        keywords. Run once at start-up, in the background; lookups work meanwhile. A
        failure is counted (``BACKFILL_FAILED``) and raised."""
        try:
            filled = await self._backfill(batch)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fell_back(BACKFILL_FAILED, exc)
            raise
        self._went_through(BACKFILL_FAILED)
        return filled

    async def _backfill(self, batch: int) -> dict[str, int]:
        terms = 0
        while True:
            missing = await self._keywords.without_terms(batch)
            if not missing:
                break
            stems = self._stemmer
            await self._keywords.set_terms({key: keyword_terms(display, stems) for key, display in missing.items()})
            terms += len(missing)
        vectors = await self._semantic.backfill() if self._semantic is not None else 0
        return {"keyword_terms": terms, "vectors": vectors}

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
        return await self._keywords.prune(
            usage_below=min_usage, idle_before=now - older_than_days * 86_400.0, now=now
        )

    # ---------------------------------------------------------------- read side

    async def lookup(self, text: str, *, owner: str = NOBODY, limit: int = 3) -> list[ExternalResult]:
        """``find``'s results alone."""
        return (await self.find(text, owner=owner, limit=limit)).results

    async def find(self, text: str, *, owner: str = NOBODY, limit: int = 3) -> SavedAnswerLookup:
        """The saved external answers of ``owner`` (of everyone when ``shared``) that
        ``text`` asks about, best first (see the module docstring for the score), each
        with ``matched_keywords`` and ``match_score``, and what could not be searched:
        a lookup that fails (the database) finds nothing and says so, one whose meaning
        side fails finds by terms and says so; both are counted (``fallbacks``).

        Keywords that led to a returned answer get ``last_used_at`` set, which keeps
        them from being pruned as idle.
        """
        warnings: list[str] = []
        try:
            results = await self._lookup(text, scope=None if self.shared else owner, limit=limit, warnings=warnings)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fell_back(LOOKUP_FAILED, exc)
            log.warning("lookup of saved answers failed", exc_info=True)
            return SavedAnswerLookup([], [f"saved web answers could not be searched ({type(exc).__name__})"])
        if text.strip() and not warnings:  # searched whole: by its terms and, with an embedder, by meaning
            self._went_through(LOOKUP_FAILED, MEANING_FAILED)
        return SavedAnswerLookup(results, warnings)

    async def _lookup(self, text: str, *, scope: str | None, limit: int, warnings: list[str]) -> list[ExternalResult]:
        if not text.strip():
            return []
        evidence: dict[str, _Evidence] = {}
        terms = query_terms(text, self._stemmer)
        if terms:
            for hit in await self._keywords.term_hits(terms, owner=scope):
                value = 1.0 if hit.matched >= hit.terms else (hit.matched / hit.terms) ** 2
                e = evidence.setdefault(hit.external_result_id, _Evidence())
                e.terms = max(e.terms, value)
                if value >= 1.0:
                    e.full_terms += hit.terms
                e.note(hit.key, hit.display, value)
        semantic = await self._semantic_matches(text, warnings)
        for result_id, value in semantic.results.items():
            e = evidence.setdefault(result_id, _Evidence())
            e.meaning = max(e.meaning, value)
        if semantic.keywords:
            # The vectors are every owner's: the asker's own best keywords are chosen
            # after the owner-scoped read, so other users' keywords cannot crowd them out.
            near = sorted(semantic.keywords, key=lambda k: -semantic.keywords[k])[:_SEMANTIC_KEYWORD_CANDIDATES]
            # live keywords only: pruned ones lead nowhere
            found = await self._keywords.hits(near, owner=scope)
            best = set(sorted({kw.key for kw in found}, key=lambda k: -semantic.keywords[k])[:_MAX_SEMANTIC_KEYWORDS])
            for kw in found:
                if kw.key not in best:
                    continue
                value = semantic.keywords[kw.key]
                e = evidence.setdefault(kw.external_result_id, _Evidence())
                e.meaning = max(e.meaning, value)
                e.note(kw.key, kw.display, value)

        scores = {rid: e.score for rid, e in evidence.items() if e.score >= self._min_score}
        if not scores:
            return []
        results = await self._results.get_many(list(scores), owner=scope)  # vector hits are everyone's
        ranked = sorted(
            results, key=lambda r: (round(scores[r.id], 6), evidence[r.id].full_terms, r.created_at), reverse=True
        )[:limit]
        used = {key for r in ranked for key in evidence[r.id].leading_keys()}
        if used:
            await self._keywords.touch(used, owner=scope, now=self._clock())
        return [
            replace(r, matched_keywords=evidence[r.id].matched_keywords(), match_score=round(scores[r.id], 4))
            for r in ranked
        ]

    async def _semantic_matches(self, text: str, warnings: list[str]) -> SemanticMatches:
        if self._semantic is None:
            return SemanticMatches()
        try:
            return await self._semantic.search(text)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the keyword terms still work without the vectors
            self._fell_back(MEANING_FAILED, exc)
            why = f"the search by meaning failed ({exc})"
            warnings.append(f"saved web answers found by their keywords only: {why}"[:300])
            log.warning("semantic lookup of saved answers failed", exc_info=True)
            return SemanticMatches()

    async def get(self, keyword: str, *, owner: str = NOBODY) -> KeywordRecord | None:
        """``owner``'s stored keyword that ``keyword`` normalises to (for admin views and tests)."""
        return await self._keywords.get(keyword_key(keyword), owner=owner)

    async def associations(self, keyword: str, *, owner: str | None = NOBODY) -> list[KeywordAssociation]:
        """All associations of ``owner`` (everyone's when None) recorded for
        ``keyword``, archived ones included."""
        return await self._keywords.associations(keyword_key(keyword), owner=owner)

    async def count(self) -> int:
        return await self._keywords.count()


class _Evidence:
    """What points a query at one saved result: term and meaning evidence on 0..1, the
    term count of its fully matched keywords (a tie-break), and the keywords involved."""

    __slots__ = ("full_terms", "keywords", "meaning", "terms")

    def __init__(self) -> None:
        self.terms = 0.0
        self.meaning = 0.0
        self.full_terms = 0
        self.keywords: dict[str, tuple[str, float]] = {}

    @property
    def score(self) -> float:
        return 1.0 - (1.0 - self.terms) * (1.0 - self.meaning)

    def note(self, key: str, display: str, value: float) -> None:
        if value > self.keywords.get(key, ("", 0.0))[1]:
            self.keywords[key] = (display, value)

    def leading_keys(self) -> list[str]:
        return [key for key, (_, value) in self.keywords.items() if value >= _KEYWORD_SHOWN]

    def matched_keywords(self) -> tuple[str, ...]:
        shown = [(display, value) for display, value in self.keywords.values() if value >= _KEYWORD_SHOWN]
        return tuple(display for display, _ in sorted(shown, key=lambda dv: (-round(dv[1], 2), dv[0])))
