"""Tool retrieval: embedders, the on-disk vector cache, and the numpy ``ToolIndex``.

The remote embedders live in ``toolindex.gemini`` and ``toolindex.ollama`` and are
not imported here, so importing the package does not load google-genai; use
``toolindex.factory.choose_embedder`` to get one from configuration.
"""

from toolindex.caches import EmbeddingSpace, QueryCache, VectorCache, text_digest
from toolindex.embedder import Embedder, EmbeddingError, EmbedTask, Matrix, Vector
from toolindex.hashing import HashingEmbedder
from toolindex.index import IndexBuildError, SearchResult, ToolIndex, ToolMatch

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
