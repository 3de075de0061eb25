"""Deterministic stand-in for an embedding model.

Bag-of-words: every lower-cased word maps (through a stable hash) to a fixed dense
pseudo-random direction; a text's vector is the normalised sum of its words'. Texts
sharing words therefore score higher than texts that do not, which is what tool- and
document-retrieval tests need, and the same text always gives the same vector.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable

import numpy as np

EmbedFn = Callable[[str, int], list[float]]
"""``(text, dim) -> vector`` of exactly ``dim`` floats."""

_WORD = re.compile(r"\w+", re.UNICODE)


class HashingEmbedding:
    """Callable ``EmbedFn`` with a per-instance cache of word directions."""

    def __init__(self) -> None:
        self._directions: dict[tuple[str, int], np.ndarray] = {}

    def _direction(self, word: str, dim: int) -> np.ndarray:
        key = (word, dim)
        vec = self._directions.get(key)
        if vec is None:
            seed = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
            vec = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
            self._directions[key] = vec
        return vec

    def __call__(self, text: str, dim: int) -> list[float]:
        words = _WORD.findall(text.casefold()) or [""]
        total = np.zeros(dim, dtype=np.float32)
        for word in words:
            total += self._direction(word, dim)
        norm = float(np.linalg.norm(total))
        if norm > 0:
            total /= norm
        return [float(x) for x in total]
