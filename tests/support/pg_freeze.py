"""A loopback relay that freezes a PostgreSQL client the way SIGSTOP does, at a chosen point.

A stopped process can stop between any two of its writes to the server, but never inside
one: the bytes of one ``send()`` reach the server together. The relay reads the client's
bytes as they were written (loopback keeps a small write in one segment) and, once
``arm(marker)`` saw ``marker`` go by (a parameter only one statement carries, e.g. a
lease owner), stops at the first write that leaves the server waiting for more of a
pipeline — the client's stream no longer ends with a ``Sync`` or a simple ``Query`` — or,
if there is none, after the next write: a freeze between two statements. From then on
nothing moves either way, and new connections wait, until ``thaw()``; the sockets stay
open, as a frozen process's do.

Why byte-level: the server arms ``idle_in_transaction_session_timeout`` only when it
answers a ``Sync``, so whether a frozen client's locks are ever released depends on
exactly where its stream stopped (``storage/postgres/statements.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from tests.support.deadline import within

#: Untyped messages a client may send first: SSL and GSS encryption requests, then the
#: startup message (protocol 3.0).
_SSL_REQUEST, _GSS_REQUEST, _PROTOCOL_3 = 80877103, 80877104, 196608
#: Messages after which the server answers ``ReadyForQuery`` (and arms its idle timer).
_COMPLETE = {b"S", b"Q"}


@dataclass(slots=True)
class _ClientStream:
    """Where one connection's client-to-server bytes stand, message by message."""

    started: bool = False
    pending: bytearray = field(default_factory=bytearray)
    last_type: bytes = b"Q"

    def feed(self, data: bytes) -> None:
        self.pending += data
        while True:
            if not self.started:
                if len(self.pending) < 8:
                    return
                length, code = struct.unpack("!ii", self.pending[:8])
                if len(self.pending) < length:
                    return
                del self.pending[:length]
                self.started = code == _PROTOCOL_3 or code not in (_SSL_REQUEST, _GSS_REQUEST)
                continue
            if len(self.pending) < 5:
                return
            (length,) = struct.unpack("!i", self.pending[1:5])
            if len(self.pending) < 1 + length:
                return
            self.last_type = bytes(self.pending[:1])
            del self.pending[: 1 + length]

    @property
    def server_can_time_out(self) -> bool:
        """Whether the stream so far ends where the server answers and waits idle."""
        return not self.pending and self.last_type in _COMPLETE


class FreezingRelay:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self.frozen = asyncio.Event()
        #: True when the freeze left the server waiting for the rest of a pipeline.
        self.froze_mid_pipeline = False
        self._thawed = asyncio.Event()
        self._thawed.set()
        self._marker: bytes | None = None
        self._marker_seen = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> FreezingRelay:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    def arm(self, marker: bytes) -> None:
        """Freeze the client at its first stop after ``marker`` went to the server."""
        self._marker, self._marker_seen = marker, False

    def thaw(self) -> None:
        self._marker = None
        self._thawed.set()

    async def aclose(self) -> None:
        self.thaw()
        for writer in list(self._writers):
            writer.close()
        if self._server is not None:
            self._server.close()
            await within(self._server.wait_closed(), "the relay's connections to close", 10)

    def _after_write(self, stream: _ClientStream, data: bytes) -> None:
        """Decide, after one forwarded client write, whether the client stops here."""
        if self._marker is None or self.frozen.is_set():
            return
        if not self._marker_seen:
            self._marker_seen = self._marker in data
            return
        self.froze_mid_pipeline = not stream.server_can_time_out
        self._thawed.clear()
        self.frozen.set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._thawed.wait()  # a frozen process opens no connection
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))
        try:
            await asyncio.gather(self._client_to_server(reader, up_writer), self._server_to_client(up_reader, writer))
        finally:
            for w in (writer, up_writer):
                self._writers.discard(w)
                w.close()

    async def _client_to_server(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        stream = _ClientStream()
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(1 << 20):
                await self._thawed.wait()
                stream.feed(data)
                writer.write(data)
                await writer.drain()
                self._after_write(stream, data)
        writer.close()

    async def _server_to_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(1 << 20):
                await self._thawed.wait()
                writer.write(data)
                await writer.drain()
        await self._thawed.wait()
        writer.close()


@contextlib.asynccontextmanager
async def freezing_relay(host: str, port: int) -> AsyncIterator[FreezingRelay]:
    relay = await FreezingRelay(host, port).start()
    try:
        yield relay
    finally:
        await relay.aclose()
