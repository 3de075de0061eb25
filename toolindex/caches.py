"""Caches around the embedder: a bounded LRU for query vectors, and tool vectors on disk.

Both exist to keep the embedder off the hot path. The query cache makes a repeated
message (retries, "continue", a reconnecting browser) cost nothing; the vector cache
makes a restart with an unchanged catalog cost no embedding call at all, which for a
remote embedder means no quota, no latency and no start-up failure when it is down.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from toolindex.embedder import Embedder, EmbedTask, Vector

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EmbeddingSpace:
    """What makes two vectors comparable: embedder name, model and dimension.

    ``dim`` 0 means "not known yet" (an Ollama embedder learns it from its first reply).
    """

    name: str
    model: str
    dim: int

    @classmethod
    def of(cls, embedder: Embedder) -> EmbeddingSpace:
        return cls(str(embedder.name), str(embedder.model), int(embedder.dim or 0))


def text_digest(text: str) -> str:
    """SHA-256 of the UTF-8 text, hex: the cache key of one tool text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


QueryKey = tuple[str, str, int, str, str]


class QueryCache:
    """A bounded LRU of query vectors keyed by (embedder name, model, dim, task, text).

    Vectors are stored read-only, so a caller cannot corrupt a cached entry.
    Not thread-safe; the index only touches it from the event loop.
    """

    def __init__(self, maxsize: int = 512) -> None:
        if maxsize < 0:
            raise ValueError("maxsize must be >= 0")
        self.maxsize = maxsize
        self._entries: OrderedDict[QueryKey, Vector] = OrderedDict()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(space: EmbeddingSpace, task: EmbedTask, text: str) -> QueryKey:
        return (space.name, space.model, space.dim, task, text)

    def get(self, key: QueryKey) -> Vector | None:
        vector = self._entries.get(key)
        if vector is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return vector

    def put(self, key: QueryKey, vector: Vector) -> None:
        if self.maxsize == 0:
            return
        stored = np.array(vector, dtype=np.float32, copy=True)
        stored.setflags(write=False)
        self._entries[key] = stored
        self._entries.move_to_end(key)
        while len(self._entries) > self.maxsize:
            self._entries.popitem(last=False)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class VectorCache:
    """Tool vectors on disk: one ``.npz`` file per (embedder name, model) in ``directory``.

    Each file holds the dimension, the SHA-256 of every text and its float32 vector.
    A file whose dimension differs from the embedder's (e.g. after changing
    ``output_dimensionality``) is a miss. A corrupt or unreadable file is logged and
    treated as empty: the cache can only save work, never break a start-up. Writes go
    to a temporary file and are renamed into place, so a crash never leaves half a
    file. All file IO runs in a worker thread.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def path_for(self, space: EmbeddingSpace) -> Path:
        tag = hashlib.sha256(f"{space.name}\0{space.model}".encode()).hexdigest()[:10]
        readable = _UNSAFE.sub("_", f"{space.name}-{space.model}")[:80]
        return self.directory / f"{readable}-{tag}.npz"

    async def load(self, space: EmbeddingSpace) -> tuple[int, dict[str, Vector]]:
        """Return ``(dim, {text digest: vector})``; ``(0, {})`` on a miss."""
        return await asyncio.to_thread(self._load, space)

    async def save(self, space: EmbeddingSpace, dim: int, vectors: Mapping[str, Vector]) -> None:
        """Replace the stored vectors of ``space`` with ``vectors`` (all of length ``dim``)."""
        await asyncio.to_thread(self._save, space, dim, dict(vectors))

    def _load(self, space: EmbeddingSpace) -> tuple[int, dict[str, Vector]]:
        path = self.path_for(space)
        if not path.exists():
            return 0, {}
        try:
            with np.load(path, allow_pickle=False) as data:
                name, model = str(data["name"]), str(data["model"])
                dim = int(data["dim"])
                digests = [str(d) for d in data["digests"]]
                matrix = np.asarray(data["vectors"], dtype=np.float32)
        except Exception as exc:  # corrupt, truncated, foreign file: start afresh
            logger.warning("tool vector cache %s unreadable, ignoring it: %s", path, exc)
            return 0, {}
        if (name, model) != (space.name, space.model) or matrix.shape != (len(digests), dim):
            logger.warning("tool vector cache %s does not match %s, ignoring it", path, space)
            return 0, {}
        if space.dim and dim != space.dim:
            return 0, {}
        if not np.isfinite(matrix).all():
            logger.warning("tool vector cache %s holds non-finite values, ignoring it", path)
            return 0, {}
        return dim, {d: matrix[i] for i, d in enumerate(digests)}

    def _save(self, space: EmbeddingSpace, dim: int, vectors: dict[str, Vector]) -> None:
        path = self.path_for(space)
        path.parent.mkdir(parents=True, exist_ok=True)
        digests = list(vectors)
        matrix = (
            np.stack([np.asarray(vectors[d], dtype=np.float32) for d in digests])
            if digests
            else np.zeros((0, dim), dtype=np.float32)
        )
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as fh:
                np.savez(
                    fh,
                    name=np.array(space.name),
                    model=np.array(space.model),
                    dim=np.array(dim, dtype=np.int64),
                    digests=np.array(digests, dtype="U64"),
                    vectors=matrix,
                )
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
