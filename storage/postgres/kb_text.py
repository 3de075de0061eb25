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
  MaxScore left the commonest lexemes out (``_match_count``).
* A bucket or the whole index is answered from the postings (``_from_postings``):
  impact-ordered, each with its term frequency and chunk length, so most chunks are
  scored exactly without their rows.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

from storage.kb_records import KBRanked, KBScope, KBTextTuning
from storage.kb_terms import tuned_selective_terms
from storage.postgres.database import PostgresDatabase
from storage.postgres.kb_filters_sql import scope_sql
from storage.postgres.migrations import COLUMN_WEIGHTS, FOLD_FUNCTION, K1, POSTINGS_AVGDL, TEXT_CONFIG, B

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
    SELECT c.id, c.ntok, ts_delete(c.tsv, tsvector_to_array(ts_delete(c.tsv, %(lex)s::text[]))) AS t
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
#: ``_RANK`` over the chunks whose ids are given (the candidates the postings found).
_RANK_IDS = _RANK.replace("c.tsv @@ %(tsq)s::tsquery {scope}", "c.id = ANY(%(ids)s::bigint[])")
#: One read of the postings (``_from_postings``): each query lexeme's ``depth`` best
#: postings, in impact order (``kb_postings``), scored on the server. Rows ``(0, chunk,
#: score, upper, exact)`` for the candidates in ``bucket`` that may reach the ``limit``-th
#: best score read (``score``: the exact sum of the terms read, in ``_RANK``'s own
#: arithmetic and order — the lexemes' bytes, as a tsvector holds them — so the same
#: bits; ``upper``: that plus the floors of the lists not read to their end it was not
#: seen in; ``exact``: 1 when there are none); ``(1, list, last impact, postings read,
#: of them in bucket)`` per lexeme; ``(2, candidates, -, -, -)``. ``{terms}``, ``{score}``
#: and ``{missing}`` are written per number of lexemes (``_postings_sql``).
_POSTINGS = """
WITH q AS (
    SELECT * FROM unnest(%(lex)s::text[], %(idf)s::float8[], %(rank)s::int[]) WITH ORDINALITY AS q(lex, idf, r, ord)
),
p AS MATERIALIZED (
    SELECT q.ord, q.r, q.idf, k.chunk_id, k.impact, k.bucket, k.tf, k.ntok
    FROM q CROSS JOIN LATERAL (
        SELECT k.chunk_id, k.impact, k.bucket, k.tf, k.ntok FROM kb_postings k WHERE k.lexeme = q.lex
        ORDER BY k.impact DESC, k.chunk_id LIMIT %(depth)s
    ) k
),
lists AS MATERIALIZED (
    SELECT q.ord, q.r, count(p.chunk_id) AS n, min(p.impact)::float8 AS last,
           count(p.chunk_id) FILTER (WHERE %(bucket)s::text IS NULL OR p.bucket = %(bucket)s::text) AS kept,
           CASE WHEN count(p.chunk_id) >= %(depth)s THEN q.idf * min(p.impact)::float8 * %(widen)s ELSE 0 END AS floor
    FROM q LEFT JOIN p ON p.ord = q.ord GROUP BY q.ord, q.r, q.idf
),
f AS (SELECT array_agg(l.floor ORDER BY l.r) AS fl FROM lists l),
t AS (
    SELECT p.chunk_id, {terms}
    FROM p WHERE %(bucket)s::text IS NULL OR p.bucket = %(bucket)s::text
    GROUP BY p.chunk_id
),
c AS MATERIALIZED (SELECT t.chunk_id, {score} AS score, {missing} AS missing FROM t, f),
bar AS (SELECT coalesce((SELECT c.score FROM c ORDER BY c.score DESC LIMIT 1 OFFSET %(limit)s - 1), 0) AS v)
SELECT 0, c.chunk_id, c.score, c.score + c.missing, (c.missing = 0)::int::float8 FROM c, bar
WHERE c.score + c.missing >= bar.v * %(shrink)s
UNION ALL SELECT 1, l.ord, l.last, l.n, l.kept FROM lists l
UNION ALL SELECT 2, count(*), NULL, NULL, NULL FROM c
"""


