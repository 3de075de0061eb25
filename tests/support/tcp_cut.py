"""A loopback TCP relay that can be cut: a database outage without stopping the database.

Stopping the session's PostgreSQL would take it from every other test; this relay sits
between one app and the server instead. ``cut()`` closes every relayed connection and
closes each new one as soon as it arrives (what a client sees when the server restarts
or a firewall resets it); ``refuse_new()`` only the new ones; ``restore()`` relays again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from tests.support.deadline import within


class CuttableRelay:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self.cut_off = False
        self.refused = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> CuttableRelay:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    def cut(self) -> None:
        self.cut_off = True
        for writer in list(self._writers):
            writer.close()

    def refuse_new(self) -> None:
        """Close each new connection as it arrives, and leave the relayed ones be: a
        client whose session lives on until the server ends it, and that cannot connect
        again meanwhile. ``restore()`` relays again."""
        self.cut_off = True

    def restore(self) -> None:
        self.cut_off = False

    def reset_relayed(self) -> frozenset[asyncio.StreamWriter]:
        """Close every relayed connection and go on relaying new ones: the sessions a
        database restart ends, without the seconds it refuses connections (a client that
        reconnects at once finds it back). Returns the ends closed, for ``still_open``."""
        closed = frozenset(self._writers)
        for writer in closed:
            writer.close()
        return closed

    def still_open(self, ends: frozenset[asyncio.StreamWriter]) -> int:
        """How many of ``ends`` (``reset_relayed``'s) are still relayed."""
        return len(ends & self._writers)

    @property
    def relaying(self) -> int:
        """Connections relayed now (each a client's and the server's end); after ``cut()``
        it reaches 0 once every one of them is closed on both sides."""
        return len(self._writers) // 2

    async def aclose(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            # From Python 3.12 this also waits for every accepted connection to end.
            await within(self._server.wait_closed(), "the relay's connections to close", 10)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut_off:
            self.refused += 1
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            for w in (writer, up_writer):
                self._writers.discard(w)
                w.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, asyncio.IncompleteReadError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


@contextlib.asynccontextmanager
async def cuttable_relay(host: str, port: int) -> AsyncIterator[CuttableRelay]:
    relay = await CuttableRelay(host, port).start()
    try:
        yield relay
    finally:
        await relay.aclose()
