"""One HTTP/1.1 client connection of ``llm.h1transport``: an asyncio protocol whose bytes
go through ``httptools.HttpResponseParser`` (llhttp, in C).

Why a protocol of our own: the answer's framing (its head, chunk sizes, the end) is parsed
in C as the bytes arrive, and a body piece is handed on as the parser cut it, uncopied;
a reader that finds nothing waits on one future, and the read timeout is one lazily
checked deadline per connection (as ``llm.netstream``'s), not a timer per read. The
errors are httpx's own, as httpcore raises them for the same events (see
``llm.h1transport``)."""

from __future__ import annotations

import asyncio
import collections
import select
from typing import Any

import httptools
import httpx

from llm.timed_protocol import TimedProtocol

#: Bytes of answer buffered before reading from the socket pauses until the reader catches up.
HIGH_WATER = 256 * 1024
#: Bytes an answer's head (with any interim answers) may take: llhttp sets no bound, and a
#: server that never ends its head would grow it for ever (h11's bound, as httpcore had it).
MAX_HEAD = 100 * 1024

Origin = tuple[str, str, int, str]


class _Spoiled(Exception):
    """Raised in a parser callback to stop parsing a connection that has failed."""


class H1Connection(TimedProtocol):
    """One HTTP/1.1 connection: its socket's bytes through the parser, one answer at a time."""

    read_timeout = httpx.ReadTimeout
    write_timeout = httpx.WriteTimeout
    write_error = httpx.WriteError

    def __init__(self, loop: asyncio.AbstractEventLoop, origin: Origin) -> None:
        super().__init__(loop)
        self.origin = origin
        self.parser = httptools.HttpResponseParser(self)
        #: The answer being read: its head, then its body's pieces as they were parsed.
        self.status = 0
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_done = False
        #: Bytes received for this answer before its head was whole (see MAX_HEAD).
        self.head_bytes = 0
        #: The answer's HTTP version as ``httpx.Response.http_version`` has it.
        self.http_version = b"HTTP/1.1"
        self.interim = False
        self.framed = False  # a Content-Length or chunked answer (else it ends with the connection)
        self.body: collections.deque[bytes] = collections.deque()
        self.buffered = 0
        self.complete = False
        self.keep_alive = False
        #: Whether a request on it said ``Connection: close`` (the server may close it any time after).
        self.must_close = False
        #: Whether a request is on this connection (bytes arriving otherwise spoil it).
        self.busy = False
        self.eof = False
        self.error: httpx.TransportError | None = None
        self.idle_since = 0.0

    # --- asyncio.Protocol --------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if not self.busy:  # an idle connection the server wrote to: never reused
            self._fail(httpx.RemoteProtocolError("the server sent bytes on an idle connection"))
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(httpx.RemoteProtocolError("the server switched protocols"))
        except httptools.HttpParserError as exc:
            self._fail(httpx.RemoteProtocolError(f"malformed HTTP answer: {exc}"))
        if not self.head_done:
            self.head_bytes += len(data)
            if self.head_bytes > MAX_HEAD:
                self._fail(httpx.RemoteProtocolError("the answer's head is too long"))

    def eof_received(self) -> bool:
        self.eof = True
        if self.head_done and not self.complete and not self.framed:
            self.complete = True  # an answer delimited by the connection's end
        self._wake()
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None and self.error is None and not self.complete:
            self.error = httpx.ReadError(str(exc) or type(exc).__name__)
        self.eof = True
        if self.head_done and not self.complete and not self.framed and self.error is None:
            self.complete = True
        self._lost()

    # --- httptools' callbacks ------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.complete:  # bytes after the answer's end, before the next request: never reused
            self._fail(httpx.RemoteProtocolError("the server sent bytes after its answer"))
            raise _Spoiled  # stops the parser: nothing of them reaches the answer read now
        self.status, self.reason, self.headers, self.framed = 0, b"", [], False

    def on_status(self, status: bytes) -> None:
        self.reason += status  # may come in pieces

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.head_done:
            # A chunked answer's trailer: not the answer's headers (httpcore drops them too),
            # though it may be parsed before the response is built from them.
            return
        self.headers.append((name, value))
        if not self.framed:
            lower = name.lower()
            self.framed = lower == b"content-length" or (
                lower == b"transfer-encoding" and b"chunked" in value.lower()
            )

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        if 100 <= self.status < 200:
            self.interim = True  # ``100 Continue`` and the like: the answer is still to come
            return
        version = self.parser.get_http_version()
        self.http_version = b"HTTP/1.1" if version == "1.1" else b"HTTP/" + version.encode("ascii")
        # 204 and 304 have no body whatever their headers say; llhttp ends them itself.
        self.framed = self.framed or self.status in (204, 304)
        self.head_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)
        self.buffered += len(body)
        if self.buffered > HIGH_WATER and not self.paused_reading and self.transport is not None:
            self.paused_reading = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self.interim:
            self.interim = False
            return
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive()
        self._wake()

    # --- reading -----------------------------------------------------------------

    def _fail(self, error: httpx.TransportError) -> None:
        if self.error is None:
            self.error = error
        if self.transport is not None:
            self.transport.close()
        self._wake()

    def take(self) -> bytes:
        data = self.body.popleft()
        self.buffered -= len(data)
        if self.paused_reading and self.buffered <= HIGH_WATER // 4 and self.transport is not None:
            self.paused_reading = False
            self.transport.resume_reading()
        return data

    def ended_early(self) -> httpx.TransportError:
        """The error for an answer the connection ended before its end."""
        if self.error is not None:
            return self.error
        if not self.head_done:
            return httpx.RemoteProtocolError("Server disconnected without sending a response.")
        if any(name.lower() == b"transfer-encoding" for name, _ in self.headers):
            return httpx.RemoteProtocolError(
                "peer closed connection without sending complete message body: incomplete chunked read"
            )
        return httpx.RemoteProtocolError("peer closed connection without sending complete message body")

    # --- the pool's view ----------------------------------------------------------

    def reusable(self) -> bool:
        transport = self.transport
        return (
            self.error is None
            and not self.eof
            and transport is not None
            and not transport.is_closing()
            and self.complete
            and self.keep_alive
            and not self.must_close
        )

    def quiet(self) -> bool:
        """Whether the idle connection's socket has nothing to read: its end (or bytes
        nobody asked for) may be in the kernel before the loop has handed it to us, and
        a request sent then would fail. One ``poll`` call, as httpcore's check does."""
        sock = self.transport.get_extra_info("socket") if self.transport is not None else None
        if sock is None:
            return True
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN)
        return not poller.poll(0)

    def reset(self) -> None:
        """Ready for the next request on this kept-alive connection (an answer closed
        after it arrived whole but before it was all read leaves its last pieces here)."""
        self.head_done = self.complete = self.keep_alive = self.interim = False
        self.status, self.reason, self.headers, self.head_bytes = 0, b"", [], 0
        self.body.clear()
        self.buffered = 0
        if self.paused_reading and self.transport is not None:
            # The unread pieces paused reading (past HIGH_WATER) and are dropped: the next
            # answer must be read, or its request would wait for it forever.
            self.paused_reading = False
            self.transport.resume_reading()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def get_extra_info(self, info: str) -> Any:
        """As httpcore's network streams answer it (``response.extensions["network_stream"]``)."""
        transport = self.transport
        if transport is None:
            return None
        if info == "ssl_object":
            return transport.get_extra_info("ssl_object")
        if info == "client_addr":
            return transport.get_extra_info("sockname")
        if info == "server_addr":
            return transport.get_extra_info("peername")
        if info == "socket":
            return transport.get_extra_info("socket")
        if info == "is_readable":
            return self.eof or self.error is not None or transport.is_closing()
        return None
