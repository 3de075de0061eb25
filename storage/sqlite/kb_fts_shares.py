"""A large scope's BM25 ranking in shares of the chunk-id range, one reader each.

Why: at 1M chunks a filter keeping ~31k datasheets spent ~130 ms of one reader's CPU in
one FTS5 statement (``kb_fts.rank_in_scope``): ~13 ms walking the matches, ~30 ms testing
them against the scope, ~9 ms for bm25's statistics and ~70 ms scoring the ~31k matches
in scope (``bm25()``, ~2.3 us a row) - while the machine's other core waited. Split at
the median chunk id, each share's statement hands FTS5 its rowid bounds (``rowid >= ?
AND rowid <= ?``, which FTS5 takes as a range: its doclists are entered at the lower
bound and left at the upper one), so the two shares walk and score disjoint halves, and
only bm25's statistics are computed twice: 69 + 69 ms of CPU against 134 ms in one
statement, identical rows (an earlier split of the scope alone, without the bounds,
walked every match in each share: 13-36 % more CPU, taken out).

Exact: bm25's statistics (rows, average length, each phrase's matches) are read from
the whole index whatever the bounds, so a chunk scores the same in its share as in one
statement; the shares partition the scope, so the merged best ``limit`` by ``(score,
id)`` is the one statement's list, and the match counts add up. The shares are two
reads, each in its own snapshot: a write committed between them can leave one share's
statistics a write apart from the other's, as the scope read before a hybrid search's
ranking already is.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from storage.sqlite.database import SqliteDatabase

#: A scope of fewer chunks is ranked in one statement: the second statistics pass costs
#: the same whatever the scope (a walk of each term's doclist, ~9 ms at 1M chunks), so
#: a small scope would pay for it in a larger share of its CPU than it saves in time
#: (at 100k chunks the bench's filters keep 1-4k; at 1M the datasheets' 31k pay ~3 %).
SHARE_MIN_CHUNKS = 16_384
#: Shares per ranking: the reader pool has three readers and the machines this runs on
#: two or more cores; a hybrid search's vector scan runs beside them.
SHARES = 2


def share_bounds(ids: npt.NDArray[np.int64], shares: int = SHARES) -> list[tuple[int, int]]:
    """``(start, end)`` positions in ``ids`` (ascending, distinct) of ``shares`` runs of
    about equal length: a share's rowid bounds are its first and last id."""
    n = len(ids)
    cuts = [round(n * k / shares) for k in range(shares + 1)]
    return [(a, b) for a, b in itertools.pairwise(cuts) if b > a]


def merge_shares(parts: Sequence[Sequence[Sequence[Any]]], limit: int) -> list[tuple[int, float, int]]:
    """The best ``limit`` rows ``(chunk id, bm25, match count)`` of shares' rankings, by
    ``(bm25, id)`` as one statement orders them, the count being the shares' sum."""
    total = sum(int(rows[0][2]) for rows in parts if rows)
    merged = sorted((float(r[1]), int(r[0])) for rows in parts for r in rows)[:limit]
    return [(cid, s, total) for s, cid in merged]


async def rank_shares(
    db: SqliteDatabase,
    statement: str,
    ids: npt.NDArray[np.int64],
    match: str,
    limit: int,
    shares: int = SHARES,
) -> list[tuple[int, float, int]]:
    """The ranking of the scope ``ids`` (ascending, distinct) in ``shares`` runs of
    ``statement`` (``kb_fts.rank_in_scope`` of the ids in a JSON array, bounded: its
    parameters are the ids, the ``MATCH`` expression, the lower and upper rowid and the
    limit) at once on the pool's readers, merged (see the module docstring)."""
    reads = []
    for a, b in share_bounds(ids, shares):
        part = ids[a:b]
        ids_json = orjson.dumps(part, option=orjson.OPT_SERIALIZE_NUMPY).decode()
        reads.append(db.fetchall(statement, (ids_json, match, int(part[0]), int(part[-1]), limit)))
    return merge_shares(await asyncio.gather(*reads), limit)


__all__ = ["SHARES", "SHARE_MIN_CHUNKS", "merge_shares", "rank_shares", "share_bounds"]
