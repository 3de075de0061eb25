"""Build FTS5 ``MATCH`` expressions from user text without ever exposing FTS syntax.

User text is never passed to ``MATCH`` as is: quotes, ``*``, ``:``, ``^``, ``-``,
parentheses and the words ``AND``/``OR``/``NOT``/``NEAR`` all mean something to FTS5 and
raise syntax errors or change the query. We tokenise like the ``unicode61`` tokenizer,
drop stop words, and emit each remaining term as a double-quoted string (a token can
contain no ``"``, but any is doubled anyway) joined with ``OR``; BM25 then ranks chunks
that contain more of the terms higher.
"""

from __future__ import annotations

from knowledge.textnorm import content_terms


def quote_term(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def match_expression(query: str, *, max_terms: int = 24) -> str | None:
    """The ``MATCH`` argument for ``query``, or ``None`` when it has no searchable term."""
    terms = content_terms(query, limit=max_terms)
    if not terms:
        return None
    return " OR ".join(quote_term(t) for t in terms)


def bm25_to_unit(bm25: float) -> float:
    """Map an FTS5 ``bm25()`` value (negative, lower is better) onto 0..1, saturating."""
    x = max(0.0, -bm25)
    return x / (1.0 + x)
