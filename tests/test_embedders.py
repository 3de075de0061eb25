"""The three embedders: hashing (in process), Gemini and Ollama (real clients, loopback fakes)."""

from __future__ import annotations

import asyncio
import math
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.fakes import FakeGemini, FakeOllama, HashingEmbedding, HttpError, running_fake
from toolindex import EmbeddingError, HashingEmbedder, ToolIndex
from toolindex.embedder import Embedder
from toolindex.gemini import GeminiEmbedder
from toolindex.ollama import OllamaEmbedder
from toolindex.vectors import EMPTY_TEXT_PLACEHOLDER

ROOT = Path(__file__).resolve().parent.parent


def closed_port_url() -> str:
    """A loopback URL nothing listens on: connections are refused at once."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def norms(matrix: np.ndarray) -> np.ndarray:
    return np.linalg.norm(matrix.astype(np.float64), axis=1)


def json_app(path: str, answer: Any) -> Starlette:
    """A one-route server that answers every POST with ``answer`` (for malformed replies)."""

    async def handler(request: Request) -> Response:
        await request.body()
        if isinstance(answer, bytes):  # verbatim, for JSON orjson will not write (1e400)
            return Response(answer, media_type="application/json")
        payload = answer(orjson.loads(await request.body())) if callable(answer) else answer
        return Response(orjson.dumps(payload), media_type="application/json")

    return Starlette(routes=[Route(path, handler, methods=["POST"])])


# --- hashing ------------------------------------------------------------------------


async def test_hashing_vectors_are_unit_float32_of_the_configured_dim() -> None:
    embedder = HashingEmbedder(dim=256)
    matrix = await embedder.embed_batch(["list the workflow rules", "Ünïcödé wörds ok", "x"])
    assert matrix.shape == (3, 256) and matrix.dtype == np.float32
    assert np.allclose(norms(matrix), 1.0, atol=1e-6)
    assert (embedder.name, embedder.model, embedder.dim) == ("hashing", "hashing-v2", 256)
    assert isinstance(embedder, Embedder)


async def test_hashing_is_deterministic_across_instances_and_processes() -> None:
    text = "show me every alert raised for the inventory workflow"
    here = await HashingEmbedder().embed(text)
    assert np.array_equal(here, await HashingEmbedder().embed(text))
    # Python's hash() is salted per process; our features must not depend on it.
    script = (
        "import asyncio, sys; from toolindex.hashing import HashingEmbedder; "
        f"v = asyncio.run(HashingEmbedder().embed({text!r})); sys.stdout.write(v.tobytes().hex())"
    )
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", script],
            cwd=ROOT,
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout
        assert np.array_equal(np.frombuffer(bytes.fromhex(out), dtype=np.float32), here)


async def test_hashing_handles_empty_and_symbol_only_text() -> None:
    embedder = HashingEmbedder()
    for text in ("", "   ", "?!…", "\n\t"):
        vector = await embedder.embed(text)
        assert math.isclose(float(np.linalg.norm(vector)), 1.0, rel_tol=1e-6)
    real = await embedder.embed("create a table")
    assert abs(float(real @ await embedder.embed(""))) < 0.2


async def test_hashing_cuts_enormous_text_to_max_chars() -> None:
    embedder = HashingEmbedder(max_chars=100)
    head = "alpha beta gamma " * 5  # 85 characters
    cut = await embedder.embed(head + "z" * 15)
    assert np.array_equal(cut, await embedder.embed(head + "z" * 15 + " entirely different words" * 10_000))


async def test_hashing_matches_inflections_and_ignores_filler() -> None:
    embedder = HashingEmbedder()
    rules, rule, tables = await embedder.embed_batch(["list workflow rules", "listing the workflow rule", "tables"])
    assert float(rules @ rule) > 0.7
    assert float(rules @ tables) < 0.2
    plain = await embedder.embed("alerts assigned")
    chatty = await embedder.embed("hey could you please show me the alerts that are assigned to me")
    assert float(plain @ chatty) > 0.6


async def test_hashing_rejects_non_text_with_embedding_error() -> None:
    with pytest.raises(EmbeddingError):
        await HashingEmbedder().embed_batch([None])  # type: ignore[list-item]


# --- gemini -------------------------------------------------------------------------


@pytest.fixture
async def gemini() -> AsyncIterator[tuple[FakeGemini, str]]:
    fake = FakeGemini(api_key="test-key")
    async with running_fake(fake.app) as base_url:
        yield fake, base_url


async def test_gemini_batches_at_most_100_texts_per_request(gemini: tuple[FakeGemini, str]) -> None:
    fake, base_url = gemini
    embedder = GeminiEmbedder("test-key", base_url=base_url, dim=768)
    try:
        texts = [f"tool number {i} does thing {i * 7}" for i in range(250)]
        matrix = await embedder.embed_batch(texts)
    finally:
        await embedder.aclose()
    assert [len(body["requests"]) for body in fake.embed_requests] == [100, 100, 50]
    # google-genai 3.x defaults to API version v1 (GOOGLE_GENAI_API_VERSION overrides it).
    assert {r.path.split("/", 2)[2] for r in fake.requests} == {"models/gemini-embedding-001:batchEmbedContents"}
    assert len(fake.requests) == 3
    assert all(r.headers.get("x-goog-api-key") == "test-key" for r in fake.requests)
    assert matrix.shape == (250, 768) and matrix.dtype == np.float32
    assert isinstance(embedder, Embedder)
    # Rows come back in input order, normalised by us (the fake truncates without renormalising).
    reference = HashingEmbedding()
    for i in (0, 99, 100, 249):
        expected = np.asarray(reference(texts[i], 3072)[:768], dtype=np.float64)
        assert np.linalg.norm(expected) < 0.99
        assert np.allclose(matrix[i], expected / np.linalg.norm(expected), atol=1e-5)


async def test_gemini_sends_task_types_and_output_dimensionality(gemini: tuple[FakeGemini, str]) -> None:
    fake, base_url = gemini
    embedder = GeminiEmbedder("test-key", base_url=base_url, dim=256)
    try:
        await embedder.embed_batch(["tool a", "tool b"], task="document")
        vector = await embedder.embed("what rules do I have", task="query")
    finally:
        await embedder.aclose()
    documents, query = fake.embed_requests
    assert [r["taskType"] for r in documents["requests"]] == ["RETRIEVAL_DOCUMENT"] * 2
    assert [r["outputDimensionality"] for r in documents["requests"]] == [256, 256]
    assert documents["requests"][0]["model"] == "models/gemini-embedding-001"
    assert documents["requests"][1]["content"]["parts"] == [{"text": "tool b"}]
    assert [r["taskType"] for r in query["requests"]] == ["RETRIEVAL_QUERY"]
    assert vector.shape == (256,) and math.isclose(float(np.linalg.norm(vector)), 1.0, rel_tol=1e-5)


async def test_gemini_cuts_long_text_and_replaces_empty_text(gemini: tuple[FakeGemini, str]) -> None:
    fake, base_url = gemini
    embedder = GeminiEmbedder("test-key", base_url=base_url, max_chars=50)
    try:
        await embedder.embed_batch(["x" * 5_000, "", "  "])
    finally:
        await embedder.aclose()
    sent = [r["content"]["parts"][0]["text"] for r in fake.embed_requests[0]["requests"]]
    assert sent == ["x" * 50, EMPTY_TEXT_PLACEHOLDER, EMPTY_TEXT_PLACEHOLDER]


@pytest.mark.parametrize("status", [400, 429, 500, 503])
async def test_gemini_http_errors_become_embedding_errors(gemini: tuple[FakeGemini, str], status: int) -> None:
    fake, base_url = gemini
    fake.embed_error = HttpError(status, "quota exhausted" if status == 429 else "fake failure")
    embedder = GeminiEmbedder("test-key", base_url=base_url)
    try:
        with pytest.raises(EmbeddingError, match=str(status)):
            await embedder.embed("hello")
    finally:
        await embedder.aclose()


async def test_gemini_wrong_key_is_an_embedding_error(gemini: tuple[FakeGemini, str]) -> None:
    _, base_url = gemini
    embedder = GeminiEmbedder("wrong-key", base_url=base_url)
    try:
        with pytest.raises(EmbeddingError, match="400"):
            await embedder.embed_batch(["a"])
    finally:
        await embedder.aclose()


async def test_gemini_refused_connection_is_an_embedding_error() -> None:
    embedder = GeminiEmbedder("k", base_url=closed_port_url(), timeout_s=5)
    try:
        with pytest.raises(EmbeddingError):
            await embedder.embed("hello")
    finally:
        await embedder.aclose()


async def test_gemini_timeout_is_an_embedding_error(gemini: tuple[FakeGemini, str]) -> None:
    fake, base_url = gemini
    fake.embed_hold = asyncio.Event()
    embedder = GeminiEmbedder("test-key", base_url=base_url, timeout_s=0.2)
    try:
        with pytest.raises(EmbeddingError, match="timed out|Timeout"):
            await embedder.embed("hello")
    finally:
        fake.embed_hold.set()
        await embedder.aclose()


@pytest.mark.parametrize(
    ("values_fn", "reason"),
    [
        (lambda text, dim: [0.1] * 10, "length"),
        (lambda text, dim: [0.0] * dim, "zeros"),
        (lambda text, dim: [float("nan")] * dim, "failed: ValidationError"),  # orjson sends NaN as null
    ],
    ids=["short", "zero", "nan"],
)
async def test_gemini_bad_vectors_are_embedding_errors(values_fn: Any, reason: str) -> None:
    fake = FakeGemini(embed_fn=values_fn)
    async with running_fake(fake.app) as base_url:
        embedder = GeminiEmbedder("k", base_url=base_url, dim=64)
        try:
            with pytest.raises(EmbeddingError, match=reason):
                await embedder.embed_batch(["a", "b"])
        finally:
            await embedder.aclose()


async def test_gemini_missing_vectors_are_an_embedding_error() -> None:
    """A reply with fewer embeddings than texts (written here: the shared fake is always complete)."""
    app = json_app(
        "/{version}/models/{target}",
        lambda body: {"embeddings": [{"values": [1.0, 0.0, 0.0]} for _ in body["requests"][:-1]]},
    )
    async with running_fake(app) as base_url:
        embedder = GeminiEmbedder("k", base_url=base_url, dim=3)
        try:
            with pytest.raises(EmbeddingError, match="expected 3 vectors, got 2"):
                await embedder.embed_batch(["a", "b", "c"])
            # ... and the index refuses to install a partial result.
            from toolindex import IndexBuildError

            with pytest.raises(IndexBuildError):
                await ToolIndex.build([("a", "a"), ("b", "b"), ("c", "c")], embedder)
        finally:
            await embedder.aclose()


async def test_gemini_index_end_to_end(gemini: tuple[FakeGemini, str]) -> None:
    fake, base_url = gemini
    embedder = GeminiEmbedder("test-key", base_url=base_url, dim=512)
    try:
        index = await ToolIndex.build(
            [("list_my_alerts", "list my alerts"), ("create_table", "create a table")], embedder
        )
        result = await index.search("my alerts please")
    finally:
        await embedder.aclose()
    assert result.names[0] == "list_my_alerts"
    assert fake.embed_requests[-1]["requests"][0]["taskType"] == "RETRIEVAL_QUERY"


# --- ollama -------------------------------------------------------------------------


@pytest.fixture
async def ollama_fake() -> AsyncIterator[tuple[FakeOllama, str]]:
    fake = FakeOllama(embed_dim=48)
    async with running_fake(fake.app) as base_url:
        yield fake, base_url


async def test_ollama_nomic_prefixes_and_batch_input(ollama_fake: tuple[FakeOllama, str]) -> None:
    fake, base_url = ollama_fake
    embedder = OllamaEmbedder(base_url + "/")
    try:
        matrix = await embedder.embed_batch(["tool one", "tool two"])
        vector = await embedder.embed("which tool?")
    finally:
        await embedder.aclose()
    documents, query = fake.embed_requests
    assert documents["model"] == "nomic-embed-text"
    assert documents["input"] == ["search_document: tool one", "search_document: tool two"]
    assert query["input"] == ["search_query: which tool?"]
    assert matrix.shape == (2, 48) and vector.shape == (48,)
    assert np.allclose(norms(matrix), 1.0, atol=1e-6)
    assert isinstance(embedder, Embedder)


async def test_ollama_other_models_get_no_prefix(ollama_fake: tuple[FakeOllama, str]) -> None:
    fake, base_url = ollama_fake
    embedder = OllamaEmbedder(base_url, model="mxbai-embed-large")
    try:
        await embedder.embed("plain")
    finally:
        await embedder.aclose()
    assert fake.embed_requests[0]["input"] == ["plain"]


async def test_ollama_learns_dim_then_enforces_it(ollama_fake: tuple[FakeOllama, str]) -> None:
    fake, base_url = ollama_fake
    embedder = OllamaEmbedder(base_url)
    try:
        assert embedder.dim == 0
        await embedder.embed("first")
        assert embedder.dim == 48
        fake.embed_dim = 32  # the model was swapped under the same name
        with pytest.raises(EmbeddingError, match="length 48, got 32"):
            await embedder.embed("second")
    finally:
        await embedder.aclose()


async def test_ollama_configured_dim_is_checked(ollama_fake: tuple[FakeOllama, str]) -> None:
    _, base_url = ollama_fake
    embedder = OllamaEmbedder(base_url, dim=768)
    try:
        with pytest.raises(EmbeddingError, match="length 768, got 48"):
            await embedder.embed_batch(["a"])
    finally:
        await embedder.aclose()


async def test_ollama_splits_large_batches(ollama_fake: tuple[FakeOllama, str]) -> None:
    fake, base_url = ollama_fake
    embedder = OllamaEmbedder(base_url, batch_size=4)
    try:
        matrix = await embedder.embed_batch([f"t{i}" for i in range(10)])
    finally:
        await embedder.aclose()
    assert [len(b["input"]) for b in fake.embed_requests] == [4, 4, 2]
    assert matrix.shape == (10, 48)


async def test_ollama_refused_connection_is_an_embedding_error() -> None:
    embedder = OllamaEmbedder(closed_port_url())
    try:
        with pytest.raises(EmbeddingError, match="unreachable"):
            await embedder.embed_batch(["a"])
    finally:
        await embedder.aclose()


@pytest.mark.parametrize("status", [404, 500])
async def test_ollama_http_errors_become_embedding_errors(ollama_fake: tuple[FakeOllama, str], status: int) -> None:
    fake, base_url = ollama_fake
    fake.embed_error = HttpError(status, 'model "nomic-embed-text" not found')
    embedder = OllamaEmbedder(base_url)
    try:
        with pytest.raises(EmbeddingError, match=str(status)):
            await embedder.embed("a")
    finally:
        await embedder.aclose()


async def test_ollama_timeout_is_an_embedding_error(ollama_fake: tuple[FakeOllama, str]) -> None:
    fake, base_url = ollama_fake
    fake.embed_hold = asyncio.Event()
    embedder = OllamaEmbedder(base_url, timeout_s=0.2)
    try:
        with pytest.raises(EmbeddingError, match="timed out"):
            await embedder.embed("a")
    finally:
        fake.embed_hold.set()
        await embedder.aclose()


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ({"model": "m", "embeddings": [[1.0, 0.0]]}, "expected 2 vectors, got 1"),
        ({"model": "m", "embeddings": [[1.0, 0.0], [0.0, 0.0]]}, "zeros"),
        ({"model": "m", "embeddings": [[1.0, 0.0], [1.0]]}, "rectangular"),
        (b'{"model": "m", "embeddings": [[1.0, 0.0], [1e400, 0.0]]}', "NaN or infinite"),
        ({"model": "m", "embeddings": [[1.0, 0.0], [None, 0.0]]}, "failed: ValidationError"),
        ({"model": "m"}, "failed: ValidationError"),
        ({"model": "m", "embeddings": "nonsense"}, "failed"),
    ],
    ids=["short", "zero", "ragged", "inf", "null", "missing", "malformed"],
)
async def test_ollama_bad_replies_are_embedding_errors(answer: Any, reason: str) -> None:
    async with running_fake(json_app("/api/embed", answer)) as base_url:
        embedder = OllamaEmbedder(base_url)
        try:
            with pytest.raises(EmbeddingError, match=reason):
                await embedder.embed_batch(["a", "b"])
        finally:
            await embedder.aclose()


async def test_ollama_uses_a_client_handed_in(ollama_fake: tuple[FakeOllama, str]) -> None:
    import ollama

    fake, base_url = ollama_fake
    client = ollama.AsyncClient(host=base_url, timeout=5)
    embedder = OllamaEmbedder("http://unused.invalid", client=client)
    try:
        await embedder.embed("hi")
        await embedder.aclose()  # does not close a client it does not own
        await embedder.embed("again")
    finally:
        await client.close()
    assert len(fake.embed_requests) == 2
