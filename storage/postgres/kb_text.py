"""Full-text ranking on PostgreSQL: the generated ``tsvector`` and its GIN index find the
matches, and the chunks are scored with BM25 — the same formula, column weights and
constants as FTS5's ``bm25()`` in the SQLite engine — so both engines rank alike and
the fusion in ``knowledge.ranking`` (tuned on BM25 scores) needs no second tuning.

Why not ``ts_rank``: it has no idf (a rare term weighs what a common one does) and its
scores live on another scale; on the labelled sets it ranks worse than BM25.

How a query runs:

* ``knowledge`` hands over folded, stop-word-free terms. Each becomes the lexemes
  PostgreSQL's English configuration makes of it (``to_tsvector('english',
  agentchat_fold(term))``, the same function the generated column uses), cached for
  good — a configuration does not change under a running process.
* The matches are ``tsv @@ (lexeme | lexeme …)`` within the scope, found through the
  GIN index. Each match's tsvector is cut down to the query's lexemes
  (``ts_delete`` twice: C code, no row per lexeme) before its term frequencies are read
  (positions weighted 4/2/1 by the A/B/C weights of title/heading/text).
* BM25 = Σ idf · tf·(k1+1) / (tf + k1·(1 - b + b·ntok/avgdl)), k1 = 1.2, b = 0.75,
  idf = ln((N - df + 0.5)/(df + 0.5)) clamped to 1e-6 — FTS5's own. ``ntok`` is the
  chunk's token count (stored on write); ``N``, ``avgdl`` and each lexeme's ``df`` come
  from the whole index and are cached until this process writes, and at most
  ``STATS_TTL_S`` (another replica may write).
* Very common terms are left out as in the SQLite engine (``selective_terms``).
* **MaxScore pruning** (as Lucene does it): a term adds at most ``idf · (k1 + 1)`` to a
  chunk's score, whatever its frequency. The chunks holding the rarest terms are scored
  first (on every query term); the ``limit``-th best score is then a bar that chunks
  holding only the commonest terms — whose bounds add up below it — cannot reach, so
  only chunks holding one of the other terms are scored. Same top ``limit`` as scoring
  every match, far fewer rows read: a chunk row carries its vector (``migrations``:
  ``STORAGE MAIN``), so each scored match is a heap visit of ~2.7 kB. The match count
  (``KBRanked.total``) is the rank's own count of its matches; an estimate when
  MaxScore left the commonest lexemes out (``bm25_parts.match_count``).
* A bucket or the whole index is answered from the postings (``kb_postings``):
  impact-ordered, each with its term frequency and chunk length, so most chunks are
  scored exactly without their rows, and the few partly seen candidates that may
  still enter are completed from the rest of their lists.
* A filtered scope (or a list of documents) is answered from the postings kept to its
  chunks (``kb_postings.top_in_scope``), unless its few expected matches are cheaper to
  score on their rows; one document's matches always are.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from storage.kb_records import KBRanked, KBScope, KBTextTuning
from storage.kb_terms import (
    SPLIT_PHRASE_COUNT_CAP,
    choose_split,
    is_split_phrase,
    may_split,
    plausible_cuts,
    split_phrase,
    tuned_selective_terms,
)
from storage.postgres.bm25_parts import (
    CUT,
    essential_terms,
    first_pass_terms,
    idf,
    match_count,
    or_query,
    phrase_query,
    split_cut,
    tsquery_literal,
)
from storage.postgres.database import PostgresDatabase
from storage.postgres.kb_filters_sql import scope_sql
from storage.postgres.kb_postings import postings_may_fill, top_from_postings, top_in_scope
from storage.postgres.text_schema import COLUMN_WEIGHTS, FOLD_FUNCTION, K1, TEXT_CONFIG, B

#: FTS5's column weights (title, heading, text), carried by the tsvector weights A/B/C —
#: the same the postings' term frequencies were stored with (``migrations``).
WEIGHTS = tuple(float(w) for w in COLUMN_WEIGHTS)
#: How long index statistics may be reused when another replica may have written.
STATS_TTL_S = 30.0
_LEXEME_CACHE = 50_000

#: Rows ``(chunk id, bm25, match count)``, best first. ``{scope}`` is a condition on
#: ``c`` (may be empty), followed by its parameters.
_RANK = """
WITH q(lex, idf) AS (SELECT * FROM unnest(%(lex)s::text[], %(idf)s::float8[])),
m AS MATERIALIZED (
    SELECT c.id, c.ntok, {cut} AS t
    FROM kb_chunks c WHERE c.tsv @@ %(tsq)s::tsquery {scope}
),
s AS (
    SELECT m.id, sum(
        q.idf * (f.tf * %(k1p1)s) / (f.tf + %(k1)s * (%(one_minus_b)s + %(b_over_avgdl)s * m.ntok))
    ) AS score
    FROM m
    CROSS JOIN LATERAL unnest(m.t) AS u(lexeme, positions, weights)
    JOIN q ON q.lex = u.lexeme
    CROSS JOIN LATERAL (SELECT
        %(wa)s * cardinality(array_positions(u.weights, 'A'))
        + %(wb)s * cardinality(array_positions(u.weights, 'B'))
        + %(wc)s * (cardinality(u.weights) - cardinality(array_positions(u.weights, 'A'))
                    - cardinality(array_positions(u.weights, 'B'))) AS tf) f
    GROUP BY m.id
)
SELECT s.id, s.score, (SELECT count(*) FROM m) FROM s ORDER BY s.score DESC, s.id LIMIT %(limit)s
"""
#: The first MaxScore pass scores chunks of the rarest terms until their document
#: frequencies add up to this many times ``limit`` (enough matches to set a bar).
FIRST_PASS_DF_FACTOR = 4


def named_params(sql: str, values: Sequence[Any], into: dict[str, Any], prefix: str = "s") -> str:
    """``sql`` with its positional ``%s`` renamed ``%(s0)s``, ``%(s1)s`` …, their values
    added to ``into`` (so a fragment can sit inside a statement of named parameters)."""
    parts = sql.split("%s")
    if len(parts) - 1 != len(values):
        raise ValueError("placeholders and values do not match")
    out = [parts[0]]
    for i, (value, rest) in enumerate(zip(values, parts[1:], strict=True)):
        name = f"{prefix}{i}"
        into[name] = value
        out.append(f"%({name})s{rest}")
    return "".join(out)


class TextRanker:
    """The full-text side of ``PostgresKBIndex``, with its cached statistics."""

    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db
        self._lexemes: dict[str, tuple[str, ...]] = {}
        self._df: dict[str, int] = {}
        #: A rare term's split (``term_splits``), ``None`` when it has none.
        self._splits: dict[str, tuple[str, ...] | None] = {}
        self._totals: tuple[int, float] | None = None  # (chunks, average tokens)
        self._bucket_chunks: dict[str, int] = {}
        self._stats_at = 0.0
        self._generation = 0

    def changed(self) -> None:
        self._generation += 1
        self._df.clear()
        self._splits.clear()
        self._totals = None
        self._bucket_chunks.clear()

    def _expire(self) -> None:
        if time.monotonic() - self._stats_at > STATS_TTL_S:
            self.changed()
            self._stats_at = time.monotonic()

    async def lexemes(self, terms: Sequence[str]) -> dict[str, tuple[str, ...]]:
        missing = [t for t in dict.fromkeys(terms) if t not in self._lexemes]
        if missing:
            rows = await self._db.fetchall(
                f"SELECT t, ARRAY(SELECT lexeme FROM unnest(to_tsvector('{TEXT_CONFIG}'::regconfig, "
                f"{FOLD_FUNCTION}(t)))) FROM unnest(%s::text[]) AS t",
                (missing,),
            )
            if len(self._lexemes) + len(rows) > _LEXEME_CACHE:
                self._lexemes.clear()
            for term, lexes in rows:
                self._lexemes[term] = tuple(lexes)
        return {t: self._lexemes.get(t, ()) for t in terms}

    async def totals(self) -> tuple[int, float]:
        self._expire()
        if self._totals is not None:
            return self._totals
        generation = self._generation
        row = await self._db.fetchone("SELECT count(*), coalesce(avg(ntok), 0) FROM kb_chunks")
        totals = (int(row[0]), float(row[1])) if row else (0, 0.0)
        # An empty index is not remembered: another replica's first document must be
        # found at once, not after ``STATS_TTL_S``.
        if generation == self._generation and totals[0] > 0:
            self._totals = totals
        return totals

    async def bucket_chunks(self, bucket: str) -> int:
        """How many chunks ``bucket`` holds (cached like the other statistics)."""
        self._expire()
        known = self._bucket_chunks.get(bucket)
        if known is not None:
            return known
        generation = self._generation
        row = await self._db.fetchone(
            "SELECT coalesce(sum(chunk_count), 0) FROM kb_documents WHERE bucket = %s", (bucket,)
        )
        count = int(row[0]) if row else 0
        if generation == self._generation and count > 0:
            self._bucket_chunks[bucket] = count
        return count

    async def document_frequencies(self, lexemes: Sequence[str]) -> dict[str, int]:
        """How many chunks hold each lexeme: its postings (one per chunk), counted by an
        index-only scan of their B-tree. Counted through the GIN index instead, a common
        lexeme was a bitmap heap scan (or a sequential one) of every chunk row holding it:
        ~0.5 s for a lexeme of 60 % of 100k chunks, on every expiry of the cache."""
        self._expire()
        out = {x: self._df[x] for x in lexemes if x in self._df}
        missing = [x for x in dict.fromkeys(lexemes) if x not in out]
        if missing:
            generation = self._generation
            select = ", ".join(["(SELECT count(*) FROM kb_postings WHERE lexeme = %s)"] * len(missing))
            row = await self._db.fetchone(f"SELECT {select}", missing)
            counts = [int(c) for c in row] if row else [0] * len(missing)
            found = dict(zip(missing, counts, strict=True))
            if generation == self._generation:
                # Nor is a term that matches nothing (``selective_terms`` would drop it).
                self._df.update({x: n for x, n in found.items() if n > 0})
            out.update(found)
        return out

    async def selective_terms(self, terms: Sequence[str], min_matches: int, tuning: KBTextTuning) -> list[str]:
        """``terms`` without those that match nothing here, and without very common ones
        once the index is large (the SQLite engine's rule, on this engine's counts)."""
        terms = list(terms)
        total, _ = await self.totals()
        if total < tuning.common_term_min_df:
            return terms
        df = await self._term_dfs(terms)
        return tuned_selective_terms(terms, df, total, tuning, min_matches=min_matches)

    async def _term_dfs(self, terms: Sequence[str]) -> dict[str, int]:
        """A term's df: its most frequent lexeme's (a term is nearly always one lexeme;
        a split's phrase is its words' lexemes, an upper bound of the phrase's count)."""
        lex = await self.lexemes(terms)
        df_lex = await self.document_frequencies([x for t in terms for x in lex[t]])
        return {t: max((df_lex.get(x, 0) for x in lex[t]), default=0) for t in terms}

    async def term_splits(
        self, candidates: Mapping[str, Sequence[Sequence[str]]], tuning: KBTextTuning
    ) -> dict[str, tuple[str, ...]]:
        """The split (``storage.kb_terms.choose_split``) of each term of ``candidates``
        the index barely knows: its parts' postings counted (their lexemes once for good,
        their counts in one statement, ``document_frequencies``), then the phrases of the
        cuts whose parts are all held (``phrase_counts``), kept until the statistics
        expire. A term the index knows well is never looked up past its own count (which
        the term choice needs anyway)."""
        generation = self._generation
        df = await self._term_dfs(list(candidates))
        rare = [t for t, cuts in candidates.items() if cuts and may_split(df[t])]
        unknown = [t for t in rare if t not in self._splits]
        chosen: dict[str, tuple[str, ...] | None] = {}
        if unknown:
            part_df = await self._term_dfs([p for t in unknown for cut in candidates[t] for p in cut])
            cuts = {t: plausible_cuts(candidates[t], part_df) for t in unknown}
            phrase_df = await self.phrase_counts([c for t in unknown for c in cuts[t]])
            chosen = {t: choose_split(cuts[t], phrase_df) for t in unknown}
            if generation == self._generation:
                if len(self._splits) + len(chosen) > tuning.term_stats_cache:
                    self._splits.clear()
                self._splits.update(chosen)
        out: dict[str, tuple[str, ...]] = {}
        for t in rare:
            split = chosen[t] if t in chosen else self._splits.get(t)
            if split is not None:
                out[t] = split
        return out

    async def phrase_counts(self, cuts: Sequence[Sequence[str]]) -> dict[str, int]:
        """``{split_phrase(cut): chunks holding its words in sequence}``, each count
        stopped at ``SPLIT_PHRASE_COUNT_CAP``, in one statement. The positions are on the
        chunk rows only (the GIN index finds the chunks holding every word, each row is
        read to check the sequence): asked once per rare word until the statistics
        expire, never for a word the index knows."""
        phrases: dict[str, str] = {}
        lex = await self.lexemes([w for c in cuts for w in c])
        for cut in cuts:
            if all(lex[w] for w in cut):
                phrases[split_phrase(cut)] = phrase_query([lex[w][0] for w in cut])
        out = {split_phrase(c): 0 for c in cuts}
        if not phrases:
            return out
        count = "(SELECT count(*) FROM (SELECT 1 FROM kb_chunks c WHERE c.tsv @@ %s::tsquery LIMIT %s) x)"
        row = await self._db.fetchone(
            "SELECT " + ", ".join([count] * len(phrases)),
            [v for q in phrases.values() for v in (q, SPLIT_PHRASE_COUNT_CAP)],
        )
        if row:
            out.update(zip(phrases, (int(n) for n in row), strict=True))
        return out

    async def text_candidates(
        self,
        terms: Sequence[str],
        scope: KBScope,
        limit: int,
        tuning: KBTextTuning,
        schema: Mapping[str, str] | None = None,
    ) -> KBRanked:
        alone_terms = [t for t in terms if not is_split_phrase(t)]
        phrases = [t.split() for t in terms if is_split_phrase(t)]
        lex = await self.lexemes([*alone_terms, *(w for p in phrases for w in p)])
        alone = list(dict.fromkeys(x for t in alone_terms for x in lex[t]))
        # A split's words, one lexeme each (a word the configuration drops leaves the
        # phrase out: it could not match as written).
        groups = [[lex[w][0] for w in p] for p in phrases if all(lex[w] for w in p)]
        lexemes = list(dict.fromkeys([*alone, *(x for g in groups for x in g)]))
        if not lexemes or limit <= 0:
            return KBRanked()
        total, avgdl = await self.totals()
        if total == 0:
            return KBRanked()
        df = await self.document_frequencies(lexemes)
        params: dict[str, Any] = {
            "lex": lexemes,
            "idf": [idf(total, df.get(x, 0)) for x in lexemes],
            "tsq": or_query(lexemes),
            "k1": K1,
            "k1p1": K1 + 1.0,
            "one_minus_b": 1.0 - B,
            "b_over_avgdl": B / avgdl if avgdl > 0 else 0.0,
            "wa": WEIGHTS[0],
            "wb": WEIGHTS[1],
            "wc": WEIGHTS[2],
            "limit": limit,
        }
        if (
            not groups
            and scope.doc_ids is None
            and scope.doc_id is None
            and scope.filter is None
            and (scope.bucket is None or postings_may_fill(await self.bucket_chunks(scope.bucket) / total, limit))
        ):
            # Every bucket but the hidden ones: by the bucket each posting stores.
            found = await self._from_postings(lexemes, params, df, scope.bucket, limit, avgdl, scope.hidden_prefix)
            if found is not None:
                return found
        condition = ""
        if scope.doc_ids is not None:
            condition = "AND c.doc_id = ANY(%(doc_ids)s::text[])"
            params["doc_ids"] = list(scope.doc_ids)
        elif not scope.everything:
            inner, inner_params = scope_sql(scope, schema)
            # Positional parameters of the scope become named ones of this statement.
            condition = "AND c.doc_id IN (" + named_params(inner, inner_params, params) + ")"
        if groups:
            # A split's phrase needs the words' positions, which only the chunk rows
            # hold (the postings keep term frequencies): every match ranked on its row,
            # matched by the phrase (or any other term), no MaxScore pass (a phrase's
            # words are no bound of their own). Only queries with a word the index
            # barely knows come here.
            params["tsq"] = " | ".join([*map(tsquery_literal, alone), *(f"({phrase_query(g)})" for g in groups)])
            cut = split_cut(groups, alone, params)
            rows = await self._db.fetchall(_RANK.format(scope=condition, cut=cut), params)
            if not rows:
                return KBRanked()
            return KBRanked([int(r[0]) for r in rows], [float(r[1]) for r in rows], int(rows[0][2]))
        if condition and (scope.doc_ids is not None or scope.doc_id is None):
            # A filtered scope (or a list of documents) from the postings, kept to its
            # chunks; one document's few matches stay on their rows.
            scoped = await top_in_scope(
                self._db, lexemes, params, df, condition=condition, limit=limit, total_chunks=total
            )
            if scoped is not None:
                return scoped
        bounds = {x: b * (K1 + 1.0) for x, b in zip(lexemes, params["idf"], strict=True)}
        first = first_pass_terms(lexemes, bounds, df, FIRST_PASS_DF_FACTOR * limit)
        rows = await self._rank(condition, params, first)
        ranked = first
        if len(first) < len(lexemes):
            # The ``limit``-th score is a bar; a chunk of the remaining terms only counts
            # if it holds one whose bound (with the rarer ones') can reach it.
            bar = float(rows[-1][1]) if len(rows) >= limit else 0.0
            needed = essential_terms(bounds, bar) if bar > 0 else list(lexemes)
            if not set(needed) <= set(first):
                rows = await self._rank(condition, params, needed)
                ranked = needed
        if not rows:
            return KBRanked()
        return KBRanked(
            [int(r[0]) for r in rows], [float(r[1]) for r in rows], match_count(rows, ranked, lexemes, df, total)
        )

    async def _from_postings(
        self,
        lexemes: list[str],
        params: dict[str, Any],
        df: Mapping[str, int],
        bucket: str | None,
        limit: int,
        avgdl: float,
        hidden: str | None = None,
    ) -> KBRanked | None:
        """The top ``limit`` read from the postings (``kb_postings``); without ``bucket``,
        of every bucket not named with the ``hidden`` prefix."""
        share = 1.0
        if bucket is not None:
            share = max(1, await self.bucket_chunks(bucket)) / max(1, (await self.totals())[0])
        return await top_from_postings(
            self._db, lexemes, params, df, bucket=bucket, share=share, limit=limit, avgdl=avgdl, hidden=hidden
        )

    async def _rank(self, condition: str, params: dict[str, Any], matching: Sequence[str]) -> list[tuple[Any, ...]]:
        """The top chunks holding any of ``matching``, scored on every query lexeme."""
        return await self._db.fetchall(_RANK.format(scope=condition, cut=CUT), {**params, "tsq": or_query(matching)})
