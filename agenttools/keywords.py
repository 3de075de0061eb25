"""The keyword index of seed 001: keywords extracted from external answers, kept for later queries.

The model calls ``index_keywords`` after ``perplexity_search``; every keyword is
normalised (NFKC + casefold, whitespace collapsed, edge punctuation dropped) into a
*key* that is UNIQUE in the table, so "Straße", "STRASSE" and full-width "ＳＴＲＡＳＳＥ"
are one keyword. Re-indexing a known keyword merges it (``usage_count + 1``,
``last_used_at`` / ``updated_at`` set) and adds an association to the query, the external
result and the conversation, atomically (``storage.interfaces.KeywordStore.upsert``), so
concurrent calls never lose an update.

``KeywordIndex.lookup(text)`` is the read side: the keys that occur in a query as whole
tokens or phrases point at the stored external answers, which ``knowledge_base_search``
returns. The rows live in ``storage``; the rules (validation, normalisation, ranking, the
prune policy and the clock) live here.
"""

from __future__ import annotations

import time
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from storage.interfaces import ExternalResultStore, KeywordStore
from storage.keyword_records import ExternalResult, KeywordAssociation, KeywordRecord

MIN_CHARS = 2
MAX_CHARS = 50
MAX_WORDS = 6
MIN_PER_CALL = 3
MAX_PER_CALL = 10
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


# --------------------------------------------------------------------------- index


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
    by normalised key; this class normalises, decides which phrases of a query could be
    keywords, ranks the answers they lead to, and owns the clock and the prune policy.
    """

    def __init__(
        self,
        keywords: KeywordStore,
        results: ExternalResultStore,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._keywords = keywords
        self._results = results
        self._clock = clock

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

        Duplicate keys count once (``validate_keywords`` merges them already). One
        transaction: either every keyword and association lands or none does.
        """
        unique = {c.key: c.display for c in keywords}
        if not unique:
            return []
        stored = await self._keywords.upsert(
            unique,
            query_id=query_id,
            external_result_ids=external_result_ids,
            conversation_id=conversation_id,
            now=self._clock(),
        )
        return [IndexedKeyword(r.key, r.display, r.usage_count, merged=r.usage_count > 1) for r in stored]

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

    async def lookup(self, text: str, *, limit: int = 3) -> list[ExternalResult]:
        """External answers whose keywords occur in ``text`` (whole tokens / phrases).

        Ranked by how much of the query the matched keywords cover (a three-word phrase
        counts more than a single word), newest first on ties. Matched keywords get
        ``last_used_at`` set, which keeps them from being pruned as idle.
        """
        candidates = _phrases(tokens(text)[:_MAX_QUERY_TOKENS])
        if not candidates:
            return []
        hits = await self._keywords.hits(candidates)
        if not hits:
            return []
        await self._keywords.touch({h.key for h in hits}, now=self._clock())
        matched: dict[str, dict[str, str]] = {}
        for hit in hits:
            matched.setdefault(hit.external_result_id, {})[hit.key] = hit.display
        results = await self._results.get_many(list(matched))
        ranked = sorted(
            results,
            key=lambda r: (sum(len(k.split()) for k in matched[r.id]), r.created_at),
            reverse=True,
        )
        return [replace(r, matched_keywords=tuple(sorted(matched[r.id].values()))) for r in ranked[:limit]]

    async def get(self, keyword: str) -> KeywordRecord | None:
        """The stored keyword that ``keyword`` normalises to (for admin views and tests)."""
        return await self._keywords.get(keyword_key(keyword))

    async def associations(self, keyword: str) -> list[KeywordAssociation]:
        """All associations recorded for ``keyword``, archived ones included."""
        return await self._keywords.associations(keyword_key(keyword))

    async def count(self) -> int:
        return await self._keywords.count()


def _phrases(toks: Sequence[str]) -> set[str]:
    """Every run of 1..MAX_WORDS consecutive tokens: the keys a query could contain."""
    out: set[str] = set()
    for i in range(len(toks)):
        for n in range(1, MAX_WORDS + 1):
            if i + n > len(toks):
                break
            out.add(" ".join(toks[i : i + n]))
    return out
