"""The full-text top ``limit`` of the whole index or of one bucket read from the
impact-ordered postings (``kb_postings``, migrations 18 and 23) and scored on the server,
without visiting every match's chunk row — the fast path of ``kb_text.TextRanker``.

Each posting carries its impact (BM25 with a fixed length and no idf), its term
frequency and its chunk's length, so a read of each lexeme's best postings scores most
candidates exactly, bounds the rest (MaxScore's argument: a chunk not seen in a list
holds that lexeme with at most the list's last impact read), and reads deeper only when
the bounds cannot yet prove the top list. The few partly seen candidates that may still
enter are scored on their rows by the caller's exhaustive formula (``rescore``), so
the answer is the exhaustive BM25 top list, bit for bit.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from storage.kb_records import KBRanked
from storage.postgres.database import PostgresDatabase
from storage.postgres.migrations import POSTINGS_AVGDL

#: One read of the postings (``top_from_postings``): each query lexeme's ``depth`` best
#: postings, in impact order (``kb_postings``), scored on the server. Rows ``(0, chunk,
#: score, upper, exact)`` for the candidates in ``bucket`` that may reach the ``limit``-th
#: best score read (``score``: the exact sum of the terms read, in ``kb_text._RANK``'s
#: own arithmetic and order — the lexemes' bytes, as a tsvector holds them — so the same
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


def postings_may_fill(share: float, limit: int) -> bool:
    """Whether the postings are worth reading for a scope holding ``share`` of the chunks:
    the whole index always; a bucket when its share lets the deepest read find ``limit``
    of its own many times over. A small bucket goes straight to exhaustive scoring, which
    is cheap for it (both are exact; this only decides which is faster)."""
    return share * POSTINGS_MAX_DEPTH >= POSTINGS_DEPTH_FACTOR * max(limit, POSTINGS_MIN_DEPTH)


async def top_from_postings(
    db: PostgresDatabase,
    lexemes: Sequence[str],
    params: Mapping[str, Any],
    df: Mapping[str, int],
    *,
    bucket: str | None,
    share: float,
    limit: int,
    avgdl: float,
    rescore: Callable[[list[int]], Awaitable[Mapping[int, float]]],
) -> KBRanked | None:
    """The exact BM25 top ``limit`` of the whole index or of one bucket, from the best
    postings of each lexeme (``kb_postings``), without visiting every match — and
    mostly without visiting any chunk row.

    A posting carries its term frequency and its chunk's length (migration 23), so a
    chunk's term score is computed from it (on the server, ``_POSTINGS``) exactly as
    ``kb_text._RANK`` computes it (the same IEEE operations in the same order, summed in
    the tsvector's lexeme order: the same bits); only the candidates that may reach the
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
    their rows (``rescore``, the exhaustive formula). Else the lists are read four times
    deeper (also when so many partly seen candidates would need their rows
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
        rows = await db.fetchall(sql, {**read_params, "depth": depth})
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
                    exact.update(await rescore(sorted(unsure)))
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
