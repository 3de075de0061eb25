"""``OpenAIEmbedder``: any OpenAI-compatible ``POST /embeddings`` (OpenAI, vLLM, llama.cpp,
LM Studio, Ollama's ``/v1``) through the official ``openai`` SDK.

* ``encoding_format="float"`` is always sent: the SDK would otherwise ask for base64,
  which several compatible servers do not implement.
* Rows are put back in ``index`` order (the API does not promise response order) and
  L2-normalised; ``dim`` may be left ``None`` and is learned from the first response.
* ``dimensions`` is sent only when given (only some models accept it).
* Failures — HTTP status, refused connection, timeouts, malformed bodies, wrong count,
  length or NaN — all become ``EmbeddingError``.
"""

from __future__ import annotations

import httpx
import numpy as np
import openai

from llm.error_text import provider_message
from toolindex.embedder import EmbeddingError, EmbedTask, Matrix, Vector
from toolindex.vectors import describe_error, prepare_text, to_unit_rows

NO_KEY = "no-key"


class OpenAIEmbedder:
    """Embeds through ``{base_url}/embeddings``; one request per ``batch_size`` texts."""

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str = "text-embedding-3-small",
        *,
        api_key: str | None = None,
        dim: int | None = None,
        dimensions: int | None = None,
        timeout_s: float = 30.0,
        max_chars: int = 8_000,
        batch_size: int = 128,
        http_client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """``transport``: the pool of a stated size the requests go through (``llm.pool``),
        for the client built here when no ``http_client`` is given."""
        if batch_size < 1:
            raise ValueError("batch_size must be positive")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.dim = dimensions or dim or 0
        self.max_chars = max_chars
        self._dimensions = dimensions
        self._batch_size = batch_size
        self._timeout_s = timeout_s
        self._owns_http = http_client is None
        self._http = http_client or (
            httpx.AsyncClient(transport=transport, follow_redirects=False)
            if transport is not None
            else httpx.AsyncClient(
                limits=httpx.Limits(max_connections=20, max_keepalive_connections=10), follow_redirects=False
            )
        )
        self._client = openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=api_key or NO_KEY,
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
            max_retries=1,
            http_client=self._http,
        )

    async def embed(self, text: str, *, task: EmbedTask = "query") -> Vector:
        rows = await self.embed_batch([text], task=task)
        vector: Vector = rows[0]
        return vector

    async def embed_batch(self, texts: list[str], *, task: EmbedTask = "document") -> Matrix:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        prepared = [prepare_text(t, self.max_chars) for t in texts]
        parts = [
            await self._embed_chunk(prepared[i : i + self._batch_size])
            for i in range(0, len(prepared), self._batch_size)
        ]
        return parts[0] if len(parts) == 1 else np.vstack(parts)

    async def _embed_chunk(self, texts: list[str]) -> Matrix:
        try:
            if self._dimensions:
                response = await self._client.embeddings.create(
                    model=self.model, input=texts, encoding_format="float", dimensions=self._dimensions
                )
            else:
                response = await self._client.embeddings.create(model=self.model, input=texts, encoding_format="float")
        except openai.APIStatusError as exc:
            detail = provider_message(exc.body, exc.message)[:300]
            raise EmbeddingError(f"openai embedding HTTP {exc.status_code}: {detail}") from exc
        except openai.APITimeoutError as exc:
            raise EmbeddingError(f"openai embedding timed out after {self._timeout_s:g}s") from exc
        except openai.APIConnectionError as exc:
            raise EmbeddingError(f"openai-compatible server unreachable at {self.base_url}: {exc}") from exc
        except Exception as exc:  # malformed body or anything else from the client
            raise EmbeddingError(f"openai embedding failed: {describe_error(exc)}") from exc
        try:
            data = sorted(response.data, key=lambda d: d.index)
            rows = [list(d.embedding) for d in data]
        except (TypeError, AttributeError) as exc:
            raise EmbeddingError(f"openai embedding response malformed: {describe_error(exc)}") from exc
        matrix = to_unit_rows(rows, expected_count=len(texts), expected_dim=self.dim or None, source="openai")
        if not self.dim:
            self.dim = int(matrix.shape[1])
        return matrix

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(base_url={self.base_url!r}, model={self.model!r}, dim={self.dim})"
