"""The full-text top ``limit`` of the whole index or of one bucket read from the
impact-ordered postings (``kb_postings``, migrations 18 and 23), without visiting any
chunk row — the fast path of ``kb_text.TextRanker``.

Each posting carries its impact (BM25 with a fixed length and no idf), its term
frequency and its chunk's length, so a read of each lexeme's best postings scores most
candidates exactly, bounds the rest (MaxScore's argument: a chunk not seen in a list
holds that lexeme with at most the list's last impact read), and reads deeper only when
the bounds cannot yet prove the top list. The few partly seen candidates that may still
enter are completed from the rest of their lists (``_COMPLETE``), so the answer is the
exhaustive BM25 top list (``kb_text._RANK``), bit for bit.

The postings come back packed (one ``bytea`` per lexeme and column) and are scored here
with numpy (``_score``): the same IEEE operations as the SQL formula, in the same order.
Scored in SQL (an aggregate per chunk over a CTE of every posting read), the server
spent ~8× the read itself on executor steps, and that was most of a text search's tail
at 100k chunks (issue 24).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from storage.kb_records import KBRanked
from storage.postgres.database import PostgresDatabase
from storage.postgres.text_schema import POSTINGS_AVGDL

#: One read of the postings: each query lexeme's ``depth`` best postings (its own depth
#: each), in impact order (the B-tree ``kb_postings_impact``, an index-only scan), as one
#: row per lexeme ``(ord, postings read, last impact, chunk ids, term frequencies, chunk
#: lengths)`` — the last three of the postings in ``bucket`` only (without one: of every
#: bucket not named with the ``hidden`` prefix, by the bucket each posting stores; see
#: ``KBScope.hidden_prefix``), each packed big-endian
#: (``int8send``/``int4send`` concatenated: one ``bytea``, read by ``numpy.frombuffer``
#: with no Python object per posting).
_READ = """
SELECT q.ord, k.n, k.last, k.ids, k.tfs, k.ntoks
FROM unnest(%(lex)s::text[], %(depth)s::int[]) WITH ORDINALITY AS q(lex, depth, ord)
CROSS JOIN LATERAL (
    SELECT count(*) AS n, min(k.impact)::float8 AS last,
           string_agg(int8send(k.chunk_id), ''::bytea) FILTER (WHERE k.kept) AS ids,
           string_agg(int4send(k.tf), ''::bytea) FILTER (WHERE k.kept) AS tfs,
           string_agg(int4send(k.ntok), ''::bytea) FILTER (WHERE k.kept) AS ntoks
    FROM (
        SELECT k.chunk_id, k.impact, k.tf, k.ntok,
               (%(bucket)s::text IS NULL OR k.bucket = %(bucket)s::text)
               AND (%(hidden)s::text IS NULL
                    OR substr(k.bucket, 1, length(%(hidden)s::text)) <> %(hidden)s::text) AS kept
        FROM kb_postings k WHERE k.lexeme = q.lex
        ORDER BY k.impact DESC, k.chunk_id LIMIT q.depth
    ) k
) k
ORDER BY q.ord
"""
#: The postings of the chunks ``ids`` in each lexeme's whole list, packed as ``_READ``'s:
#: what completes the partly seen candidates. The list is scanned in the index (no heap,
#: no row sent but the matches); ``chunk_id + 0`` keeps the test a hashed filter rather
#: than an index condition, which a B-tree would run as one scan of the list per id. Run
#: unprepared (``_fetch_unprepared``): a generic plan cannot hash a parameter's array,
#: and a linear search of it per posting cost ~50× as much.
_COMPLETE = """
SELECT q.ord, k.ids, k.tfs, k.ntoks
FROM unnest(%(lex)s::text[]) WITH ORDINALITY AS q(lex, ord)
CROSS JOIN LATERAL (
    SELECT string_agg(int8send(k.chunk_id), ''::bytea) AS ids,
           string_agg(int4send(k.tf), ''::bytea) AS tfs,
           string_agg(int4send(k.ntok), ''::bytea) AS ntoks
    FROM kb_postings k WHERE k.lexeme = q.lex AND k.chunk_id + 0 = ANY(%(ids)s::bigint[])
) k
ORDER BY q.ord
"""
#: The postings of a filtered scope (``{scope}``: a condition on the chunks ``c``): each
#: lexeme's whole list, kept to the scope's chunks (hashed once: the ``MATERIALIZED``
#: scope, probed per posting), packed as ``_READ``'s, beside how many chunks the scope
#: holds. The lists are read only when the scope holds enough chunks that scoring its
#: matches on their rows would cost more (``%(row_cost)s`` postings per chunk in scope,
#: against ``%(postings)s`` in the lists): else the gate stops every scan at once and
#: only the count comes back.
_SCOPED = """
WITH s AS MATERIALIZED (SELECT c.id FROM kb_chunks c WHERE true {scope}),
n AS MATERIALIZED (SELECT count(*) AS n FROM s)
SELECT q.ord, n.n, n.n * %(row_cost)s::float8 >= %(postings)s::float8, k.ids, k.tfs, k.ntoks
FROM unnest(%(lex)s::text[]) WITH ORDINALITY AS q(lex, ord)
CROSS JOIN n
CROSS JOIN LATERAL (
    SELECT string_agg(int8send(k.chunk_id), ''::bytea) AS ids,
           string_agg(int4send(k.tf), ''::bytea) AS tfs,
           string_agg(int4send(k.ntok), ''::bytea) AS ntoks
    FROM kb_postings k
    WHERE n.n * %(row_cost)s::float8 >= %(postings)s::float8
      AND k.lexeme = q.lex AND k.chunk_id IN (SELECT s.id FROM s)
) k
ORDER BY q.ord
"""
#: How many postings of lexeme ``lex`` are in a bucket not named with the prefix
#: ``hidden`` (one list, index only: the impact index includes the bucket) — NULL,
#: counting nothing, while no bucket has that prefix: the whole list of a common lexeme
#: is tens of milliseconds at 300k postings, paid only where there is something to leave
#: out (the check and the count in one snapshot).
_SHOWN_POSTINGS = (
    "SELECT CASE WHEN EXISTS (SELECT 1 FROM kb_buckets b "
    "WHERE substr(b.name, 1, length(%(hidden)s::text)) = %(hidden)s::text) THEN ("
    "SELECT count(*) FROM kb_postings k "
    "WHERE k.lexeme = %(lex)s AND substr(k.bucket, 1, length(%(hidden)s::text)) <> %(hidden)s::text) END"
)

#: The first read of the postings takes this many per lexeme, or ``POSTINGS_DEPTH_FACTOR``
#: times the limit when more; each round that cannot prove its top-k reads four times
#: deeper, up to ``POSTINGS_MAX_DEPTH`` (then the matches are scored exhaustively).
POSTINGS_MIN_DEPTH = 200
POSTINGS_DEPTH_FACTOR = 4
POSTINGS_MAX_DEPTH = 50_000
#: A lexeme whose list holds at most this many times the first depth is read whole at
#: once: a list read to its end bounds nothing, and with flat impacts (a common term's
#: postings differ little) a partial read of it rarely proves the top list — the round
#: it took was then spent for nothing.
WHOLE_LIST_FACTOR = 4
#: A read holding more postings than this is scored on a worker thread (numpy lets go of
#: the GIL), not on the event loop: ~2 ms per 10k postings here, and a deep read of a
#: large index holds hundreds of thousands.
INLINE_POSTINGS = 20_000
#: What scoring one match on its chunk row costs, in postings read (a filtered scope's
#: choice, ``top_in_scope``): the row rank visits each match's ~2.7 kB row and unnests
#: its tsvector, 15–130 µs a match on the bench's 60 filtered queries at 100k chunks,
#: against ~1 µs a posting read (the scope's chunk ids included). Taken at the low end,
#: so a doubtful case stays on the rows, as it always was.
ROW_COST_IN_POSTINGS = 64
#: Float4 impacts are rounded; the bound on unseen chunks is widened by this much.
_ROUNDING = 1e-5


@dataclass(frozen=True, slots=True)
class _List:
    """What was read of one lexeme's list: the postings in scope (chunk ids, term
    frequencies and chunk lengths, aligned), how many postings were read in all, the
    last impact read, and whether the list was read to its end."""

    ids: npt.NDArray[np.int64]
    tf: npt.NDArray[np.float64]
    ntok: npt.NDArray[np.float64]
    read: int = 0
    last: float = 0.0
    ended: bool = True


def _unpack(ids: bytes | None, tfs: bytes | None, ntoks: bytes | None) -> tuple[Any, Any, Any]:
    if not ids:
        return np.zeros(0, np.int64), np.zeros(0, np.float64), np.zeros(0, np.float64)
    return (
        np.frombuffer(ids, dtype=">i8").astype(np.int64),
        np.frombuffer(tfs or b"", dtype=">i4").astype(np.float64),
        np.frombuffer(ntoks or b"", dtype=">i4").astype(np.float64),
    )


def _score(
    lists: Sequence[_List], params: Mapping[str, Any], order: Sequence[int], floors: Sequence[float]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Every chunk seen in ``lists`` (ascending ids), its score from the postings read —
    in ``kb_text._RANK``'s own arithmetic and order, so the same bits: each term ``idf ·
    (tf · (k1+1)) / (tf + k1 · (1 - b + b/avgdl · ntok))`` in float64, one IEEE operation
    at a time as PostgreSQL's ``float8`` operators do them, and a chunk's terms added up
    left to right in its tsvector's order of lexemes (``order``: their bytes), an absent
    one as 0.0 (which changes no bit) — and what the lists it was not seen in could
    still add (their ``floors``)."""
    k1, k1p1 = float(params["k1"]), float(params["k1p1"])
    omb, boa = float(params["one_minus_b"]), float(params["b_over_avgdl"])
    idfs = [float(x) for x in params["idf"]]
    ids, where = np.unique(np.concatenate([x.ids for x in lists]), return_inverse=True)
    scores = np.zeros(len(ids), dtype=np.float64)
    missing = np.zeros(len(ids), dtype=np.float64)
    starts = np.cumsum([0, *(len(x.ids) for x in lists)])
    for i in order:
        got = lists[i]
        term = np.zeros(len(ids), dtype=np.float64)
        cols = where[starts[i] : starts[i + 1]]
        term[cols] = idfs[i] * (got.tf * k1p1) / (got.tf + k1 * (omb + boa * got.ntok))
        scores = scores + term
        if floors[i]:
            absent = np.ones(len(ids), dtype=bool)
            absent[cols] = False
            missing = missing + np.where(absent, floors[i], 0.0)
    return ids, scores, missing


