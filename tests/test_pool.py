"""Outbound pools have a stated size, and a request that waits for a connection says so."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agenttools.rag.perplexity import PerplexityClient
from app.config import Settings
from app.ops.metrics import AppMetrics
from app.rooms import kb_embedder, perplexity_http
from llm.h1transport import H1Transport
from llm.pool import ON_SEND, PooledTransport, PoolWaits, honours_on_send, pooled_transport
from tests.fakes import FakeGemini, FakeOllama, running_fake
from tests.fakes.openai import FakeOpenAI
from tests.fakes.perplexity import Answer, FakePerplexity
from tests.support.deadline import within
from tests.support.procs import until


class Chunks(httpx.AsyncByteStream):
    async def __aiter__(self):  # type: ignore[no-untyped-def]
        yield b"o"
        yield b"k"


class SlowTransport(httpx.AsyncBaseTransport):
    def __init__(self) -> None:
        self.in_flight = 0
        self.peak = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(0.05)
        finally:
            self.in_flight -= 1
        return httpx.Response(200, stream=Chunks())


async def test_a_full_pool_makes_requests_wait_and_records_the_wait(caplog: pytest.LogCaptureFixture) -> None:
    metrics = AppMetrics()
    waits = PoolWaits()
    waits.attach(metrics.pool_waited)
    inner = SlowTransport()
    transport = PooledTransport("llm", 2, inner, waits)
    with caplog.at_level(logging.WARNING, logger="agentchat.pool"):
        async with httpx.AsyncClient(transport=transport, base_url="http://model") as client:
            codes = await asyncio.gather(*(client.get("/x") for _ in range(5)))
    assert [r.status_code for r in codes] == [200] * 5
    assert inner.peak <= 2 and transport.in_flight == 0
    assert transport.waits == 3
    assert any("waited for an outbound connection" in r.message for r in caplog.records)
    body = metrics.exposition().decode()
    assert 'agentchat_pool_wait_seconds_count{pool="llm"} 3.0' in body


async def test_a_streamed_response_holds_its_connection_until_closed() -> None:
    transport = PooledTransport("llm", 1, SlowTransport())
    async with httpx.AsyncClient(transport=transport, base_url="http://model") as client:
        async with client.stream("GET", "/x") as response:
            async for _chunk in response.aiter_raw():
                assert transport.in_flight == 1  # mid-stream: the connection is held
                break
        assert transport.in_flight == 0  # closed early: released


def test_pool_sizes_are_settings() -> None:
    s = Settings.from_env({"AGENT_LLM_MAX_CONNECTIONS": "500", "AGENT_BACKEND_MAX_CONNECTIONS": "64"})
    assert (s.llm_max_connections, s.backend_max_connections) == (500, 64)
    assert Settings.from_env({}).llm_max_connections == 512


def test_embedder_and_perplexity_pool_sizes_are_settings() -> None:
    s = Settings.from_env({"AGENT_EMBED_MAX_CONNECTIONS": "3", "AGENT_PERPLEXITY_MAX_CONNECTIONS": "5"})
    assert (s.embed_max_connections, s.perplexity_max_connections) == (3, 5)
    assert (Settings.from_env({}).embed_max_connections, Settings.from_env({}).perplexity_max_connections) == (32, 16)


# --- the configured size reaches each client: N+1 requests against a held loopback fake ---


class Held:
    """ASGI middleware in front of a fake: while ``holding``, requests whose path ends
    with ``suffix`` wait for ``release``; it counts how many arrived and the peak of
    those in the server at once."""

    def __init__(self, app: Any, suffix: str) -> None:
        self.app, self.suffix = app, suffix
        self.holding = False
        self.release = asyncio.Event()
        self.arrived = self.in_server = self.peak = 0
        self.reached = asyncio.Event()
        self.expect = 0

    def hold(self, expect: int) -> None:
        self.holding, self.expect, self.arrived = True, expect, 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not self.holding or not scope["path"].endswith(self.suffix):
            await self.app(scope, receive, send)
            return
        self.arrived += 1
        self.in_server += 1
        self.peak = max(self.peak, self.in_server)
        if self.arrived >= self.expect:
            self.reached.set()
        try:
            await self.release.wait()
            await self.app(scope, receive, send)
        finally:
            self.in_server -= 1


def pool_waits_counted(metrics: AppMetrics, pool: str) -> float:
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for sample in family.samples:
            if sample.name == "agentchat_pool_wait_seconds_count" and sample.labels.get("pool") == pool:
                return sample.value
    return 0.0


async def overflow(held: Held, size: int, call: Callable[[], Any]) -> None:
    """``size + 1`` calls at once: ``size`` reach the server and are held there; the
    last one waits for a connection (it does not reach the server while they are held)."""
    held.hold(size)
    tasks = [asyncio.create_task(call()) for _ in range(size + 1)]
    await asyncio.wait_for(held.reached.wait(), 10)
    for _ in range(20):  # let a request the pool did not stop reach the server
        await asyncio.sleep(0.01)
    assert held.arrived == size and held.peak == size
    held.release.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 10)
    assert held.arrived == size + 1 and held.peak == size


@asynccontextmanager
async def embedder_fake(kind: str) -> AsyncIterator[tuple[Held, dict[str, str]]]:
    """The fake of one embedding service behind ``Held``, and the settings that use it."""
    if kind == "ollama":
        held = Held(FakeOllama().app, "/api/embed")
        async with running_fake(held) as url:
            yield held, {"AGENT_EMBEDDER": "ollama", "OLLAMA_HOST": url, "OLLAMA_EMBED_MODEL": "nomic-embed-text"}
    elif kind == "gemini":
        held = Held(FakeGemini(api_key="test-key").app, ":batchEmbedContents")
        async with running_fake(held) as url:
            yield held, {"AGENT_EMBEDDER": "gemini", "GEMINI_API_KEY": "test-key", "GEMINI_BASE_URL": url}
    else:
        held = Held(FakeOpenAI().app, "/v1/embeddings")
        async with running_fake(held) as url:
            yield held, {"AGENT_EMBEDDER": "openai", "OPENAI_BASE_URL": url + "/v1", "OPENAI_EMBED_MODEL": "embed-test"}


@pytest.mark.parametrize("kind", ["ollama", "gemini", "openai"])
async def test_an_embedder_uses_a_pool_of_the_configured_size(kind: str, caplog: pytest.LogCaptureFixture) -> None:
    metrics = AppMetrics()
    waits = PoolWaits()
    waits.attach(metrics.pool_waited)
    async with AsyncExitStack() as stack:
        held, env = await stack.enter_async_context(embedder_fake(kind))
        settings = Settings.from_env({**env, "AGENT_EMBED_MAX_CONNECTIONS": "2"})
        embedder, why = await kb_embedder(settings, pool_waits=waits)  # the app's (and the KB's) embedder
        assert embedder is not None and embedder.name == kind, why
        stack.push_async_callback(embedder.aclose)
        with caplog.at_level(logging.WARNING, logger="agentchat.pool"):
            await overflow(held, 2, lambda: embedder.embed("tool search query"))
    assert pool_waits_counted(metrics, "embed") == 1
    assert [r.__dict__.get("pool") for r in caplog.records if "waited for an outbound connection" in r.message] == [
        "embed"
    ]


async def test_perplexity_uses_a_pool_of_its_own_of_the_configured_size() -> None:
    metrics = AppMetrics()
    waits = PoolWaits()
    waits.attach(metrics.pool_waited)
    fake = FakePerplexity(script=lambda body: Answer("An answer."))
    held = Held(fake.app, "/chat/completions")
    settings = Settings.from_env({"AGENT_PERPLEXITY_MAX_CONNECTIONS": "3"})
    async with running_fake(held) as url, AsyncExitStack() as stack:
        client = PerplexityClient(await perplexity_http(settings, stack, waits), fake.api_key, base_url=url)
        await overflow(held, 3, lambda: client.search("latest release notes"))
    assert pool_waits_counted(metrics, "perplexity") == 1


class GatedTransport(httpx.AsyncBaseTransport):
    """Records the paths it is sent; a path in ``held`` waits for ``release``."""

    def __init__(self, held: frozenset[str] = frozenset()) -> None:
        self.sent: list[str] = []
        self.held = held
        self.reached = asyncio.Event()
        self.release = asyncio.Event()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request.url.path)
        if request.url.path in self.held:
            self.reached.set()
            await self.release.wait()
        return httpx.Response(200, content=b"ok")


async def test_on_send_is_awaited_once_a_connection_is_granted_and_before_the_request_leaves(
    caplog: pytest.LogCaptureFixture,
) -> None:
    inner = GatedTransport(held=frozenset({"/first"}))
    transport = PooledTransport("perplexity", 1, inner)
    order: list[str] = []

    async def on_send() -> None:
        order.append(f"on_send (sent so far: {inner.sent})")

    def waiting() -> bool:  # logged right before the request blocks at the gate
        return any("waiting for an outbound connection" in r.message for r in caplog.records)

    caplog.set_level(logging.INFO, logger="agentchat.pool")
    async with httpx.AsyncClient(transport=transport, base_url="http://pplx") as client:
        first = asyncio.create_task(client.get("/first"))
        await within(inner.reached.wait(), "the first request to reach the upstream")
        second = asyncio.create_task(client.get("/second", extensions={ON_SEND: on_send}))
        await until(waiting, "the second request to wait for the connection")
        assert order == []  # waiting for the connection: not reported as sent
        inner.release.set()
        await asyncio.gather(first, second)
    assert order == ["on_send (sent so far: ['/first'])"] and inner.sent == ["/first", "/second"]


async def test_a_failing_on_send_keeps_the_request_from_leaving_and_frees_the_connection() -> None:
    inner = GatedTransport()
    transport = PooledTransport("perplexity", 1, inner)

    async def on_send() -> None:
        raise RuntimeError("the started mark could not be stored")

    async with httpx.AsyncClient(transport=transport, base_url="http://pplx") as client:
        with pytest.raises(RuntimeError, match="started mark"):
            await client.get("/paid", extensions={ON_SEND: on_send})
        assert (await client.get("/next")).status_code == 200
    assert inner.sent == ["/next"] and transport.in_flight == 0


async def test_perplexity_reports_the_send_through_its_pool_or_before_sending_without_one() -> None:
    fake = FakePerplexity(script=lambda body: Answer("An answer."))
    calls_at_send: list[int] = []

    async def before_send() -> None:
        calls_at_send.append(len(fake.calls))

    settings = Settings.from_env({"AGENT_PERPLEXITY_MAX_CONNECTIONS": "1"})
    async with running_fake(fake.app) as url, AsyncExitStack() as stack:
        pooled = await perplexity_http(settings, stack, None)
        plain = await stack.enter_async_context(httpx.AsyncClient())
        assert honours_on_send(pooled) and not honours_on_send(plain)
        for http in (pooled, plain):
            await PerplexityClient(http, fake.api_key, base_url=url).search("q", before_send=before_send)
    assert calls_at_send == [0, 1]  # each time before the fake saw the request


def shard_context(shard: httpx.AsyncBaseTransport) -> object:
    """The TLS context a pool's shard connects with: ``H1Transport``'s, or httpx's
    transport's (httpcore's pool, private)."""
    if isinstance(shard, H1Transport):
        return shard.ssl_context
    return shard._pool._ssl_context  # type: ignore[attr-defined]


def _hold_app() -> tuple[Any, asyncio.Event, Callable[[], int]]:
    """An ASGI app whose answers send a first line, then wait for the event."""
    release = asyncio.Event()
    opened = 0

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        nonlocal opened
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        opened += 1
        await send({"type": "http.response.body", "body": b"first\n", "more_body": True})
        await release.wait()
        await send({"type": "http.response.body", "body": b"last\n"})

    return app, release, lambda: opened


async def test_a_large_pool_holds_its_stated_size_behind_one_gate() -> None:
    """A pool of 100 is one ``H1Transport`` of 100 connections behind a gate of 100: 100
    streamed answers are open at once, the 101st waits at the gate - where it is seen -
    not in the transport; every connection is kept alive for the next requests."""
    from tests.support.server import serve_app

    app, release, opened = _hold_app()
    transport = pooled_transport("llm", 100)
    (h1,) = transport._shards
    assert isinstance(h1, H1Transport) and h1.max_connections == 100
    async with serve_app(app, lifespan="off") as url, httpx.AsyncClient(transport=transport, base_url=url) as client:
        async def one() -> bytes:
            async with client.stream("GET", "/") as response:
                return b"".join([chunk async for chunk in response.aiter_bytes()])

        streams = [asyncio.create_task(one()) for _ in range(101)]
        await until(lambda: opened() == 100 and transport._gate.locked(), "100 streams open, the gate full")
        assert transport.in_flight == 100 and h1.connections == 100
        release.set()
        assert await asyncio.gather(*streams) == [b"first\nlast\n"] * 101
        assert transport.waits == 1 and transport.in_flight == 0
        assert h1.connections == 100  # kept alive, none opened for the 101st
    assert h1.connections == 0  # closed with the client


async def test_a_pool_on_httpx_transport_is_sharded_behind_one_gate_and_spreads_streams_over_its_shards() -> None:
    """A pool that needs httpx's own transport (here: connect retries, which
    ``H1Transport`` does not do) is four httpx pools of 25 behind one gate of 100: 100
    streamed answers are open at once (no shard holds a request back while another has
    room), spread evenly, and the 101st waits at the gate - where it is seen - not in a
    shard."""
    from llm.pool import SHARD_CONNECTIONS
    from tests.support.server import serve_app

    assert SHARD_CONNECTIONS == 32
    app, release, opened = _hold_app()
    transport = pooled_transport("llm", 100, retries=1)
    assert len(transport._shards) == 4 and not any(isinstance(s, H1Transport) for s in transport._shards)
    async with serve_app(app, lifespan="off") as url, httpx.AsyncClient(transport=transport, base_url=url) as client:
        async def one() -> bytes:
            async with client.stream("GET", "/") as response:
                return b"".join([chunk async for chunk in response.aiter_bytes()])

        streams = [asyncio.create_task(one()) for _ in range(101)]
        await until(lambda: opened() == 100 and transport._gate.locked(), "100 streams open, the gate full")
        assert transport.in_flight == 100 and transport._load == [25, 25, 25, 25]
        release.set()
        assert await asyncio.gather(*streams) == [b"first\nlast\n"] * 101
    assert transport.waits == 1 and transport.in_flight == 0 and transport._load == [0, 0, 0, 0]


def _count_tls_contexts(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Record every ``ssl.create_default_context`` call from here on (the arguments of
    each, in the returned list); the contexts are still built by the session's memoised
    one (``tests/conftest.py``)."""
    import ssl

    built: list[object] = []
    memoised = ssl.create_default_context

    def counting(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        built.append(args)
        return memoised(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", counting)
    return built


def test_the_shards_of_a_pool_share_one_tls_context_that_still_verifies(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each httpx transport builds a TLS context of its own, loading the CA bundle (~50 ms
    of CPU): an app's pools had 17 shards, most of a served process's start-up CPU. A
    pool's transport (or the shards of one on httpx's transport) shares one context -
    verifying as httpx's default does, or not when told - whose bundle is read at its
    first use, not when the pool is built (``llm/tls.py``; tests/test_tls_deferred.py connects through it). (The session
    memoises ``ssl.create_default_context``, ``tests/conftest.py``: the contexts *built*
    are counted here, not compared.)"""
    import ssl

    from llm.tls import DeferredTrustContext

    built = _count_tls_contexts(monkeypatch)

    def contexts(transport: PooledTransport) -> list[ssl.SSLContext]:
        return [shard_context(shard) for shard in transport._shards]  # type: ignore[misc]

    shared = contexts(pooled_transport("llm", 256, retries=1))
    assert len(shared) == 8 and all(ctx is shared[0] for ctx in shared)
    (h1,) = contexts(pooled_transport("llm", 256))
    assert isinstance(h1, DeferredTrustContext) and not h1.trust_loaded
    assert built == [], f"{len(built)} CA bundles read for one pool before any connection"
    assert isinstance(shared[0], DeferredTrustContext) and not shared[0].trust_loaded
    assert shared[0].verify_mode == ssl.CERT_REQUIRED and shared[0].check_hostname
    assert shared[0].cert_store_stats()["x509_ca"] > 0  # the CA bundle, read at this first look
    assert shared[0].trust_loaded
    unverified = contexts(pooled_transport("backend", 64, verify=False, retries=1))
    assert len(unverified) == 2 and all(ctx is unverified[0] and ctx.verify_mode == ssl.CERT_NONE for ctx in unverified)
    (h1_unverified,) = contexts(pooled_transport("backend", 64, verify=False))
    assert isinstance(h1_unverified, ssl.SSLContext) and h1_unverified.verify_mode == ssl.CERT_NONE


async def test_an_apps_backend_and_model_pools_share_one_tls_context(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An app's start builds one TLS context for its backend and model pools, not one
    each, and reads no CA bundle (~30 ms of CPU each) until a first TLS connection: every
    ``agentchat serve`` paid for two, then one, though many never open one. Counted as
    in the test above (the session memoises the builds)."""
    import ssl

    import app.wiring
    from app.factory import create_app
    from llm.tls import DeferredTrustContext, deferred_tls_context

    built = _count_tls_contexts(monkeypatch)
    made: list[DeferredTrustContext] = []

    def counted(**kwargs: Any) -> DeferredTrustContext:
        made.append(deferred_tls_context(**kwargs))
        return made[-1]

    monkeypatch.setattr(app.wiring, "deferred_tls_context", counted)
    settings = Settings(db_path=tmp_path / "agent.sqlite3", llm_provider="extractive", embedder="hashing")
    application = create_app(settings)
    async with application.router.lifespan_context(application):
        http = application.state.services.http
        assert len(made) == 1, f"{len(made)} TLS contexts built by one app's start"
        assert shard_context(http._transport._shards[0]) is made[0]  # type: ignore[attr-defined]
        assert made[0].verify_mode == ssl.CERT_REQUIRED and not made[0].trust_loaded
    assert built == [], f"{len(built)} CA bundles read by one app's start"


async def test_portable_stack_puts_the_outbound_pools_on_httpx_own_http1() -> None:
    """``AGENT_SERVER_STACK=portable`` is the way out of our HTTP/1.1 client
    (``llm.h1transport``): the app's pools then run on httpx's own (httpcore), and
    ``pooled_transport`` refuses a client it does not know."""
    for env, on_h1 in (({}, True), ({"AGENT_SERVER_STACK": "portable"}, False)):
        async with AsyncExitStack() as stack:
            client = await perplexity_http(Settings.from_env(env), stack, PoolWaits())
            transport = client._transport
            assert isinstance(transport, PooledTransport)
            assert [isinstance(s, H1Transport) for s in transport._shards] == [on_h1] * len(transport._shards)
    with pytest.raises(ValueError, match="http1"):
        pooled_transport("x", 4, http1="h11")
