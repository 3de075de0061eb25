"""``GeminiEmbedder``: ``gemini-embedding-001`` through google-genai's async client.

With a Gemini API key, ``client.aio.models.embed_content`` always posts to
``{base_url}/{api_version}/models/{model}:batchEmbedContents`` (``v1`` by default in
google-genai 3.x; ``GOOGLE_GENAI_API_VERSION`` overrides it) with one entry per text in
``requests[]`` (each carrying ``taskType`` and ``outputDimensionality``) and reads
``embeddings[].values`` — so a loopback fake of that single route is enough for tests.

What this adds over the plain call (the Go original did none of it):

* task types, ``RETRIEVAL_DOCUMENT`` for tool texts and ``RETRIEVAL_QUERY`` for user
  messages, which is what the model was trained to compare;
* a reduced ``output_dimensionality`` (768 by default) with our own L2 normalisation,
  because only the full 3,072-dim output comes back normalised;
* batches of at most 100 texts, the API's limit per request;
* an explicit timeout, and every failure — HTTP status, 429, transport, malformed
  body, wrong count or length, NaN — turned into ``EmbeddingError``.
"""

from __future__ import annotations

import asyncio

import httpx
import numpy as np
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from toolindex.embedder import EmbeddingError, EmbedTask, Matrix, Vector
from toolindex.vectors import describe_error, prepare_text, to_unit_rows

#: ``batchEmbedContents`` rejects more than this many texts in one request.
MAX_BATCH = 100

_TASK_TYPES: dict[str, str] = {"document": "RETRIEVAL_DOCUMENT", "query": "RETRIEVAL_QUERY"}


class GeminiEmbedder:
    """Embeds through the Gemini API; ``dim`` is the requested output dimensionality."""

    name = "gemini"

    def __init__(
        self,
        api_key: str,
        model: str = "gemini-embedding-001",
        *,
        dim: int = 768,
        base_url: str | None = None,
        timeout_s: float = 30.0,
        max_chars: int = 8_000,
        batch_size: int = MAX_BATCH,
        client: genai.Client | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """``transport``: the pool of a stated size the requests go through (``llm.pool``)."""
        if not api_key and client is None:
            raise ValueError("a Gemini API key is required")
        if not 1 <= batch_size <= MAX_BATCH:
            raise ValueError(f"batch_size must be between 1 and {MAX_BATCH}")
        self.model = model
        self.dim = dim
        # gemini-embedding-001 accepts 2,048 tokens; ~4 characters per token.
        self.max_chars = max_chars
        self._batch_size = batch_size
        self._timeout_s = timeout_s
        self._owns_client = client is None
        self._http = httpx.AsyncClient(transport=transport) if client is None and transport is not None else None
        self._client = client or genai.Client(
            api_key=api_key,
            vertexai=False,
            http_options=genai_types.HttpOptions(
                base_url=base_url or None,
                timeout=int(timeout_s * 1000),  # milliseconds
                httpx_async_client=self._http,  # None: the SDK's own client
            ),
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
            await self._embed_chunk(prepared[i : i + self._batch_size], task)
            for i in range(0, len(prepared), self._batch_size)
        ]
        return parts[0] if len(parts) == 1 else np.vstack(parts)

    async def _embed_chunk(self, texts: list[str], task: EmbedTask) -> Matrix:
        config = genai_types.EmbedContentConfig(
            task_type=_TASK_TYPES.get(task, "RETRIEVAL_QUERY"),
            output_dimensionality=self.dim,
        )
        try:
            async with asyncio.timeout(self._timeout_s):
                response = await self._client.aio.models.embed_content(
                    model=self.model, contents=list(texts), config=config
                )
        except genai_errors.APIError as exc:
            detail = str(exc.message or exc.status or "")[:300]
            raise EmbeddingError(f"gemini embedding HTTP {exc.code}: {detail}") from exc
        except TimeoutError as exc:
            raise EmbeddingError(f"gemini embedding timed out after {self._timeout_s:g}s") from exc
        except Exception as exc:  # transport errors (httpx/httpx2/aiohttp) and bad bodies
            raise EmbeddingError(f"gemini embedding failed: {describe_error(exc)}") from exc
        embeddings = response.embeddings or []
        rows = [e.values or [] for e in embeddings]
        return to_unit_rows(rows, expected_count=len(texts), expected_dim=self.dim, source="gemini")

    async def aclose(self) -> None:
        if self._owns_client:
            try:
                await self._client.aio.aclose()
                self._client.close()  # the sync side holds its own (idle) connection pool
                if self._http is not None:
                    await self._http.aclose()
            except Exception:  # closing must never fail shutdown
                pass

    def __repr__(self) -> str:
        return f"GeminiEmbedder(model={self.model!r}, dim={self.dim})"