def _postings_sql(n: int) -> str:
    """``_POSTINGS`` for ``n`` lexemes. A chunk's terms are one column per lexeme (in the
    lexemes' byte order, ``r``) and added up left to right, absent ones as 0.0 — adding
    0.0 changes no bit, so this is ``_RANK``'s ``sum`` over the lexemes the chunk holds, in
    its tsvector's order — with no sort per chunk, as an ordered aggregate would need."""
    term = "p.idf * (p.tf::float8 * %(k1p1)s) / (p.tf::float8 + %(k1)s * (%(one_minus_b)s + %(b_over_avgdl)s * p.ntok))"
    terms = ", ".join(f"max({term}) FILTER (WHERE p.r = {r}) AS t{r}" for r in range(1, n + 1))
    score = "coalesce(t.t1, 0.0)"
    for r in range(2, n + 1):
        score = f"({score} + coalesce(t.t{r}, 0.0))"
    missing = " + ".join(f"(CASE WHEN t.t{r} IS NULL THEN f.fl[{r}] ELSE 0.0 END)" for r in range(1, n + 1))
    return _POSTINGS.format(terms=terms, score=score, missing=missing)


#: The first read of the postings takes this many per lexeme, or ``POSTINGS_DEPTH_FACTOR``
#: times the limit when more; each round that cannot prove its top-k reads four times
#: deeper, up to ``POSTINGS_MAX_DEPTH`` (then the matches are scored exhaustively).
POSTINGS_MIN_DEPTH = 200
POSTINGS_DEPTH_FACTOR = 4
POSTINGS_MAX_DEPTH = 50_000
#: Scoring a chunk on its row (a heap visit of ~2.7 kB and its tsvector cut down) costs
#: about as much as reading and scoring this many postings: the partly seen candidates
#: that may still enter are scored on their rows unless reading deeper is cheaper.
ROW_COST_IN_POSTINGS = 16
#: Float4 impacts are rounded; the bound on unseen chunks is widened by this much.
_ROUNDING = 1e-5
#: The first MaxScore pass scores chunks of the rarest terms until their document
#: frequencies add up to this many times ``limit`` (enough matches to set a bar).
FIRST_PASS_DF_FACTOR = 4


