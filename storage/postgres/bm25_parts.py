"""The pure parts of a BM25 rank on PostgreSQL: the ``tsquery`` text a query's lexemes
become, and the arithmetic of idf and MaxScore pruning (``kb_text`` says how a query runs).

Apart from ``kb_text.TextRanker``, which keeps the statements, the round trips and the
cached statistics: nothing here reads the database or keeps state, so these rules — how
a lexeme is quoted, which terms a chunk must hold to reach the bar, how a pruned rank's
match count is estimated — can be read, and checked, without PostgreSQL.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

#: A match's tsvector cut down to the query's lexemes (``kb_text._RANK``'s ``{cut}``).
CUT = "ts_delete(c.tsv, tsvector_to_array(ts_delete(c.tsv, %(lex)s::text[])))"


def tsquery_literal(lexeme: str) -> str:
    """One lexeme as ``tsquery`` input: quoted, quotes and backslashes doubled, so no
    character of it is query syntax."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def or_query(lexemes: Sequence[str]) -> str:
    return " | ".join(tsquery_literal(x) for x in lexemes)


def phrase_query(lexemes: Sequence[str]) -> str:
    """A split's words in sequence (``storage.kb_terms.split_phrase``) as ``tsquery`` input."""
    return " <-> ".join(tsquery_literal(x) for x in lexemes)


def split_cut(groups: Sequence[Sequence[str]], alone: Sequence[str], params: dict[str, Any]) -> str:
    """``CUT`` for a query with splits' phrases ``groups``: the lexemes of a phrase the
    chunk does not hold in sequence are cut too (unless a term of their own, ``alone``),
    so a phrase scores only where it matched — an AND group of its words, each weighed
    as itself; the phrase's parameters are added to ``params``."""
    cut = CUT
    for i, group in enumerate(groups):
        params[f"g{i}"] = phrase_query(group)
        params[f"gl{i}"] = [x for x in dict.fromkeys(group) if x not in alone]
        cut = f"ts_delete({cut}, CASE WHEN c.tsv @@ %(g{i})s::tsquery THEN '{{}}'::text[] ELSE %(gl{i})s::text[] END)"
    return cut


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


def match_count(
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


__all__ = [
    "CUT",
    "essential_terms",
    "first_pass_terms",
    "idf",
    "match_count",
    "or_query",
    "phrase_query",
    "split_cut",
    "tsquery_literal",
]
