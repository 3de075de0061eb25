"""Tool retrieval: embedders, the on-disk vector cache, and the numpy ``ToolIndex``.

The remote embedders live in ``toolindex.gemini`` and ``toolindex.ollama`` and are
not imported here, so importing the package does not load google-genai; use
``toolindex.factory.choose_embedder`` to get one from configuration.

The package's names load at their first use (PEP 562): importing a light module of it
(``toolindex.ollama_host``, which the settings read ``OLLAMA_HOST`` with) then loads no
numpy (~0.3 s of CPU, which a ``serve --workers`` supervisor and every command reading
the settings would pay). ``from toolindex import ToolIndex`` works as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolindex.caches import EmbeddingSpace, QueryCache, VectorCache, text_digest
    from toolindex.embedder import Embedder, EmbeddingError, EmbedTask, Matrix, Vector
    from toolindex.hashing import HashingEmbedder
    from toolindex.index import IndexBuildError, SearchResult, ToolIndex, ToolMatch

_FROM = {
    "EmbeddingSpace": "toolindex.caches",
    "QueryCache": "toolindex.caches",
    "VectorCache": "toolindex.caches",
    "text_digest": "toolindex.caches",
    "Embedder": "toolindex.embedder",
    "EmbeddingError": "toolindex.embedder",
    "EmbedTask": "toolindex.embedder",
    "Matrix": "toolindex.embedder",
    "Vector": "toolindex.embedder",
    "HashingEmbedder": "toolindex.hashing",
    "IndexBuildError": "toolindex.index",
    "SearchResult": "toolindex.index",
    "ToolIndex": "toolindex.index",
    "ToolMatch": "toolindex.index",
}


def __getattr__(name: str) -> Any:
    """The package's names, imported at their first use (PEP 562); anything else is a
    submodule or missing (``from toolindex import factory`` still imports it)."""
    if name in _FROM:
        import importlib

        return getattr(importlib.import_module(_FROM[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "EmbedTask",
    "Embedder",
    "EmbeddingError",
    "EmbeddingSpace",
    "HashingEmbedder",
    "IndexBuildError",
    "Matrix",
    "QueryCache",
    "SearchResult",
    "ToolIndex",
    "ToolMatch",
    "Vector",
    "VectorCache",
    "text_digest",
]