def tsquery_literal(lexeme: str) -> str:
    """One lexeme as ``tsquery`` input: quoted, quotes and backslashes doubled, so no
    character of it is query syntax."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def or_query(lexemes: Sequence[str]) -> str:
    return " | ".join(tsquery_literal(x) for x in lexemes)


def idf(n: int, df: int) -> float:
    value = math.log((n - df + 0.5) / (df + 0.5)) if n > 0 else 0.0
    return value if value > 0 else 1e-6


def essential_terms(bounds: Mapping[str, float], bar: float) -> list[str]:
    """The terms a chunk must hold to possibly score above ``bar``: all but the longest
    run of lowest-bound terms whose bounds add up to less than ``bar``."""
    order = sorted(bounds, key=lambda x: (bounds[x], x))
    total = 0.0
    for i, x in enumerate(order):
        total += bounds[x]
        if total >= bar:
            return order[i:]
    return []


def first_pass_terms(
    lexemes: Sequence[str], bounds: Mapping[str, float], df: Mapping[str, int], want: int
) -> list[str]:
    """The rarest terms, until their chunks are likely to number ``want``."""
    chosen: list[str] = []
    seen = 0
    for x in sorted(lexemes, key=lambda x: (-bounds[x], x)):
        chosen.append(x)
        seen += df.get(x, 0)
        if seen >= want:
            break
    return chosen


def _match_count(
    rows: Sequence[tuple[Any, ...]], ranked: Sequence[str], lexemes: Sequence[str], df: Mapping[str, int], n: int
) -> int:
    """How many chunks in scope match: counted by the rank itself (its materialized
    matches) when it ranked every lexeme. When MaxScore left the commonest out, an
    estimate: the ranked lexemes' count scaled by how much likelier a chunk is to hold
    any lexeme than any ranked one (lexemes taken as independent, at their shares of
    the ``n`` chunks), and never fewer than one more than the rows returned (there may
    be more), as the postings path and the SQLite engine estimate theirs. A separate
    exact count was a second bitmap heap scan of every match's row, beside the rank."""
    matched = int(rows[0][2])
    if len(ranked) >= len(lexemes) or n <= 0:
        return matched

    def any_of(xs: Sequence[str]) -> float:
        return 1.0 - math.prod(1.0 - min(1.0, df.get(x, 0) / n) for x in xs)

    some = any_of(ranked)
    return max(len(rows) + 1, round(matched * any_of(lexemes) / some) if some > 0 else matched)


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
        self._totals: tuple[int, float] | None = None  # (chunks, average tokens)
        self._bucket_chunks: dict[str, int] = {}
        self._stats_at = 0.0
        self._generation = 0

    def changed(self) -> None:
        self._generation += 1
        self._df.clear()
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
        lex = await self.lexemes(terms)
        df_lex = await self.document_frequencies([x for t in terms for x in lex[t]])
        # A term's df: its most frequent lexeme's (a term is nearly always one lexeme).
        df = {t: max((df_lex.get(x, 0) for x in lex[t]), default=0) for t in terms}
        return tuned_selective_terms(terms, df, total, tuning, min_matches=min_matches)

    async def text_candidates(
        self,
        terms: Sequence[str],
        scope: KBScope,
        limit: int,
        tuning: KBTextTuning,
        schema: Mapping[str, str] | None = None,
    ) -> KBRanked:
        lex = await self.lexemes(terms)
        lexemes = list(dict.fromkeys(x for t in terms for x in lex[t]))
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
            scope.doc_ids is None
            and scope.doc_id is None
            and scope.filter is None
            and await self._postings_may_fill(scope.bucket, total, limit)
        ):
            found = await self._from_postings(lexemes, params, df, scope.bucket, limit, avgdl)
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
            [int(r[0]) for r in rows], [float(r[1]) for r in rows], _match_count(rows, ranked, lexemes, df, total)
        )

    async def _postings_may_fill(self, bucket: str | None, total: int, limit: int) -> bool:
        """Whether the postings are worth reading for ``bucket``: the whole index always;
        a bucket when its share of the chunks lets the deepest read find ``limit`` of its
        own many times over. A small bucket goes straight to exhaustive scoring, which
        is cheap for it (both are exact; this only decides which is faster)."""
        if bucket is None:
            return True
        share = await self.bucket_chunks(bucket) / max(1, total)
        return share * POSTINGS_MAX_DEPTH >= POSTINGS_DEPTH_FACTOR * max(limit, POSTINGS_MIN_DEPTH)

    async def _from_postings(
        self,
        lexemes: list[str],
        params: dict[str, Any],
        df: Mapping[str, int],
        bucket: str | None,
        limit: int,
        avgdl: float,
    ) -> KBRanked | None:
        """The exact BM25 top ``limit`` of the whole index or of one bucket, from the best
        postings of each lexeme (``kb_postings``), without visiting every match — and
        mostly without visiting any chunk row.

        A posting carries its term frequency and its chunk's length (migration 23), so a
        chunk's term score is computed from it (on the server, ``_POSTINGS``) exactly as
        ``_RANK`` computes it (the same IEEE operations in the same order, summed in the
        tsvector's lexeme order: the same bits); only the candidates that may reach the
        top come back. A candidate seen in every list not read to its end is therefore
        scored exactly; one missing from such a list is between its partial score (a
        lower bound) and that plus the lists' floors.

        Why it is exact: a chunk none of whose postings was read holds each lexeme with
        at most the impact of the last posting read for it (none at all when its list was
        read to the end), so its score is at most ``bound`` = Σ idf · last impact. Stored
        impacts use the fixed length ``POSTINGS_AVGDL``: the true one, with today's
        average length ``avgdl``, is at most ``max(1, avgdl / POSTINGS_AVGDL)`` times the
        stored one, so the bound is widened by that factor. Once the ``limit``-th best
        lower bound is above ``bound``, nothing unread can enter, and a partly seen
        candidate can only if its upper bound reaches that bar: those few are scored on
        their rows (``_RANK_IDS``, the exhaustive formula). Else the lists are read four
        times deeper (also when so many partly seen candidates would need their rows
        that the deeper read costs less, ``ROW_COST_IN_POSTINGS``).

        ``None`` when the bucket is too small a share of the postings to fill ``limit``
        within ``POSTINGS_MAX_DEPTH``; then the matches are scored exhaustively. The
        match count is exact when every list was read to its end, else an estimate
        (the commonest lexeme's chunks, times the share of the postings read that were
        in the bucket), as the SQLite engine's probe estimates it.
        """
        widen = max(1.0, avgdl / POSTINGS_AVGDL) * (1.0 + _ROUNDING)
        # A bucket's own postings are its share of each list: the first read goes as much
        # deeper, so that it holds as many of the bucket's as a read of the whole index.
        share = 1.0
        if bucket is not None:
            share = max(1, await self.bucket_chunks(bucket)) / max(1, (await self.totals())[0])
        depth = min(POSTINGS_MAX_DEPTH, max(POSTINGS_MIN_DEPTH, round(POSTINGS_DEPTH_FACTOR * limit / min(1.0, share))))
        # Each lexeme's place in byte order (a tsvector's order of its lexemes, ``_RANK``'s sum's).
        by_bytes = sorted(range(len(lexemes)), key=lambda i: lexemes[i].encode())
        rank = [0] * len(lexemes)
        for r, i in enumerate(by_bytes, start=1):
            rank[i] = r
        sql = _postings_sql(len(lexemes))
        read_params = {
            **params,
            "rank": rank,
            "bucket": bucket,
            "widen": widen,
            # Candidates a little below the bar too: the bar here is on raw scores, the
            # one below on lower bounds.
            "shrink": 1.0 - 4 * _ROUNDING,
        }
        while True:
            rows = await self._db.fetchall(sql, {**read_params, "depth": depth})
            exact: dict[int, float] = {}
            partial: dict[int, tuple[float, float]] = {}  # candidate -> (lower, upper)
            floors: list[float] = []
            read = kept = candidates = 0
            for kind, key, a, b, c in rows:
                if kind == 0:
                    score, upper = float(a), float(b)
                    if not c:  # not seen in a list not read to its end
                        partial[int(key)] = (score * (1.0 - _ROUNDING), upper * (1.0 + _ROUNDING))
                    else:
                        exact[int(key)] = score
                elif kind == 1:
                    read += int(b)
                    kept += int(c)
                    if int(b) >= depth:  # more may follow
                        floors.append(float(params["idf"][int(key) - 1]) * float(a) * widen)
                else:
                    candidates = int(key)
            complete = not floors
            if complete:
                break
            bound = sum(floors)
            lows = sorted([*exact.values(), *(lo for lo, _ in partial.values())], reverse=True)
            if len(lows) >= limit and lows[limit - 1] > bound:
                bar = lows[limit - 1]
                unsure = [c for c, (_, hi) in partial.items() if hi >= bar]
                deeper = (min(POSTINGS_MAX_DEPTH, depth * 4) - depth) * len(lexemes)
                if len(unsure) * ROW_COST_IN_POSTINGS <= deeper or depth >= POSTINGS_MAX_DEPTH:
                    if unsure:
                        scored = await self._db.fetchall(
                            _RANK_IDS, {**params, "ids": sorted(unsure), "limit": len(unsure)}
                        )
                        exact.update((int(r[0]), float(r[1])) for r in scored)
                    break
            if depth >= POSTINGS_MAX_DEPTH:
                return None
            depth = min(POSTINGS_MAX_DEPTH, depth * 4)
        top = sorted(exact.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
        if not top:
            return KBRanked()
        if complete:
            total = candidates
        else:
            share = kept / read if read else 0.0
            total = max(candidates, round(max(df.get(x, 0) for x in lexemes) * share))
        return KBRanked([c for c, _ in top], [v for _, v in top], total)

    async def _rank(self, condition: str, params: dict[str, Any], matching: Sequence[str]) -> list[tuple[Any, ...]]:
        """The top chunks holding any of ``matching``, scored on every query lexeme."""
        return await self._db.fetchall(_RANK.format(scope=condition), {**params, "tsq": or_query(matching)})
