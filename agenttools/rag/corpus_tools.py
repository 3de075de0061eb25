"""The bucketed-corpus tools of seed 004: ``search_text``, ``search_semantic`` and
``get_document_metadata``.

They are thin on purpose: the knowledge base does the retrieval (high-recall candidate
set, fusion, cheap re-ranking, at most three chunks per document, snippets) and the
filter language. This module turns what the model sent into one ``KnowledgeBase.search``
call and what came back into three things:

* a compact result the model reads (``source_id``/``doc_id``, ``chunk_id``, title,
  snippet, score, metadata, location);
* evidence: every document a result came from is registered in ``RunToolState.sources``
  under its ``doc_id``, so a ``[doc_id]`` citation in the answer (or a ``source_id`` in
  ``generate_response``) resolves to a title and a location;
* a clarification (see :mod:`agenttools.rag.clarification`) when nothing matched — naming
  the condition that matches nothing and offering to drop it, never dropping it
  silently — or when a list-all request covers at least ``overload_threshold``
  documents (``AGENT_CLARIFY_OVERLOAD_HITS``), or a query matches that many passages
  with flat scores;
* the review of the search so far (:mod:`agenttools.rag.review`: ``enough`` / ``more`` with
  the next call / ``clarify``), which the model is told to follow.

When the run was planned (:mod:`agenttools.rag.decomposition`), a search without
``filters`` gets the plan's constraints for its bucket (``filters: {}`` opts out).

Errors the model can fix (unknown bucket, bad filter) come back as tool errors naming
what is allowed, so the next call can be right.

The parts: ``corpus_deps`` (settings, names, argument helpers), ``corpus_search`` (the
search handler), ``corpus_clarify`` (when to ask instead of answering),
``corpus_evidence`` (hits as cited sources), ``corpus_metadata`` (the metadata handler).

The app factory registers them after the RAG tools::

    register_corpus_tools(registry, CorpusToolDeps(knowledge=kb, overload_threshold=100, max_tool_calls=8))
"""

from __future__ import annotations

from agenttools.core.registry import ToolRegistry
from agenttools.rag.corpus_deps import GET_DOCUMENT_METADATA, SEARCH_SEMANTIC, SEARCH_TEXT, CorpusToolDeps
from agenttools.rag.corpus_metadata import make_metadata_handler
from agenttools.rag.corpus_search import make_search_handler


def register_corpus_tools(registry: ToolRegistry, deps: CorpusToolDeps) -> None:
    """Attach the three handlers; the catalog must already hold their specs."""
    registry.set_handler(SEARCH_TEXT, make_search_handler(deps, "text", 400))
    registry.set_handler(SEARCH_SEMANTIC, make_search_handler(deps, "semantic", 500))
    registry.set_handler(GET_DOCUMENT_METADATA, make_metadata_handler(deps))


__all__ = ["register_corpus_tools"]
