"""The names and constants the PostgreSQL knowledge base's full-text schema is built
with, shared by the migration steps that create the functions and columns and by the
queries that read them (``kb_text``, ``kb_postings``, ``kb_index``).

Why a module of its own: a function's name or a BM25 constant written in a step must be
the very value the queries use, and the steps (``storage.postgres.migration_steps``) and
the runner (``storage.postgres.migrations``) must not import each other.
"""

from __future__ import annotations

#: Folds text the way ``knowledge.textnorm.fold`` does (NFKD, combining marks dropped)
#: and splits it where FTS5's tokenizer does (every ASCII punctuation character is a
#: separator) before PostgreSQL's parser and English stemmer see it: "café" meets
#: "cafe", and "os.path.join" is three words, not one file-name token. Immutable, so a
#: generated column may use it.
FOLD_FUNCTION = "agentchat_fold"
TEXT_CONFIG = "english"

#: BM25's constants (FTS5's own), shared with ``kb_text``.
K1 = 1.2
B = 0.75
#: FTS5's column weights (title, heading, text), carried by the tsvector weights A/B/C;
#: ``kb_text`` ranks with them and step 23 stores each posting's term frequency with
#: them, so a change needs a step that writes the postings again.
COLUMN_WEIGHTS = (4, 2, 1)
#: The fixed document length the stored impacts are normalised with (``kb_postings``):
#: any fixed value keeps the top-k exact (``kb_text``); one near the real average keeps
#: the impact order close to the true one, so fewer postings are read.
POSTINGS_AVGDL = 64.0
#: ``(weights of a lexeme's positions, chunk tokens)`` → its stored impact.
IMPACT_FUNCTION = "agentchat_kb_impact"

#: A transaction that writes ``kb_chunks`` during a bulk load sets this (``SET LOCAL``) and
#: posts the chunks it wrote itself, set-wise, before it commits (``kb_index``).
POSTINGS_DEFERRED_SETTING = "agentchat.kb_postings_deferred"

#: A posting's FTS5 term frequency (title/heading/text positions weighted 4/2/1, as
#: ``kb_text`` weighs them), from its tsvector weights; inlinable (a bare expression).
TF_FUNCTION = "agentchat_kb_tf"
