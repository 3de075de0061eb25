"""An HTTP/1.1 ``httpx`` transport whose responses are parsed in C (``httptools``, llhttp).

Why (issue 23): a streamed model answer arrives as one small chunk per token, and every
chunk went through httpcore's HTTP/1.1 connection and the pure-Python ``h11`` parser
(``ChunkedReader``, a ``Data`` event and its ``validate`` per chunk, three generator
layers from the socket to the reader) - the largest share of the serving process's CPU
per token after the server's own SSE send. Here the connection is an
``asyncio.Protocol`` whose ``data_received`` feeds ``httptools.HttpResponseParser``
(already the serving stack's parser, uvicorn's ``httptools`` mode): a chunk's framing is
parsed in C and its body lands in a buffer the response's byte stream takes from, one
awaited future per read that finds it empty.

The contract is ``httpx.AsyncBaseTransport``'s, as ``httpx.AsyncHTTPTransport`` keeps it:

* a pool of at most ``limits.max_connections`` connections, at most
  ``limits.max_keepalive_connections`` of them kept idle for ``limits.keepalive_expiry``
  seconds and reused (one whose server closed it or wrote to it while idle is not); a
  request that finds the pool full waits for a connection up to the ``pool`` timeout;
* the request's ``timeout`` extension: ``connect`` (TCP and TLS handshake), ``write``
  (a send the socket will not take), ``read`` (each wait for the next bytes of the
  answer: a deadline per connection checked by one timer, as ``llm.netstream`` does),
  ``pool``; their expiry raises ``httpx.ConnectTimeout``, ``WriteTimeout``,
  ``ReadTimeout``, ``PoolTimeout``;
* errors as httpx's: a refused or failed connection ``httpx.ConnectError``, a failed
  send ``WriteError`` (unless the server answered before it closed: that answer is
  returned, as httpcore returns it), a connection reset while reading ``ReadError``, a connection
  closed before the answer's end (mid-stream, or before its head) or bytes that are not
  HTTP ``httpx.RemoteProtocolError`` - what httpcore and h11 raise for the same events;
* request bodies with a ``Content-Length`` or chunked (``Transfer-Encoding: chunked``, an
  async stream of unknown length); answers with a length, chunked, or delimited by the
  connection's end; interim ``1xx`` answers skipped; the raw body is handed on, as
  httpcore hands it (``httpx.Response`` decodes any ``Content-Encoding``);
* TLS with the given context (``verify``/``cert``/``trust_env`` as httpx's), the SNI
  name from the ``sni_hostname`` extension or the URL's host, ALPN ``http/1.1``;
* the response's ``http_version``, ``reason_phrase`` and ``network_stream`` extensions.

What it does not do it leaves to httpx's own transport (``llm.pool`` builds that one
instead): proxies, HTTP/2, Unix sockets, connect retries. ``HEAD`` requests (whose
answer's length describes a body that never comes: llhttp cannot be told) and methods
other than the usual ones go through an httpx transport this one holds for them
(``llm.netstream.lean_transport``).
Redirects, cookies and auth are the client's (``httpx.AsyncClient``, ``llm.lean_http``),
above any transport.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import re
import ssl
import time
from collections.abc import Iterable
from typing import Any

import httpx

from llm.h1connection import H1Connection, Origin
from llm.netstream import lean_transport

#: Request bodies up to this size go out in one write with the request's head.
JOIN_BODY = 64 * 1024
#: Methods this transport sends itself (``HEAD``'s answer is read by httpx's transport).
METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

#: httpx's default limits.
DEFAULT_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20)

#: A header name (RFC 9110's token) and what must never be in a value: a CR or LF would end
#: the header there and start another (header injection, request smuggling), as h11 refuses.
HEADER_NAME = re.compile(rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+")
BAD_VALUE = re.compile(rb"[\x00\r\n]")

SocketOption = tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]


class _Body(httpx.AsyncByteStream):
    """An answer's body as it arrives: the parser's pieces, in order, uncopied. The
    connection goes back to the pool at the body's end, or is closed if the body is
    closed before it."""

    def __init__(self, pool: H1Transport, connection: H1Connection, read_timeout: float | None) -> None:
        self._pool, self._connection, self._timeout = pool, connection, read_timeout
        self._released = self._ended = False

    def __aiter__(self) -> _Body:  # type: ignore[override]
        return self

    async def __anext__(self) -> bytes:
        if self._released:  # the connection may be another request's by now
            if self._ended:
                raise StopAsyncIteration
            raise httpx.StreamClosed()
        c = self._connection
        while True:
            if c.body:
                return c.take()
            if c.complete:
                self._ended = True
                self._release()
                raise StopAsyncIteration
            if c.error is not None or c.eof:
                error = c.ended_early()
                self._release()
                raise error
            try:
                await c.wait(self._timeout)
            except BaseException:
                self._release()  # a timed-out or cancelled read leaves the connection unusable
                raise
            if self._released:
                # Closed by another task while this read waited: the connection may be the
                # next request's already; waiting on it again would take that one's wake-ups.
                raise httpx.StreamClosed()

    async def aclose(self) -> None:
        self._release()

    def _release(self) -> None:
        if not self._released:
            self._released = True
            self._pool._release(self._connection)


class H1Transport(httpx.AsyncBaseTransport):
    """HTTP/1.1 over asyncio protocols with httptools' parser; see the module docstring."""

    def __init__(
        self,
        *,
        verify: ssl.SSLContext | str | bool = True,
        cert: Any = None,
        trust_env: bool = True,
        limits: httpx.Limits = DEFAULT_LIMITS,
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
        other_methods: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if isinstance(verify, ssl.SSLContext) and cert is None:
            context = verify
        else:
            context = httpx.create_ssl_context(verify=verify, cert=cert, trust_env=trust_env)
        context.set_alpn_protocols(["http/1.1"])
        self._ssl = context
        self.max_connections = limits.max_connections if limits.max_connections is not None else math.inf
        self.max_idle = (
            limits.max_keepalive_connections if limits.max_keepalive_connections is not None else math.inf
        )
        self.keepalive_expiry = limits.keepalive_expiry
        self._local = (local_address, 0) if local_address else None
        self._socket_options = list(socket_options or ())
        #: Kept-alive connections by origin, the most recently used last.
        self._idle: dict[Origin, list[H1Connection]] = {}
        self._idle_count = 0
        #: Connections open or opening (busy and idle).
        self.connections = 0
        #: Requests waiting for a connection, in order.
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()
        self._closed = False
        self._limits = limits
        #: httpx's own transport (on ``llm.netstream``) for ``HEAD`` and unusual methods,
        #: built at its first use.
        self._other = other_methods

    @property
    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context of this transport's https connections."""
        return self._ssl

    # --- the pool -------------------------------------------------------------------

    async def _connection(self, origin: Origin, timeouts: dict[str, float | None]) -> H1Connection:
        """A kept-alive connection to ``origin``, or a new one once the pool has room."""
        while True:
            idle = self._idle.get(origin)
            while idle:
                connection = idle.pop()
                self._idle_count -= 1
                if connection.reusable() and not self._expired(connection) and connection.quiet():
                    connection.reset()
                    return connection
                self._discard(connection)
            if self.connections < self.max_connections:
                break
            if self._idle_count:  # room made by closing another origin's oldest idle connection
                self._discard(self._oldest_idle())
                break
            waiter = asyncio.get_running_loop().create_future()
            self._waiting.append(waiter)
            woken = False
            try:
                async with asyncio.timeout(timeouts.get("pool")):
                    await waiter
                woken = True
            except TimeoutError as exc:
                raise httpx.PoolTimeout("timed out waiting for a connection") from exc
            finally:
                if not woken:
                    if waiter in self._waiting:
                        self._waiting.remove(waiter)
                    elif waiter.done() and not waiter.cancelled():
                        self._wake_one()  # the room it was given goes to the next in line
        self.connections += 1
        try:
            return await self._open(origin, timeouts.get("connect"))
        except BaseException:
            self.connections -= 1
            self._wake_one()
            raise

    def _expired(self, connection: H1Connection) -> bool:
        return self.keepalive_expiry is not None and time.monotonic() - connection.idle_since > self.keepalive_expiry

    def _oldest_idle(self) -> H1Connection:
        origin = min(
            (o for o, idle in self._idle.items() if idle), key=lambda o: self._idle[o][0].idle_since
        )
        connection = self._idle[origin].pop(0)
        self._idle_count -= 1
        return connection

    def _discard(self, connection: H1Connection) -> None:
        connection.close()
        self.connections -= 1
        self._wake_one()

    def _wake_one(self) -> None:
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _release(self, connection: H1Connection) -> None:
        """A request is done with ``connection``: kept for the next one, or closed."""
        connection.busy = False
        if self._closed or not connection.reusable() or self.max_idle <= 0:
            self._discard(connection)
            return
        idle = self._idle.setdefault(connection.origin, [])
        # The origin's oldest idle connections past their expiry are closed now: a request
        # takes the most recent one, so after a burst the ones below it would otherwise
        # stay open for ever under a steady load (httpcore closes them at each request).
        while idle and self._expired(idle[0]):
            self._idle_count -= 1
            self._discard(idle.pop(0))
        if self._idle_count >= self.max_idle:
            self._discard(self._oldest_idle())
        connection.idle_since = time.monotonic()
        idle.append(connection)
        self._idle_count += 1
        self._wake_one()

    async def _open(self, origin: Origin, timeout: float | None) -> H1Connection:
        scheme, host, port, sni = origin
        loop = asyncio.get_running_loop()
        tls = scheme == "https"
        try:
            async with asyncio.timeout(timeout):
                transport, protocol = await loop.create_connection(
                    lambda: H1Connection(loop, origin),
                    host,
                    port,
                    ssl=self._ssl if tls else None,
                    server_hostname=sni if tls else None,
                    local_addr=self._local,
                    ssl_handshake_timeout=timeout if tls else None,
                )
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(str(exc) or "timed out") from exc
        except (OSError, ssl.SSLError) as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
        if self._socket_options:
            sock = transport.get_extra_info("socket")
            if sock is not None:  # uvloop's is a pseudo-socket with ``setsockopt``
                try:
                    for option in self._socket_options:
                        sock.setsockopt(*option)
                except OSError as exc:  # an option the system refuses: as httpx's transport
                    transport.close()
                    raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
        return protocol

    # --- a request ------------------------------------------------------------------

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        scheme = url.scheme
        if scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"Request URL has an unsupported protocol '{scheme}://'.")
        if request.method not in METHODS:
            if self._other is None:
                self._other = lean_transport(verify=self._ssl, limits=self._limits)
            return await self._other.handle_async_request(request)
        if self._closed:
            raise RuntimeError("the transport is closed")
        for name, value in request.headers.raw:
            # httpx builds headers unchecked; h11 refused these at the send, so must we.
            if not HEADER_NAME.fullmatch(name):
                raise httpx.LocalProtocolError(f"Illegal header name {name!r}")
            if BAD_VALUE.search(value):
                raise httpx.LocalProtocolError(f"Illegal header value {value!r}")
        timeouts: dict[str, float | None] = request.extensions.get("timeout", {})
        # The host as the ``Host`` header has it (IDNA 2008, as httpcore connects to it);
        # ``url.host`` is Unicode, which the resolver and ``ssl`` would encode as IDNA 2003
        # ("faß.de" becomes "fass.de": another host).
        host = url.raw_host.decode("ascii")
        port = url.port or (443 if scheme == "https" else 80)
        sni = request.extensions.get("sni_hostname") or host
        connection = await self._connection((scheme, host, port, sni), timeouts)
        connection.busy = True
        # A request that says ``Connection: close`` ends its connection, as h11 ends it.
        connection.must_close = "close" in request.headers.get("connection", "").lower()
        try:
            # As httpcore does: a server may answer before it has read the whole request
            # (a 413) and close; its answer is read, and if there is none the error is
            # the missing answer's.
            with contextlib.suppress(httpx.WriteError):
                await self._send(connection, request, timeouts.get("write"))
            read_timeout = timeouts.get("read")
            while not connection.head_done:
                if connection.error is not None or connection.eof:
                    raise connection.ended_early()
                await connection.wait(read_timeout)
        except BaseException:
            self._release(connection)
            raise
        return httpx.Response(
            connection.status,
            headers=connection.headers,
            stream=_Body(self, connection, read_timeout),
            extensions={
                "http_version": connection.http_version,
                "reason_phrase": connection.reason.strip(),
                "network_stream": connection,
            },
        )

    async def _send(self, connection: H1Connection, request: httpx.Request, timeout: float | None) -> None:
        url = request.url
        target = url.raw_path
        lines = [b"%s %s HTTP/1.1\r\n" % (request.method.encode("ascii"), target)]
        for name, value in request.headers.raw:
            lines.append(b"%s: %s\r\n" % (name, value))
        lines.append(b"\r\n")
        head = b"".join(lines)
        # The framing is the headers' (as h11 frames it): a streamed body read into memory
        # (``Request.aread``) still says ``Transfer-Encoding: chunked``.
        chunked = "chunked" in request.headers.get("transfer-encoding", "").lower()
        try:
            body: bytes | None = request.content
        except httpx.RequestNotRead:
            body = None
        if body is not None:
            if chunked:
                body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) if body else b"0\r\n\r\n"
            if len(body) <= JOIN_BODY:
                await self._write(connection, head + body, timeout)
            else:
                await self._write(connection, head, timeout)
                await self._write(connection, body, timeout)
            return
        await self._write(connection, head, timeout)
        stream = request.stream
        assert isinstance(stream, httpx.AsyncByteStream)
        async for part in stream:
            if part:
                await self._write(connection, b"%x\r\n%s\r\n" % (len(part), part) if chunked else part, timeout)
        if chunked:
            await self._write(connection, b"0\r\n\r\n", timeout)

    async def _write(self, connection: H1Connection, data: bytes, timeout: float | None) -> None:
        await connection.write(connection.transport, data, timeout)

    async def aclose(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            for connection in idle:
                connection.close()
                self.connections -= 1
        self._idle.clear()
        self._idle_count = 0
        if self._other is not None:
            await self._other.aclose()
