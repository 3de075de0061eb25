"""Which of an answer's sources are one document: one rule for every face that counts them.

Three readers group a ``response``'s sources (``Source``) by document: the OpenAI face's
numbers and its "Sources:" list (``app/server/openai_citations``), a tool call's one-line
summary (``agenttools/core/result_shapes``: "citing 2 sources") and the playground's
source cards. Each had its own copy and they disagreed - the summary and the cards merged
a web answer with its first page (the answer's link is that page's) and every page of a
web answer without links into one, the OpenAI face kept them apart but counted one web
page cited through two answers twice. The browser cannot import Python, so the
playground has the same rule in ``app/server/static/source_key.js``;
``tests/test_source_key.py`` runs both on the same sources and they must agree.
"""

from __future__ import annotations

import re

#: A web answer's stored id (``px_`` and 16 hex digits); its pages are ``<id>#<n>``.
WEB_ANSWER = re.compile(r"px_[0-9a-f]{16}")


def document_key(source_id: str, url: str | None = None, doc_id: str | None = None) -> str:
    """The key that a source shares with the others of its document:

    * a web answer (``px_…``) is itself: its link is only its first page's;
    * else its link, when it has one: one web page is one source, whichever answer cites it;
    * else its knowledge-base document: ``doc_id`` (a chunk's metadata), else the id
      before ``#`` (``doc#4`` and ``doc#6`` are ``doc``) - but a web answer's page
      (``px_…#2``) is a page of its own;
    * else the id.

    A cited token that is not (yet) a known source is keyed by its id alone."""
    if WEB_ANSWER.fullmatch(source_id):
        return source_id
    if url:
        return url
    if doc_id:
        return doc_id
    doc, sep, _ = source_id.partition("#")
    return doc if sep and not WEB_ANSWER.fullmatch(doc) else source_id


__all__ = ["WEB_ANSWER", "document_key"]
