"""An embedder wrapper for benchmarks that computes each (model, task, text) vector once.

``bench/corpus_quality.py`` ingests the same documents into each engine and each run
embeds them again: with the local MiniLM on a busy 2-core machine the Node.js set alone
(~6k chunks) takes tens of minutes per ingest. The vectors depend only on the model and
the text, so they are kept in memory and, when ``path`` is given, in a ``.npz`` file next
to the other benchmark scratch (outside the repository) for the next run. A wrapped
embedder reports the same ``name``/``model``/``dim`` as the real one, so the knowledge
base (and the fusion's per-embedder choices) cannot tell the difference.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from toolindex.embedder import Embedder, EmbedTask, Matrix, Vector


class CachedEmbedder:
    """``Embedder`` over ``inner`` with a memo of every vector it returned."""

    def __init__(self, inner: Embedder, path: Path | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.model = inner.model
        self.dim = inner.dim
        self.path = path
        self.hits = 0
        self.misses = 0
        self._memo: dict[str, np.ndarray] = {}
        if path is not None and path.is_file():
            with np.load(path) as stored:
                self._memo = {k: stored[k] for k in stored.files}

    def _key(self, text: str, task: EmbedTask) -> str:
        return hashlib.sha256(f"{self.name}\0{self.model}\0{task}\0{text}".encode()).hexdigest()[:32]

    async def embed(self, text: str, *, task: EmbedTask = "query") -> Vector:
        return (await self.embed_batch([text], task=task))[0]

    async def embed_batch(self, texts: list[str], *, task: EmbedTask = "document") -> Matrix:
        keys = [self._key(t, task) for t in texts]
        todo = [i for i, k in enumerate(keys) if k not in self._memo]
        self.hits += len(texts) - len(todo)
        self.misses += len(todo)
        if todo:
            fresh = await self.inner.embed_batch([texts[i] for i in todo], task=task)
            for i, row in zip(todo, fresh, strict=True):
                self._memo[keys[i]] = np.asarray(row, dtype=np.float32)
        return np.stack([self._memo[k] for k in keys]).astype(np.float32, copy=False)

    def save(self) -> None:
        if self.path is not None and self.misses:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp.npz")
            np.savez(tmp, **self._memo)  # type: ignore[arg-type]  # numpy types **kwds as allow_pickle
            tmp.replace(self.path)

    async def aclose(self) -> None:
        self.save()
        await self.inner.aclose()

    def __getattr__(self, attr: str) -> Any:  # anything else the KB asks of an embedder
        return getattr(self.inner, attr)
