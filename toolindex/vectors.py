"""Checks and normalisation shared by every embedder and by the index.

Remote embedders return whatever the wire carried: the wrong number of rows, rows of
the wrong length, NaN, or all zeros (which cannot be normalised). All of that must
surface as ``EmbeddingError`` rather than as a bad ranking or a numpy exception deep
inside a request, so every embedder funnels its raw output through ``to_unit_rows``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from toolindex.embedder import EmbeddingError, Matrix, Vector

#: Text sent in place of an empty or whitespace-only input. Remote APIs reject empty
#: content; a fixed placeholder embeds to a stable, uninformative vector instead.
EMPTY_TEXT_PLACEHOLDER = "(empty message)"


def describe_error(exc: BaseException, limit: int = 300) -> str:
    """``Type: message`` cut to ``limit`` characters (pydantic errors run to kilobytes)."""
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def prepare_text(text: str, max_chars: int) -> str:
    """Cut ``text`` to ``max_chars`` characters and replace empty input by a placeholder."""
    if not isinstance(text, str):
        raise EmbeddingError(f"expected text, got {type(text).__name__}")
    cut = text[:max_chars] if max_chars > 0 else text
    return cut if cut.strip() else EMPTY_TEXT_PLACEHOLDER


def to_unit_rows(
    rows: Sequence[Sequence[float]] | np.ndarray,
    *,
    expected_count: int,
    expected_dim: int | None,
    source: str,
) -> Matrix:
    """Validate raw embedder output and return it as L2-normalised float32 rows.

    ``expected_dim`` of ``None`` (or 0) accepts any length as long as every row has
    the same one. Raises ``EmbeddingError`` naming ``source`` on any defect.
    """
    try:
        count = len(rows)
    except TypeError:
        raise EmbeddingError(f"{source}: expected a list of vectors, got {type(rows).__name__}") from None
    if count != expected_count:
        raise EmbeddingError(f"{source}: expected {expected_count} vectors, got {count}")
    if expected_count == 0:
        return np.zeros((0, expected_dim or 0), dtype=np.float32)
    try:
        matrix = np.asarray(rows, dtype=np.float64)
    except (ValueError, TypeError) as exc:  # ragged rows or non-numbers
        lengths = sorted({len(r) for r in rows if hasattr(r, "__len__")})
        raise EmbeddingError(f"{source}: vectors are not a rectangular array of numbers (lengths {lengths})") from exc
    except OverflowError as exc:
        raise EmbeddingError(f"{source}: vector values out of range") from exc
    if matrix.ndim != 2:
        raise EmbeddingError(f"{source}: expected a 2-D array of vectors, got shape {matrix.shape}")
    if expected_dim and matrix.shape[1] != expected_dim:
        raise EmbeddingError(f"{source}: expected vectors of length {expected_dim}, got {matrix.shape[1]}")
    if matrix.shape[1] == 0:
        raise EmbeddingError(f"{source}: vectors are empty")
    if not np.isfinite(matrix).all():
        raise EmbeddingError(f"{source}: vectors contain NaN or infinite values")
    norms = np.linalg.norm(matrix, axis=1)
    if (norms == 0.0).any():
        raise EmbeddingError(f"{source}: {int((norms == 0.0).sum())} vector(s) are all zeros")
    # Norms are taken in float64 so huge components cannot overflow; rows end up float32.
    return (matrix / norms[:, None]).astype(np.float32)


def unit_vector(vector: Sequence[float] | np.ndarray, *, dim: int | None = None) -> Vector:
    """Return ``vector`` as a 1-D L2-normalised float32 array; a zero vector stays zero.

    Used on the query side of ranking, where a zero vector simply scores 0 everywhere.
    Raises ``ValueError`` for a wrong shape or non-finite values.
    """
    arr = np.asarray(vector, dtype=np.float32).reshape(-1)
    if dim is not None and arr.shape[0] != dim:
        raise ValueError(f"query vector has length {arr.shape[0]}, index dimension is {dim}")
    if not np.isfinite(arr).all():
        raise ValueError("query vector contains NaN or infinite values")
    norm = float(np.linalg.norm(arr.astype(np.float64)))
    if norm == 0.0:
        return np.zeros(arr.shape[0], dtype=np.float32)
    out: Vector = (arr / norm).astype(np.float32, copy=False)
    return out
