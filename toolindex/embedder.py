"""The ``Embedder`` protocol: text in, L2-normalised float32 vectors out."""

from __future__ import annotations

from typing import Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

EmbedTask = Literal["query", "document"]
Vector = npt.NDArray[np.float32]
Matrix = npt.NDArray[np.float32]


class EmbeddingError(Exception):
    """An embedder failed (transport, HTTP status, wrong count or shape, NaN values)."""


@runtime_checkable
class Embedder(Protocol):
    """Turns text into vectors for retrieval.

    ``name`` (``gemini``/``ollama``/``hashing``), ``model`` and ``dim`` identify the vector
    space, so caches keyed by them never mix spaces. ``task`` picks the query or document
    side for models that treat them differently (Gemini task types, nomic prefixes).
    Implementations return rows that are L2-normalised float32 and raise
    ``EmbeddingError`` on any failure, including a wrong count, a wrong length or NaN.
    """

    name: str
    model: str
    dim: int
    max_chars: int

    async def embed(self, text: str, *, task: EmbedTask = "query") -> Vector: ...

    async def embed_batch(self, texts: list[str], *, task: EmbedTask = "document") -> Matrix: ...

    async def aclose(self) -> None: ...
