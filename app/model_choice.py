"""Which model answers and which embedder embeds: ``AGENT_LLM_PROVIDER`` /
``AGENT_EMBEDDER`` honoured, ``auto`` probing Gemini, an OpenAI-compatible server and
Ollama in turn, and every choice passed over named in the reason ``/readyz`` shows.

Apart from the wiring because the probes are network I/O with their own failure
reasons; the wiring only asks for a provider and hands it on.
"""

from __future__ import annotations

import httpx

from app.config import Settings
from llm.pool import PooledTransport, PoolWaits, pooled_transport
from llm.provider import Provider
from toolindex.embedder import Embedder


async def choose_provider(
    settings: Settings,
    http: httpx.AsyncClient,
    *,
    llm_http: httpx.AsyncClient | None = None,
    llm_pool: PooledTransport | None = None,
    pool_waits: PoolWaits | None = None,
) -> tuple[Provider, str]:
    """``AGENT_LLM_PROVIDER``: explicit choices are honoured; ``auto`` takes Gemini when a
    key is set, else the OpenAI-compatible server when ``OPENAI_BASE_URL`` or
    ``OPENAI_API_KEY`` is set and its ``/models`` answers, else Ollama when it answers
    with the model pulled, else the offline extractive provider (which needs no model).
    Every choice passed over is named in the reason (logged, and shown in ``/readyz``).

    ``llm_pool`` is ``llm_http``'s transport: Ollama's own client is built on it too, so
    every provider's model calls share the one pool whose fullness admission reads
    (``app/ops/load.py``)."""
    kind = settings.llm_provider
    if kind == "gemini" or (kind == "auto" and settings.gemini_api_key):
        from llm.gemini import GeminiProvider

        assert settings.gemini_api_key
        return (
            GeminiProvider(
                settings.gemini_api_key,
                settings.gemini_model,
                base_url=settings.gemini_base_url,
                timeout_s=settings.llm_timeout_s,
                http_client=llm_http or http,
            ),
            "GEMINI_API_KEY is set" if kind == "auto" else "AGENT_LLM_PROVIDER=gemini",
        )
    if kind == "ollama":
        return _ollama(settings, llm_pool, pool_waits), "AGENT_LLM_PROVIDER=ollama"
    passed: list[str] = []
    if kind == "auto" and settings.openai_configured:
        why_not = await _probe_openai_chat(settings, http)
        if why_not is None:
            kind = "openai"
            passed.append("auto: OPENAI_BASE_URL/OPENAI_API_KEY set and the server answers")
        else:
            passed.append(why_not)
    if kind == "openai":
        from llm.openai import OpenAIProvider

        provider = OpenAIProvider(
            settings.openai_base_url,
            settings.openai_model,
            api_key=settings.openai_api_key,
            timeout_s=settings.llm_timeout_s,
            http_client=llm_http or http,
        )
        label = passed[-1] if passed else "AGENT_LLM_PROVIDER=openai"
        return provider, f"{label} ({settings.openai_base_url}, {settings.openai_model})"
    if kind == "auto":
        reason = await _probe_ollama_chat(settings, http)
        if reason is None:
            why = f"Ollama answers at {settings.ollama_host} with {settings.ollama_model}"
            return _ollama(settings, llm_pool, pool_waits), "; ".join([*passed, why])
        reason = "; ".join([*passed, reason])
    else:
        reason = "AGENT_LLM_PROVIDER=extractive"
    from llm.extractive import ExtractiveProvider

    offline = ExtractiveProvider(sample_kb=settings.ingest_sample_kb)  # its greeting suggests a sample question
    return offline, f"no model reachable ({reason}); answering extractively from the knowledge base"


#: The providers ``choose_provider`` builds on the model pool (``llm_http`` / ``llm_pool``).
POOLED_PROVIDERS = frozenset({"gemini", "openai", "ollama"})


def streams_through_pool(provider: Provider) -> bool:
    """Whether ``provider`` (as ``choose_provider`` built it) streams through the model
    pool, whose size then caps the live runs (``app/ops/load.py``); the offline answerer
    opens no connection."""
    return provider.name in POOLED_PROVIDERS


def _ollama(settings: Settings, pool: PooledTransport | None, pool_waits: PoolWaits | None = None) -> Provider:
    from llm.ollama import OllamaProvider

    return OllamaProvider(
        settings.ollama_host,
        settings.ollama_model,
        timeout=settings.llm_timeout_s,
        num_ctx=settings.ollama_num_ctx,
        keep_alive=settings.ollama_keep_alive,
        transport=pool
        or pooled_transport("llm", settings.llm_max_connections, on_wait=pool_waits, http1=settings.outbound_http1),
    )


async def _probe_openai_chat(settings: Settings, http: httpx.AsyncClient) -> str | None:
    """None when the OpenAI-compatible server answers ``GET /models`` (with the key, if
    any), else why not."""
    url = settings.openai_base_url.rstrip("/") + "/models"
    headers = {"Authorization": f"Bearer {settings.openai_api_key}"} if settings.openai_api_key else {}
    try:
        response = await http.get(url, headers=headers, timeout=5.0)
    except httpx.HTTPError as exc:
        return f"OpenAI-compatible server not reachable at {settings.openai_base_url}: {type(exc).__name__}"
    if response.status_code != 200:
        return f"OpenAI-compatible server at {settings.openai_base_url} answered HTTP {response.status_code} to /models"
    return None


async def _probe_ollama_chat(settings: Settings, http: httpx.AsyncClient) -> str | None:
    """None when Ollama is up with the chat model pulled, else why not."""
    url = settings.ollama_host + "/api/tags"
    try:
        response = await http.get(url, timeout=2.0)
    except httpx.HTTPError as exc:
        return f"Ollama not reachable at {settings.ollama_host}: {type(exc).__name__}"
    if response.status_code != 200:
        return f"Ollama answered HTTP {response.status_code}"
    try:
        models = {m.get("name") for m in response.json().get("models", []) if isinstance(m, dict)}
    except ValueError:
        return "Ollama's /api/tags answer was not JSON"
    wanted = settings.ollama_model
    if wanted in models or (":" not in wanted and f"{wanted}:latest" in models):
        return None
    return f"Ollama has no model {wanted!r} pulled (ollama pull {wanted})"


async def choose_embedder(
    settings: Settings, http: httpx.AsyncClient, pool_waits: PoolWaits | None = None
) -> tuple[Embedder | None, str]:
    from app.rooms import kb_embedder

    return await kb_embedder(settings, http, pool_waits=pool_waits)
