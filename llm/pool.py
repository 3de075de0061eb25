"""Outbound connection pools of a stated size, whose waits are seen.

httpx's default pool holds 100 connections; a request beyond that waits, silently, for
a connection to free up — for a streamed model answer that is the whole answer of
another run. ``pooled_transport`` builds an httpx transport with an explicit pool
size and a gate of the same size in front of it: a request that finds every
connection busy waits at the gate, where the wait is timed and reported
(``on_wait(pool, seconds)``: a log line and ``agentchat_pool_wait_seconds``). A
connection is held until the response is closed (a stream to its end).

Behind the gate the connections are ``llm.h1transport.H1Transport``'s: HTTP/1.1 parsed
in C on asyncio protocols, a third less CPU per streamed token than httpcore's HTTP/1.1
and ``h11`` and a quarter of it per request (issue 23; ``bench/provider_token_cpu.py``).
A pool that needs what that transport does not do (a proxy, HTTP/2, a Unix socket,
connect retries) keeps httpx's own transport, split into shards of ``SHARD_CONNECTIONS``
(each an httpx transport of its own; a request goes to the shard with the fewest
requests in flight): httpcore's pool re-examines every connection it holds each time a
request starts or ends, and its idle check is quadratic in them, so one pool of 256
streamed model answers spent more CPU there than on the answers' tokens. The stated
size, the gate and its waits are the whole pool's either way.

A request may carry an ``ON_SEND`` extension: an async callable awaited once the request
holds its connection and before any of its bytes go out. A caller that must know whether
a request *left* (a paid call run at most once records it as started) learns it there,
not before the wait: a request still waiting for a connection when the process dies was
never sent, and may simply be sent after a restart. If the callable raises, the request
is not sent and the error propagates.
"""

from __future__ import annotations

import asyncio
import logging
import math
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import httpx

from llm.h1transport import H1Transport
from llm.netstream import lean_transport
from llm.tls import DeferredTrustContext, deferred_tls_context

log = logging.getLogger("agentchat.pool")

WaitHook = Callable[[str, float], None]
SendHook = Callable[[], Awaitable[None]]

#: The httpx request extension holding a :data:`SendHook` (see the module docstring).
ON_SEND = "agentchat.on_send"
#: The HTTP/1.1 clients a pool can run on (``pooled_transport``'s ``http1``).
HTTP1_CLIENTS = ("httptools", "httpcore")
#: Connections per shard of a large pool on httpx's transport (see the module docstring).
SHARD_CONNECTIONS = 32
#: The ``pooled_transport`` keywords ``H1Transport`` honours itself; any other (``proxy``,
#: ``http2``, ``uds``, ``retries``...) keeps httpx's transport.
H1_KEYWORDS = frozenset({"trust_env", "local_address", "socket_options", "http1"})


class _Released(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, release: Callable[[], None]) -> None:
        self._inner, self._release = inner, release

    def __aiter__(self) -> AsyncIterator[bytes]:  # type: ignore[override]
        # The inner stream's own iterator: no generator layer of ours on every chunk of a
        # streamed answer (a model's tokens pass here one by one).
        return self._inner.__aiter__()

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            self._release()


class PooledTransport(httpx.AsyncBaseTransport):
    """At most ``max_connections`` requests in flight; the others wait, and say so."""

    def __init__(
        self,
        name: str,
        max_connections: int,
        inner: httpx.AsyncBaseTransport | Sequence[httpx.AsyncBaseTransport],
        on_wait: WaitHook | None = None,
        trust: DeferredTrustContext | None = None,
    ) -> None:
        self.name, self.max_connections = name, max_connections
        #: The shards' TLS context when it reads its CA bundle late (``llm.tls``): an https
        #: request awaits that read, done in a worker thread, before its handshake, which
        #: would otherwise read it on the loop (~45 ms of every live stream's time, once).
        self._trust = trust
        self._shards = [inner] if isinstance(inner, httpx.AsyncBaseTransport) else list(inner)
        #: Requests in flight on each shard (a request goes to the least busy one).
        self._load = [0] * len(self._shards)
        self._gate = asyncio.Semaphore(max_connections)
        self.on_wait = on_wait
        self.in_flight = 0
        self.waits = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._trust is not None and not self._trust.trust_loaded and request.url.scheme == "https":
            await self._trust.load_trust()
        if self._gate.locked():
            # Said before the wait too: a wait the process never came back from leaves a trace.
            log.info(
                "waiting for an outbound connection",
                extra={"pool": self.name, "max_connections": self.max_connections, "host": request.url.host},
            )
            started = time.perf_counter()
            await self._gate.acquire()
            waited = time.perf_counter() - started
            self.waits += 1
            log.warning(
                "waited for an outbound connection",
                extra={
                    "pool": self.name,
                    "wait_s": round(waited, 4),
                    "max_connections": self.max_connections,
                    "host": request.url.host,
                },
            )
            if self.on_wait is not None:
                self.on_wait(self.name, waited)
        else:
            await self._gate.acquire()
        self.in_flight += 1
        shard = min(range(len(self._shards)), key=self._load.__getitem__) if len(self._shards) > 1 else 0
        self._load[shard] += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.in_flight -= 1
                self._load[shard] -= 1
                self._gate.release()

        on_send: SendHook | None = request.extensions.get(ON_SEND)
        try:
            if on_send is not None:
                await on_send()
            response = await self._shards[shard].handle_async_request(request)
        except BaseException:
            release()
            raise
        if response.is_closed:  # read whole already (a response built with its content)
            release()
            return response
        stream = response.stream
        assert isinstance(stream, httpx.AsyncByteStream)
        response.stream = _Released(stream, release)
        return response

    async def aclose(self) -> None:
        await asyncio.gather(*(shard.aclose() for shard in self._shards))


