"""FTS5 on its own terms: ``MATCH`` syntax, which terms are worth scoring, and the
ranked BM25 statements of the knowledge-base index.

User text never reaches ``MATCH`` as is: quotes, ``*``, ``:``, ``^``, ``-``,
parentheses and the words ``AND``/``OR``/``NOT``/``NEAR`` all mean something to FTS5 and
raise syntax errors or change the query. ``knowledge`` tokenises the query and drops
stop words; each remaining term is emitted here as a double-quoted string (a token can
contain no ``"``, but any is doubled anyway) joined with ``OR``; BM25 then ranks chunks
that contain more of the terms higher. A split of a joined word the index barely knows
("agentchat" → ``agent chat``, ``term_splits``) is one term with a space: quoted, FTS5
reads it as a phrase, matched and weighed (its own idf) as the words in sequence.

BM25 cost grows with the matches it must score, so terms in a large share of the
chunks (near-zero idf) are left out of the ``MATCH`` (``selective_terms``). A scoped
search walks the matches once and scores only those in scope, with the scope test kept
out of FTS5's reach (``+rowid IN``): handed to FTS5 as a rowid constraint it would
re-run the ``MATCH`` and bm25's statistics per chunk. A bucket without filters probes
the best matches of the whole index instead.

A filter not resolved yet (a text search) is ranked in one statement from the filter's
table, with no round trip of its documents.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import orjson

from storage.kb_records import KBRanked, KBScope, KBTextTuning
from storage.kb_terms import choose_split, may_split, plausible_cuts, split_phrase, tuned_selective_terms
from storage.sqlite.database import SqliteDatabase
from storage.sqlite.kb_filters_sql import scope_chunks_sql

BM25_WEIGHTS = "4.0, 2.0, 1.0"  # title, heading, text

#: Rows ``(chunk id, bm25, match count)``, best first, over the whole index.
RANK_ALL = (
    f"SELECT rowid, bm25(kb_chunks_fts, {BM25_WEIGHTS}) AS s, "
    "(SELECT count(*) FROM kb_chunks_fts WHERE kb_chunks_fts MATCH ?1) "
    "FROM kb_chunks_fts WHERE kb_chunks_fts MATCH ?1 ORDER BY s, rowid LIMIT ?2"
)

#: The chunk ids of the document ids in the JSON array ``?`` (a scope resolved already),
#: joined from the ids into ``kb_chunks``' ``doc_id`` index: ``c.doc_id IN (...)`` would
#: first sort the ids into a temporary index.
CHUNKS_OF_DOCS = "SELECT c.id FROM json_each(?) j CROSS JOIN kb_chunks c ON c.doc_id = j.value"

#: The chunk ids in the JSON array ``?`` (a scope resolved to its chunks, ascending: the
#: ranking's scope index is then built in key order).
CHUNKS_IN = "SELECT value FROM json_each(?)"

#: Rows ``(chunk id, bucket)`` of the chunk ids in the JSON array ``?`` (the probe's
#: bucket test, asked only for the prefix of the ranking it needs).
BUCKETS_OF = (
    "SELECT c.id, d.bucket FROM json_each(?) j "
    "CROSS JOIN kb_chunks c ON c.id = j.value CROSS JOIN kb_documents d ON d.id = c.doc_id"
)

#: How many matches of ``?1`` are in no bucket whose name starts with a prefix (``?2`` <=
#: bucket < ``?3``: the bucket index's range): every match less those of the hidden
#: buckets' chunks (few, materialised; each match tested against them, ``+rowid``: not
#: handed to FTS5 as a rowid constraint, which would run the MATCH again per chunk),
#: unscored. One statement, one snapshot: a hidden bucket's chunks committed between
#: two statements would be subtracted without having been counted. No hidden bucket at
#: all: the ``EXISTS``, evaluated once, skips the walk (0.7 ms against 1.9 for a
#: 7k-match query at 20k documents).
SHOWN_MATCHES = (
    "SELECT (SELECT count(*) FROM kb_chunks_fts WHERE kb_chunks_fts MATCH ?1) - "
    "(SELECT count(*) FROM kb_chunks_fts WHERE kb_chunks_fts MATCH ?1 "
    "AND EXISTS (SELECT 1 FROM kb_documents WHERE bucket >= ?2 AND bucket < ?3) AND +rowid IN ("
    "SELECT c.id FROM kb_documents d CROSS JOIN kb_chunks c ON c.doc_id = d.id WHERE d.bucket >= ?2 AND d.bucket < ?3))"
)


def rank_in_scope(chunks_sql: str) -> str:
    """Rows ``(chunk id, bm25, match count)``, best first, of the matches among the chunks
    ``chunks_sql`` selects (the scope as chunk ids: ``scope_chunks_sql``, ``CHUNKS_IN`` or
    ``CHUNKS_OF_DOCS``); parameters: the scope's, then the ``MATCH`` expression, then the
    limit.

    The scope's chunk ids are put in one index and the FTS cursor walks every match but
    computes ``bm25()`` only for those in scope: scoring costs 20-30x walking a match,
    and a filter typically keeps a few percent of them (at 1M chunks 3-6x faster than
    scoring every match and intersecting afterwards, same ranking). The scope test is
    written ``+rowid IN (...)`` so SQLite cannot hand it to FTS5 as a rowid constraint:
    that would re-run the MATCH, and bm25's per-query statistics (a walk over each
    term's whole doclist), once per chunk in scope. The ``IN`` list is built from the
    scope's ``SELECT`` directly: a materialised CTE in between was one more copy of the
    scope (at 1M chunks 8-15 ms of a 105-195 ms filtered ranking, same rows).
    """
    return (
        f"WITH k AS MATERIALIZED (SELECT rowid AS id, bm25(kb_chunks_fts, {BM25_WEIGHTS}) AS s "
        f"FROM kb_chunks_fts WHERE +rowid IN ({chunks_sql}) AND kb_chunks_fts MATCH ?) "
        "SELECT id, s, (SELECT count(*) FROM k) FROM k ORDER BY s, id LIMIT ?"
    )


def term_counts_statement(n: int) -> str:
    """One statement counting the (unscored) matches of ``n`` single-term expressions:
    an unscored count is cheap, a round trip is not."""
    return "SELECT " + ", ".join(["(SELECT count(*) FROM kb_chunks_fts WHERE kb_chunks_fts MATCH ?)"] * n)


def quote_term(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def or_expression(terms: Sequence[str]) -> str | None:
    """``"a" OR "b"`` for already tokenised ``terms``; ``None`` when there are none."""
    return " OR ".join(quote_term(t) for t in terms) if terms else None


def bm25_to_unit(bm25: float) -> float:
    """Map an FTS5 ``bm25()`` value (negative, lower is better) onto 0..1, saturating."""
    x = max(0.0, -bm25)
    return x / (1.0 + x)


def _ranked(rows: Sequence[Sequence[Any]]) -> KBRanked:
    """Rows ``(chunk id, bm25, match count)``, best first → positive scores."""
    if not rows:
        return KBRanked()
    return KBRanked([int(r[0]) for r in rows], [max(0.0, -float(r[1])) for r in rows], int(rows[0][2]))


def _in_scope(bucket: str | None, scope: KBScope) -> bool:
    """Whether a ranked chunk's document, stored in ``bucket`` (``None``: gone since the
    ranking), is in a scope of a bucket or of every bucket but the hidden ones."""
    if bucket is None:
        return False
    if scope.bucket is not None:
        return bucket == scope.bucket
    return not (scope.hidden_prefix and bucket.startswith(scope.hidden_prefix))


class FtsRanker:
    """The full-text side of ``SqliteKBIndex``, with its term and document counts.

    The counts are cached until ``changed()`` (called after every write of the index),
    guarded by a generation counter so a count read before a commit is never cached
    after it.
    """

    def __init__(self, db: SqliteDatabase) -> None:
        self._db = db
        self._df_cache: dict[str, int] = {}
        #: A rare term's split (``term_splits``), ``None`` when it has none.
        self._splits: dict[str, tuple[str, ...] | None] = {}
        self._df_total: int | None = None
        self._doc_counts: dict[str | None, int] = {}
        self._generation = 0

    def changed(self) -> None:
        self._generation += 1
        self._df_cache.clear()
        self._splits.clear()
        self._df_total = None
        self._doc_counts.clear()

    async def _doc_count(self, bucket: str | None) -> int:
        """Documents in ``bucket`` (all when ``None``), cached until the next write."""
        known = self._doc_counts.get(bucket)
        if known is not None:
            return known
        generation = self._generation
        sql, params = (
            ("SELECT count(*) FROM kb_documents", ())
            if bucket is None
            else ("SELECT count(*) FROM kb_documents WHERE bucket = ?", (bucket,))
        )
        row = await self._db.fetchone(sql, params)
        count = int(row[0]) if row else 0
        if generation == self._generation:
            self._doc_counts[bucket] = count
        return count

    async def _chunk_total(self) -> int:
        """Chunks in the index, cached until the next write."""
        generation = self._generation
        total = self._df_total
        if total is None:
            row = await self._db.fetchone("SELECT count(*) FROM kb_chunks")
            total = int(row[0]) if row else 0
            if generation == self._generation:
                self._df_total = total
        return total

    async def _term_dfs(self, terms: Sequence[str], tuning: KBTextTuning) -> dict[str, int]:
        """How many chunks match each of ``terms`` (an unscored ``count(*)`` of its
        matches, so stemming and tokenising agree with the index; a split's phrase is
        counted as the phrase), the missing ones in one statement, cached until the next
        write."""
        generation = self._generation
        df = {t: self._df_cache[t] for t in terms if t in self._df_cache}
        missing = [t for t in dict.fromkeys(terms) if t not in df]
        if missing:
            row = await self._db.fetchone(term_counts_statement(len(missing)), [or_expression([t]) for t in missing])
            counts = [int(c) for c in row] if row else [0] * len(missing)
            if generation == self._generation:
                if len(self._df_cache) + len(missing) > tuning.term_stats_cache:
                    self._df_cache.clear()
                self._df_cache.update(zip(missing, counts, strict=True))
            df.update(zip(missing, counts, strict=True))
        return df

    async def selective_terms(self, terms: Sequence[str], min_matches: int, tuning: KBTextTuning) -> list[str]:
        """``terms`` without the very common ones (see ``selective_terms`` above).

        Document frequencies come from the FTS index itself (``_term_dfs``) and are
        cached until the next write.
        """
        terms = list(terms)
        total = await self._chunk_total()
        if total < tuning.common_term_min_df:
            return terms  # nothing can be common enough to matter: exact old behaviour
        df = await self._term_dfs(terms, tuning)
        return tuned_selective_terms(terms, df, total, tuning, min_matches=min_matches)

    async def term_splits(
        self, candidates: Mapping[str, Sequence[Sequence[str]]], tuning: KBTextTuning
    ) -> dict[str, tuple[str, ...]]:
        """The split (``storage.kb_terms.choose_split``) of each term of ``candidates``
        the index barely knows: its parts counted (one statement for the parts of every
        such term, ``_term_dfs``), then the phrases of the cuts whose parts are all held
        (one more), kept until the next write. A term the index knows well is never
        looked up past its own count (which the term choice needs anyway)."""
        generation = self._generation
        df = await self._term_dfs(list(candidates), tuning)
        rare = [t for t, cuts in candidates.items() if cuts and may_split(df[t])]
        unknown = [t for t in rare if t not in self._splits]
        if unknown:
            part_df = await self._term_dfs([p for t in unknown for cut in candidates[t] for p in cut], tuning)
            cuts = {t: plausible_cuts(candidates[t], part_df) for t in unknown}
            phrases = [split_phrase(c) for t in unknown for c in cuts[t]]
            phrase_df = await self._term_dfs(phrases, tuning) if phrases else {}
            chosen = {t: choose_split(cuts[t], phrase_df) for t in unknown}
            if generation == self._generation:
                if len(self._splits) + len(chosen) > tuning.term_stats_cache:
                    self._splits.clear()
                self._splits.update(chosen)
        else:
            chosen = {}
        out: dict[str, tuple[str, ...]] = {}
        for t in rare:
            split = chosen[t] if t in chosen else self._splits.get(t)
            if split is not None:
                out[t] = split
        return out

    async def text_candidates(
        self,
        terms: Sequence[str],
        scope: KBScope,
        limit: int,
        tuning: KBTextTuning,
        schema: Mapping[str, str] | None = None,
    ) -> KBRanked:
        """BM25 top ``limit`` within the scope (``schema`` is not needed: SQLite's filter
        conditions are the same whatever a field's type).

        Everything: one ranked query on the bare index. A bucket without filters: a
        probe of the best matches of the whole index when the bucket holds a fair share
        of them (cheap joins on ~1000 rows). Otherwise the scope is ranked exactly
        (``rank_in_scope``).
        """
        match = or_expression(terms)
        if match is None:
            return KBRanked()
        if scope.everything:
            return _ranked(await self._db.fetchall(RANK_ALL, (match, limit)))
        if (
            scope.doc_ids is None
            and scope.doc_id is None
            and scope.filter is None
            and await self._probe_may_fill(scope.bucket, limit, tuning)
        ):
            probed = await self._probe(match, scope, limit, tuning)
            if probed is not None:
                return probed
        if scope.chunk_ids is not None:
            # Resolved to its chunks already (a hybrid search's vector side needed them):
            # their ids, ascending, are the scope as is, with no join of documents.
            ids = np.ascontiguousarray(scope.chunk_ids, np.int64)
            chunks, params = CHUNKS_IN, [orjson.dumps(ids, option=orjson.OPT_SERIALIZE_NUMPY).decode()]
        elif scope.doc_ids is not None:
            # The scope is already known: hand it over as JSON rather than re-running it.
            chunks, params = CHUNKS_OF_DOCS, [orjson.dumps(list(scope.doc_ids)).decode()]
        else:
            # Not resolved yet (a text search needs no document list): one statement
            # from the filter to the ranking, no round trip of the ids.
            chunks, params = scope_chunks_sql(scope, schema)
        return _ranked(await self._db.fetchall(rank_in_scope(chunks), [*params, match, limit]))

    async def _probe_may_fill(self, bucket: str | None, limit: int, tuning: KBTextTuning) -> bool:
        """Whether a probe can be expected to find ``limit`` matches of ``bucket``: the
        bucket's share of all documents times the probe size. A small bucket goes
        straight to the exact query, saving a ranking of every match (both are exact;
        this only decides which is faster)."""
        if bucket is None:
            return True
        share = await self._doc_count(bucket) / max(1, await self._doc_count(None))
        return share * max(limit * 10, tuning.text_probe) >= limit

    async def _probe(self, match: str, scope: KBScope, limit: int, tuning: KBTextTuning) -> KBRanked | None:
        """A bucket's BM25 top ``limit`` without materialising the bucket: rank all
        matches on the bare FTS index, look at the best ``probe`` of them and keep
        those in ``scope.bucket`` (without one: those of no bucket named with
        ``scope.hidden_prefix``, each judged by its bucket as stored, never by a list of
        buckets). ``None`` when the scope does not fill ``limit`` from the probe (then
        the exact query runs).

        The bucket of a ranked chunk is looked up only as far down the ranking as
        needed to fill ``limit`` (``2 * limit`` rows first, then twice as many each
        time): the lookup is two B-tree searches per row (~9 us at 100k chunks), and
        joining every probed row cost a third of a search. The match count is exact when
        the probe saw every match (then every probed row is looked up) or the scope is
        every bucket but the hidden ones (``SHOWN_MATCHES``), else scaled from the rows
        looked up."""
        probe = max(limit * 10, tuning.text_probe)
        rows = await self._db.fetchall(RANK_ALL, (match, probe))
        if not rows:
            return KBRanked()
        total_all = int(rows[0][2])
        saw_all = len(rows) >= total_all
        kept: list[tuple[int, float]] = []
        looked, step = 0, max(1, 2 * limit)
        while looked < len(rows) and (saw_all or len(kept) < limit):
            part = rows[looked : looked + step]
            buckets = dict(await self._db.fetchall(BUCKETS_OF, (orjson.dumps([r[0] for r in part]).decode(),)))
            kept.extend((int(r[0]), max(0.0, -float(r[1]))) for r in part if _in_scope(buckets.get(r[0]), scope))
            looked += len(part)
            step *= 2
        if saw_all:
            kept_total = len(kept)
        elif len(kept) < limit:
            return None
        elif scope.bucket is None and scope.hidden_prefix:
            # Every bucket but the hidden ones: the matches outside them, counted in one
            # statement (a share scaled from the ranking's top would count the hidden
            # buckets' matches below it: another user's attachment would move the count).
            prefix = scope.hidden_prefix
            row = await self._db.fetchone(SHOWN_MATCHES, (match, prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)))
            kept_total = max(int(row[0]) if row else 0, min(len(kept), limit))
        else:
            kept_total = round(total_all * len(kept) / looked)
        kept = kept[:limit]
        return KBRanked([k[0] for k in kept], [k[1] for k in kept], kept_total)