async def _scored(
    lists: Sequence[_List], params: Mapping[str, Any], order: Sequence[int], floors: Sequence[float]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """``_score``, on a worker thread when the read is large (``INLINE_POSTINGS``)."""
    if sum(len(x.ids) for x in lists) <= INLINE_POSTINGS:
        return _score(lists, params, order, floors)
    return await asyncio.to_thread(_score, lists, params, order, floors)


def postings_may_fill(share: float, limit: int) -> bool:
    """Whether the postings are worth reading for a scope holding ``share`` of the chunks:
    the whole index always; a bucket when its share lets the deepest read find ``limit``
    of its own many times over. A small bucket goes straight to exhaustive scoring, which
    is cheap for it (both are exact; this only decides which is faster)."""
    return share * POSTINGS_MAX_DEPTH >= POSTINGS_DEPTH_FACTOR * max(limit, POSTINGS_MIN_DEPTH)


async def _fetch_unprepared(db: PostgresDatabase, sql: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    async with db.reading() as conn:
        cur = await conn.execute(sql, dict(params), prepare=False)  # type: ignore[call-overload]
        return list(await cur.fetchall())


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
    hidden: str | None = None,
) -> KBRanked | None:
    """The exact BM25 top ``limit`` of the whole index or of one bucket, from the best
    postings of each lexeme (``kb_postings``), without visiting any chunk row.

    A posting carries its term frequency and its chunk's length (migration 23), so a
    chunk's term score is computed from it exactly as ``kb_text._RANK`` computes it on
    the row (``_score``: the same bits). A candidate seen in every list not read to its
    end is therefore scored exactly; one missing from such a list is between its
    partial score (a lower bound) and that plus the lists' floors.

    Why it is exact: a chunk none of whose postings was read holds each lexeme with
    at most the impact of the last posting read for it (none at all when its list was
    read to the end), so its score is at most ``bound`` = Σ idf · last impact. Stored
    impacts use the fixed length ``POSTINGS_AVGDL``: the true one, with today's
    average length ``avgdl``, is at most ``max(1, avgdl / POSTINGS_AVGDL)`` times the
    stored one, so the bound is widened by that factor. Once the ``limit``-th best
    lower bound is above ``bound``, nothing unread can enter, and a partly seen
    candidate can only if its upper bound reaches that bar: those few get their
    postings in the lists not read to the end (``_COMPLETE``) and are scored exactly.
    Else the unfinished lists are read four times deeper.

    ``None`` when the bound is not proven within ``POSTINGS_MAX_DEPTH`` (a bucket too
    small a share of the postings to fill ``limit``); then the matches are scored
    exhaustively. The match count is exact when every list was read to its end, else
    an estimate (the commonest lexeme's chunks, times the share of the postings read
    that were in the bucket), as the SQLite engine's probe estimates it. ``hidden``
    (without ``bucket``): the buckets named so are left out, as a bucket's outsiders are,
    and the estimate is the commonest lexeme's chunks outside them, counted.
    """
    widen = max(1.0, avgdl / POSTINGS_AVGDL) * (1.0 + _ROUNDING)
    idfs = [float(x) for x in params["idf"]]
    # A bucket's own postings are its share of each list: the first read goes as much
    # deeper, so that it holds as many of the bucket's as a read of the whole index.
    first = min(POSTINGS_MAX_DEPTH, max(POSTINGS_MIN_DEPTH, round(POSTINGS_DEPTH_FACTOR * limit / min(1.0, share))))
    # A short list whole (one more than its length: a read that stops short of its
    # depth has reached the end, whatever a stale count said).
    whole = min(WHOLE_LIST_FACTOR * first, POSTINGS_MAX_DEPTH)
    depths = [df.get(x, 0) + 1 if df.get(x, 0) < whole else first for x in lexemes]
    # Each lexeme's place in byte order (a tsvector's order of its lexemes, ``_RANK``'s sum's).
    order = sorted(range(len(lexemes)), key=lambda i: lexemes[i].encode())
    while True:
        rows = await db.fetchall(_READ, {"lex": list(lexemes), "depth": depths, "bucket": bucket, "hidden": hidden})
        lists = [
            _List(*_unpack(r[3], r[4], r[5]), read=int(r[1]), last=float(r[2] or 0.0), ended=int(r[1]) < depths[i])
            for i, r in enumerate(rows)
        ]
        floors = [0.0 if x.ended else idfs[i] * x.last * widen for i, x in enumerate(lists)]
        ids, scores, missing = await _scored(lists, params, order, floors)
        complete = not any(floors)
        if complete:
            kept_ids, kept_scores = ids, scores
            break
        settled = missing == 0
        lower = np.where(settled, scores, scores * (1.0 - _ROUNDING))
        if len(lower) >= limit:
            bar = float(-np.partition(-lower, limit - 1)[limit - 1])
            if bar > sum(floors):
                unsure = ~settled & ((scores + missing) * (1.0 + _ROUNDING) >= bar)
                kept_ids, kept_scores = ids[settled], scores[settled]
                if unsure.any():
                    done_ids, done_scores = await _completed(db, lexemes, lists, params, order, ids[unsure])
                    kept_ids = np.concatenate([kept_ids, done_ids])
                    kept_scores = np.concatenate([kept_scores, done_scores])
                break
        if all(x.ended or depths[i] >= POSTINGS_MAX_DEPTH for i, x in enumerate(lists)):
            return None
        depths = [d if x.ended else min(POSTINGS_MAX_DEPTH, d * 4) for d, x in zip(depths, lists, strict=True)]
    top_ids, top_scores = _best(kept_ids, kept_scores, limit)
    if not top_ids:
        return KBRanked()
    candidates = len(ids)
    if complete:
        total = candidates
    else:
        read, kept = sum(x.read for x in lists), sum(len(x.ids) for x in lists)
        # Unread postings remain: never as few as the rows returned, which would read as
        # an exact count (``bm25_parts.match_count``'s and the SQLite engine's convention).
        estimate = round(max(df.get(x, 0) for x in lexemes) * (kept / read if read else 0.0))
        if hidden is not None and bucket is None:
            # The commonest lexeme's chunks outside the hidden buckets, counted: its df
            # scaled by the share read would count the hidden buckets' postings below
            # the read (another user's attachment would move the count).
            common = max(lexemes, key=lambda x: df.get(x, 0))
            row = await db.fetchone(_SHOWN_POSTINGS, {"lex": common, "hidden": hidden})
            if row is not None and row[0] is not None:  # else no hidden bucket: the scaled df stands
                estimate = int(row[0])
        total = max(len(top_ids) + 1, candidates, estimate)
    return KBRanked(top_ids, top_scores, total)


def _best(ids: npt.NDArray[np.int64], scores: npt.NDArray[np.float64], limit: int) -> tuple[list[int], list[float]]:
    """The ``limit`` best (score descending, then chunk id), as ``sorted`` with that key
    would give them: the candidates at or above the ``limit``-th score (every tie at
    the cut kept, so the lowest ids win it) are picked by a partition and only they are
    sorted. Sorting a dict of every scored candidate in Python was ~3 ms a search."""
    if len(ids) > limit > 0:
        cut = np.partition(scores, len(scores) - limit)[len(scores) - limit]
        keep = scores >= cut
        ids, scores = ids[keep], scores[keep]
    best = np.lexsort((ids, -scores))[: max(limit, 0)]
    return ids[best].tolist(), scores[best].tolist()


async def _completed(
    db: PostgresDatabase,
    lexemes: Sequence[str],
    lists: Sequence[_List],
    params: Mapping[str, Any],
    order: Sequence[int],
    unsure: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """The exact scores of the partly seen candidates ``unsure``: their postings in the
    lists not read to their end, found in the whole list (``_COMPLETE``); in the others
    they are what was read."""
    open_lists = [i for i, x in enumerate(lists) if not x.ended]
    rows = await _fetch_unprepared(db, _COMPLETE, {"lex": [lexemes[i] for i in open_lists], "ids": unsure.tolist()})
    whole = {i: _List(*_unpack(r[1], r[2], r[3])) for i, r in zip(open_lists, rows, strict=True)}
    mine: list[_List] = []
    for i, x in enumerate(lists):
        if i in whole:
            mine.append(whole[i])
        else:
            keep = np.isin(x.ids, unsure)
            mine.append(_List(x.ids[keep], x.tf[keep], x.ntok[keep]))
    ids, scores, _ = _score(mine, params, order, [0.0] * len(lists))
    wanted = np.isin(ids, unsure)
    return ids[wanted], scores[wanted]


async def top_in_scope(
    db: PostgresDatabase,
    lexemes: Sequence[str],
    params: Mapping[str, Any],
    df: Mapping[str, int],
    *,
    condition: str,
    limit: int,
    total_chunks: int,
) -> KBRanked | None:
    """The exact BM25 top ``limit`` of a filtered scope (``condition``: ``AND …`` on the
    chunks ``c``, its parameters in ``params``) from the postings: every lexeme's whole
    list kept to the scope's chunks (``_SCOPED``: one statement), each match scored
    from its postings as ``_score`` scores them (the bits of ``kb_text._RANK``), so the
    answer is the exhaustive top list and ``total`` the exact match count. No chunk row
    is visited; before, every match of the scope was scored on its row (~40 µs each:
    a few thousand matches were most of a filtered search).

    ``None`` when the rows are the cheaper way: the scope's expected matches (its
    chunks times the share of the index holding any lexeme, taken as independent) at
    ``ROW_COST_IN_POSTINGS`` each cost less than the lists' postings (a handful of
    documents and common lexemes). The scope is then counted but not read twice."""
    postings = sum(df.get(x, 0) for x in lexemes)
    n = max(1, total_chunks)
    any_share = 1.0 - math.prod(1.0 - min(1.0, df.get(x, 0) / n) for x in lexemes)
    rows = await db.fetchall(
        _SCOPED.format(scope=condition),
        {**params, "lex": list(lexemes), "row_cost": ROW_COST_IN_POSTINGS * any_share, "postings": postings},
    )
    if not rows or int(rows[0][1]) == 0:
        return KBRanked()
    if not rows[0][2]:  # the server's own verdict: its gate let no scan run
        return None
    lists = [_List(*_unpack(r[3], r[4], r[5])) for r in rows]
    order = sorted(range(len(lexemes)), key=lambda i: lexemes[i].encode())
    ids, scores, _ = await _scored(lists, params, order, [0.0] * len(lists))
    top_ids, top_scores = _best(ids, scores, limit)
    return KBRanked(top_ids, top_scores, len(ids)) if top_ids else KBRanked()
