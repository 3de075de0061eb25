"""The SQL of writing a chunk on PostgreSQL: the binary ``COPY`` of chunk rows, the
set-wise statement that posts a bulk load's chunks (``kb_postings``), and the cleaning
and token counting of a chunk's text.

Why apart: these are long, tuned statements (each with the measurement that shaped it)
that ``kb_index`` runs but nobody reads to follow a write; ``storage.migrate_copy``
cleans and counts rows the same way without the index class.
"""

from __future__ import annotations

import re

from storage.postgres.text_schema import IMPACT_FUNCTION, TF_FUNCTION

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)

#: Binary ``COPY``: pgvector's text form of a vector is 384 floats printed one by one
#: in Python (~0.37 ms a chunk, most of a bulk load's time); its binary form is a copy
#: of the float32 buffer.
COPY_CHUNKS = (
    "COPY kb_chunks (id, doc_id, position, title, heading, text, ntok, embedding, page, page_end, bucket)"
    " FROM STDIN (FORMAT BINARY)"
)
CHUNK_TYPES = ("int8", "text", "int4", "text", "text", "text", "int4", "vector", "int4", "int4", "text")

#: Chunk lengths (tokens) whose one-position impacts ``POST_CHUNKS`` reads from a table.
_TABLED_NTOK = 2047


def _impact_table(weight: str) -> str:
    """The impact function's own values for a lexeme at one position of ``weight``, for
    every chunk length up to ``_TABLED_NTOK`` (an array indexed by length + 1)."""
    return (
        f"(SELECT ARRAY(SELECT {IMPACT_FUNCTION}(ARRAY['{weight}'], k)"
        f" FROM generate_series(0, {_TABLED_NTOK}) k)) AS {weight.lower()}"
    )


#: A posting's impact: the impact function of its weights and the chunk's length. Most
#: postings are a lexeme at one position (weights ``{C}``, ``{A}``, ...): for those the
#: value is read from ``_impact_table``, computed once per statement by the same function
#: from the same arguments, hence the same ``real``; the function itself costs ~8 µs a
#: posting (its array scans and numeric arithmetic), most of a bulk load's posting time.
_IMPACT = (
    f"CASE WHEN cardinality(u.weights) = 1 AND c.ntok BETWEEN 0 AND {_TABLED_NTOK} THEN"
    " CASE u.weights[1] WHEN 'C' THEN t.c[c.ntok + 1] WHEN 'A' THEN t.a[c.ntok + 1]"
    " WHEN 'B' THEN t.b[c.ntok + 1] WHEN 'D' THEN t.d[c.ntok + 1]"
    f" ELSE {IMPACT_FUNCTION}(u.weights, c.ntok) END"
    f" ELSE {IMPACT_FUNCTION}(u.weights, c.ntok) END"
)

#: A posting's term frequency (migration 23's ``TF_FUNCTION``); a lexeme at one position
#: is 4, 2 or 1 by its weight, read off without the function's array scans.
_TF = (
    "CASE WHEN cardinality(u.weights) = 1 THEN CASE u.weights[1] WHEN 'A' THEN 4 WHEN 'B' THEN 2 ELSE 1 END"
    f" ELSE {TF_FUNCTION}(u.weights) END"
)

#: The postings of the chunks one transaction wrote. The same rows as the trigger's:
#: impacts depend on the chunk alone (``migrations``, ``kb_text``). Each chunk's bucket
#: is looked up by its document's key, once per chunk (the materialized ``c``): joined
#: instead, the planner hashed the whole of ``kb_documents`` for every batch's 2,000
#: chunks (a sequential scan of 100k rows, ~50 ms a batch at 100k, growing with the
#: knowledge base: quadratic over a load).
POST_CHUNKS = (
    "WITH c AS MATERIALIZED (SELECT c.id, c.ntok, c.tsv,"
    " (SELECT d.bucket FROM kb_documents d WHERE d.id = c.doc_id) AS bucket"
    " FROM kb_chunks c WHERE c.id = ANY(%s))"
    " INSERT INTO kb_postings (lexeme, impact, chunk_id, bucket, tf, ntok)"
    f" SELECT u.lexeme, {_IMPACT}, c.id, c.bucket, {_TF}, c.ntok"
    f" FROM (SELECT {', '.join(_impact_table(w) for w in 'ABCD')}) t,"
    " c CROSS JOIN LATERAL unnest(c.tsv) AS u(lexeme, positions, weights)"
)
#: With the B-tree in place, in its order: a sorted insert touches each leaf page once
#: instead of jumping between them (without it, the sort would be wasted work).
IN_INDEX_ORDER = " ORDER BY 1, 2 DESC, 3"


def clean(text: str | None) -> str | None:
    """PostgreSQL text cannot hold NUL characters; extracted documents sometimes do."""
    return text.replace("\x00", " ") if text is not None and "\x00" in text else text


def token_count(*texts: str) -> int:
    """BM25's document length: word tokens, as FTS5's tokenizer counts them."""
    return sum(len(_TOKEN.findall(t)) for t in texts)


__all__ = ["CHUNK_TYPES", "COPY_CHUNKS", "IN_INDEX_ORDER", "POST_CHUNKS", "clean", "token_count"]