def honours_on_send(http: httpx.AsyncClient) -> bool:
    """Whether ``http`` sends through a :class:`PooledTransport`, which awaits a request's
    ``ON_SEND`` hook. A caller that gets False must await its hook itself before sending
    (earlier than needed, never later). httpx has no public accessor for a client's
    transport; should its private name change, this answers False: the safe side."""
    return isinstance(getattr(http, "_transport", None), PooledTransport)


def pooled_transport(
    name: str,
    max_connections: int,
    *,
    on_wait: WaitHook | None = None,
    keepalive: int | None = None,
    http1: str = "httptools",
    **transport_kwargs: Any,
) -> PooledTransport:
    """A pool of ``max_connections`` behind its gate (see the module docstring).

    ``http1`` picks the HTTP/1.1 client under it: ``httptools`` (``llm.h1transport``:
    answers parsed by llhttp in C, the least CPU per streamed token) or ``httpcore``
    (httpx's own HTTP/1.1 and pool, on ``llm.netstream``'s sockets: the portable path,
    ``AGENT_SERVER_STACK=portable``, for a deployment that meets a server our parser
    handles differently). A pool with a proxy, HTTP/2 or other transport options takes
    the httpcore path whatever ``http1`` says."""
    # One TLS context for the whole pool: each httpx transport would otherwise build its
    # own, loading the CA bundle every time (~50 ms of CPU), and an app's pools had 17
    # shards - most of an app start's CPU, in the profile of a fresh start. A context is
    # made to be shared by many connections; ``verify``/``cert`` are honoured as httpx would.
    # httpx's default (``verify=True``) reads its bundle at the first TLS connection only
    # (``llm.tls``): many a process never opens one.
    verify = transport_kwargs.pop("verify", True)
    cert = transport_kwargs.pop("cert", None)
    trust_env = transport_kwargs.get("trust_env", True)
    if verify is True and cert is None:
        ssl_context: ssl.SSLContext = deferred_tls_context(trust_env=trust_env)
    else:
        ssl_context = httpx.create_ssl_context(verify=verify, cert=cert, trust_env=trust_env)
    trust = ssl_context if isinstance(ssl_context, DeferredTrustContext) else None
    plain_http1 = transport_kwargs.get("http1", True) and not transport_kwargs.get("http2", False)
    if http1 not in HTTP1_CLIENTS:
        raise ValueError(f"http1 must be one of {', '.join(HTTP1_CLIENTS)}, not {http1!r}")
    if http1 == "httptools" and plain_http1 and set(transport_kwargs) <= H1_KEYWORDS:
        kept_alive = min(max_connections, keepalive or max_connections)
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=kept_alive)
        h1 = H1Transport(
            verify=ssl_context,
            limits=limits,
            local_address=transport_kwargs.get("local_address"),
            socket_options=transport_kwargs.get("socket_options"),
        )
        return PooledTransport(name, max_connections, h1, on_wait, trust=trust)
    count = max(1, math.ceil(max_connections / SHARD_CONNECTIONS))
    per_shard = math.ceil(max_connections / count)
    kept = math.ceil(min(max_connections, keepalive or max_connections) / count)
    shard_limits = httpx.Limits(max_connections=per_shard, max_keepalive_connections=min(per_shard, kept))
    # Each shard's connections on the lean asyncio backend (``llm.netstream``: no cancel
    # scope per read of a streamed answer).
    shards = [lean_transport(limits=shard_limits, verify=ssl_context, **transport_kwargs) for _ in range(count)]
    return PooledTransport(name, max_connections, shards, on_wait, trust=trust)


class PoolWaits:
    """One app's sink for pool waits: transports are built before its metrics, so the
    hook forwards to whatever is attached later."""

    def __init__(self) -> None:
        self._sink: WaitHook | None = None

    def attach(self, sink: WaitHook) -> None:
        self._sink = sink

    def __call__(self, pool: str, seconds: float) -> None:
        if self._sink is not None:
            self._sink(pool, seconds)
