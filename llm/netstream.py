"""The network layer under our outbound ``httpx`` pools that keep httpx's own transport (a
proxy, HTTP/2, connect retries: ``llm.pool``; the others are ``llm.h1transport``'s), and
under ``H1Transport``'s ``HEAD`` requests: an ``httpcore`` network backend on plain
asyncio protocols.

Why: a streamed model answer arrives one small read per token, and httpcore's default
backend (``anyio``) wraps every read in ``anyio.fail_after`` — a cancel scope entered
and left, the running task and the async library looked up — which cost a third of the
outbound stream's CPU (issue 23's profile at 300 concurrent runs: ``AnyIOStream.read``
10 % of the serving process's main thread, most of it the timeout). httpcore documents
its network backends as pluggable (``AsyncConnectionPool(network_backend=...)``); this
one keeps httpcore's HTTP/1.1 machinery, pool and errors (``httpcore.ReadTimeout``,
``ReadError``, ``ConnectError``…, mapped to httpx's by the transport), and only does
the socket work itself:

* bytes arrive in an ``asyncio.Protocol`` buffer; a read takes what is there or waits on
  one future;
* the read timeout is a deadline per stream, checked lazily: a read only moves the
  deadline (one float), and one timer per stream is armed at the deadline and re-armed
  when it fires early (the read it was armed for was answered long ago), so a stream of
  tokens 100 ms apart costs one timer per timeout period, not one per token;
* TLS through ``loop.start_tls`` on the same protocol.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Iterable
from typing import Any, cast

import httpcore
import httpx

from llm.timed_protocol import TimedProtocol

log = logging.getLogger("agentchat.pool")

#: Bytes buffered from the socket before reading is paused until the reader catches up.
HIGH_WATER = 256 * 1024

SocketOption = tuple[int, int, int] | tuple[int, int, bytes | bytearray] | tuple[int, int, None, int]


class _Protocol(TimedProtocol):
    """One connection's bytes, its end, and its write flow control."""

    read_timeout = httpcore.ReadTimeout
    write_timeout = httpcore.WriteTimeout
    write_error = httpcore.WriteError

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        #: Chunks as they arrived (a token is usually one chunk, handed on uncopied).
        self.buffer: list[bytes] = []
        self.buffered = 0
        self.eof = False

    # --- asyncio.Protocol --------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        self.buffer.append(data)
        self.buffered += len(data)
        if self.buffered > HIGH_WATER and self.transport is not None and not self.paused_reading:
            self.paused_reading = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None and self.error is None:
            self.error = exc
        self.eof = True
        self._lost()

    # --- reading -----------------------------------------------------------------

    def take(self, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` of what arrived, in order (at least one byte)."""
        first = self.buffer[0]
        if len(first) <= max_bytes and len(self.buffer) == 1:
            data = first
            self.buffer.clear()
        else:
            joined = b"".join(self.buffer)
            data, rest = joined[:max_bytes], joined[max_bytes:]
            self.buffer[:] = [rest] if rest else []
        self.buffered -= len(data)
        if self.paused_reading and self.buffered <= HIGH_WATER // 4 and self.transport is not None:
            self.paused_reading = False
            self.transport.resume_reading()
        return data


class AsyncioStream(httpcore.AsyncNetworkStream):
    """A connection as httpcore reads and writes it."""

    def __init__(self, transport: asyncio.Transport, protocol: _Protocol) -> None:
        self._transport, self._protocol = transport, protocol

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        p = self._protocol
        while True:
            if p.buffer:
                return p.take(max_bytes)
            if p.error is not None:
                raise httpcore.ReadError(str(p.error) or type(p.error).__name__)
            if p.eof:
                return b""
            await p.wait(timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if buffer:
            await self._protocol.write(self._transport, buffer, timeout)

    async def aclose(self) -> None:
        self._transport.close()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.AsyncNetworkStream:
        p = self._protocol
        try:
            transport = await p.loop.start_tls(
                self._transport, p, ssl_context, server_hostname=server_hostname, ssl_handshake_timeout=timeout
            )
        except TimeoutError as exc:
            self._transport.close()
            raise httpcore.ConnectTimeout(str(exc) or "TLS handshake timed out") from exc
        except (OSError, ssl.SSLError) as exc:
            self._transport.close()
            raise httpcore.ConnectError(str(exc)) from exc
        if transport is None:
            raise httpcore.ConnectError("the connection closed during the TLS handshake")
        p.transport = transport
        return AsyncioStream(p.transport, p)

    def get_extra_info(self, info: str) -> Any:
        if info == "ssl_object":
            return self._transport.get_extra_info("ssl_object")
        if info == "client_addr":
            return self._transport.get_extra_info("sockname")
        if info == "server_addr":
            return self._transport.get_extra_info("peername")
        if info == "socket":
            return self._transport.get_extra_info("socket")
        if info == "is_readable":
            # The protocol reads eagerly, so the socket itself never looks readable: an
            # idle connection the server closed (or wrote to) shows here instead.
            p = self._protocol
            return bool(p.buffer) or p.eof or p.error is not None or self._transport.is_closing()
        return None


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    """Connections as :class:`AsyncioStream`; errors as httpcore's own."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        local = (local_address, 0) if local_address else None
        try:
            async with asyncio.timeout(timeout):
                transport, protocol = await loop.create_connection(
                    lambda: _Protocol(loop), host, port, local_addr=local
                )
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(str(exc) or "timed out") from exc
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        return _stream(transport, protocol, socket_options)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[SocketOption] | None = None
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport, protocol = await loop.create_unix_connection(lambda: _Protocol(loop), path)
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(str(exc) or "timed out") from exc
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        return _stream(transport, protocol, socket_options)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def _stream(
    transport: asyncio.BaseTransport, protocol: asyncio.BaseProtocol, options: Iterable[SocketOption] | None
) -> AsyncioStream:
    assert isinstance(protocol, _Protocol)
    sock = transport.get_extra_info("socket")
    for option in options or ():
        if sock is not None:  # uvloop's is a pseudo-socket with ``setsockopt``
            sock.setsockopt(*option)
    return AsyncioStream(cast(asyncio.Transport, transport), protocol)


def lean_transport(**kwargs: Any) -> httpx.AsyncHTTPTransport:
    """``httpx.AsyncHTTPTransport(**kwargs)`` whose connections use :class:`AsyncioBackend`.

    httpx's transport takes no network backend, so it is set on the httpcore pool the
    transport built (``_pool``, private to httpx). Should that change, the transport
    keeps httpcore's default backend and says so in the log: slower, never broken
    (``tests/test_netstream.py`` fails on it)."""
    transport = httpx.AsyncHTTPTransport(**kwargs)
    pool = getattr(transport, "_pool", None)
    if isinstance(pool, httpcore.AsyncConnectionPool) and hasattr(pool, "_network_backend"):
        pool._network_backend = AsyncioBackend()
    else:
        log.warning("httpx transport without an httpcore pool; outbound streams use httpcore's default backend")
    return transport


def uses_lean_backend(transport: httpx.AsyncBaseTransport) -> bool:
    """Whether ``transport`` was built by :func:`lean_transport` with its backend in place."""
    pool = getattr(transport, "_pool", None)
    return isinstance(getattr(pool, "_network_backend", None), AsyncioBackend)
