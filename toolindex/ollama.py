"""``OllamaEmbedder``: a local Ollama server's ``/api/embed`` (batch input).

* nomic-embed-text was trained with task prefixes; without ``search_query: `` and
  ``search_document: `` its query/document similarities are markedly worse.
* The ollama client has no default timeout, so one is always set (on the client we
  build, and around every call for a client handed in).
* ``dim`` may be left ``None``: it is then unknown (0) until ``learn_dimension()`` reads
  the model's ``<arch>.embedding_length`` from ``POST /api/show`` (fast: it does not
  load the model, whose first embedding can take seconds) or, failing that, until the
  first response. Every later response must match it. The knowledge base is never
  sized from an unknown dimension (``toolindex.probe``).
* Failures — ``ollama.ResponseError`` (HTTP status), a refused connection (the client
  raises the builtin ``ConnectionError``), httpx transport errors, timeouts, malformed
  bodies, wrong count, length or NaN — all become ``EmbeddingError``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

import httpx
import numpy as np
import ollama

from toolindex.embedder import EmbeddingError, EmbedTask, Matrix, Vector
from toolindex.ollama_host import normalise_host
from toolindex.vectors import describe_error, prepare_text, to_unit_rows

_NOMIC_PREFIXES: dict[str, str] = {"document": "search_document: ", "query": "search_query: "}


def embedding_length(model_info: Mapping[str, Any]) -> int:
    """``<general.architecture>.embedding_length`` of ``/api/show``'s ``model_info``; 0 when absent."""
    arch = model_info.get("general.architecture")
    value = model_info.get(f"{arch}.embedding_length") if isinstance(arch, str) else None
    if value is None:  # no architecture named: the one key of that shape
        found = [v for k, v in model_info.items() if isinstance(k, str) and k.endswith(".embedding_length")]
        value = found[0] if len(found) == 1 else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


class OllamaEmbedder:
    """Embeds through Ollama's ``/api/embed``; one request per ``batch_size`` texts."""

    name = "ollama"

    def __init__(
        self,
        host: str,
        model: str = "nomic-embed-text",
        *,
        dim: int | None = None,
        timeout_s: float = 30.0,
        max_chars: int = 6_000,
        batch_size: int = 128,
        client: ollama.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """``transport``: the pool of a stated size the requests go through (``llm.pool``)."""
        if batch_size < 1:
            raise ValueError("batch_size must be positive")
        self.host = normalise_host(host)
        self.model = model
        self.dim = dim or 0
        # nomic-embed-text runs with a 2,048-token context by default in Ollama.
        self.max_chars = max_chars
        self._batch_size = batch_size
        self._timeout_s = timeout_s
        self._uses_prefixes = "nomic" in model.lower()
        self._owns_client = client is None
        self._client = client or ollama.AsyncClient(
            host=self.host, timeout=timeout_s, **({"transport": transport} if transport is not None else {})
        )

    def _prepare(self, text: str, task: EmbedTask) -> str:
        body = prepare_text(text, self.max_chars)
        if self._uses_prefixes:
            return _NOMIC_PREFIXES.get(task, _NOMIC_PREFIXES["query"]) + body
        return body

    async def embed(self, text: str, *, task: EmbedTask = "query") -> Vector:
        rows = await self.embed_batch([text], task=task)
        vector: Vector = rows[0]
        return vector

    async def embed_batch(self, texts: list[str], *, task: EmbedTask = "document") -> Matrix:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        prepared = [self._prepare(t, task) for t in texts]
        parts = [
            await self._embed_chunk(prepared[i : i + self._batch_size])
            for i in range(0, len(prepared), self._batch_size)
        ]
        return parts[0] if len(parts) == 1 else np.vstack(parts)

    async def _embed_chunk(self, texts: list[str]) -> Matrix:
        try:
            async with asyncio.timeout(self._timeout_s):
                response = await self._client.embed(model=self.model, input=texts)
        except ollama.ResponseError as exc:
            raise EmbeddingError(f"ollama embedding HTTP {exc.status_code}: {str(exc.error)[:300]}") from exc
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise EmbeddingError(f"ollama embedding timed out after {self._timeout_s:g}s") from exc
        except (ConnectionError, httpx.HTTPError) as exc:
            raise EmbeddingError(f"ollama unreachable at {self.host}: {describe_error(exc)}") from exc
        except Exception as exc:  # malformed body (pydantic) or anything else from the client
            raise EmbeddingError(f"ollama embedding failed: {describe_error(exc)}") from exc
        rows = list(response.embeddings or [])
        matrix = to_unit_rows(rows, expected_count=len(texts), expected_dim=self.dim or None, source="ollama")
        if not self.dim:
            self.dim = int(matrix.shape[1])
        return matrix

    async def learn_dimension(self) -> int:
        """Make ``dim`` known without loading the model: ``/api/show``'s
        ``<arch>.embedding_length`` of a model that lists the ``embedding`` capability;
        an older server that reports no length is asked for one real embedding instead.
        Raises ``EmbeddingError`` when the model is missing or cannot embed."""
        if self.dim:
            return self.dim
        try:
            async with asyncio.timeout(self._timeout_s):
                shown = await self._client.show(self.model)
        except ollama.ResponseError as exc:
            detail = str(exc.error)[:300]
            raise EmbeddingError(f"ollama /api/show {self.model!r} HTTP {exc.status_code}: {detail}") from exc
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise EmbeddingError(f"ollama /api/show timed out after {self._timeout_s:g}s") from exc
        except (ConnectionError, httpx.HTTPError) as exc:
            raise EmbeddingError(f"ollama unreachable at {self.host}: {describe_error(exc)}") from exc
        except Exception as exc:  # malformed body (pydantic) or anything else from the client
            raise EmbeddingError(f"ollama /api/show failed: {describe_error(exc)}") from exc
        capabilities = list(shown.capabilities or [])
        if capabilities and "embedding" not in capabilities:
            raise EmbeddingError(
                f"ollama model {self.model!r} cannot embed (capabilities: {', '.join(map(str, capabilities))})"
            )
        length = embedding_length(shown.modelinfo or {})
        if length:
            self.dim = length
            return length
        await self.embed("dimension probe")  # no length reported: learn it from a real reply
        return self.dim

    async def aclose(self) -> None:
        if self._owns_client:
            with contextlib.suppress(Exception):  # closing must never fail shutdown
                await self._client.close()

    def __repr__(self) -> str:
        return f"OllamaEmbedder(host={self.host!r}, model={self.model!r}, dim={self.dim})"
