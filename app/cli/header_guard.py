"""The guards of every request's head, on both of uvicorn's parsers: a deadline for a
request's headers (``HeaderDeadline``) and, on h11, the cap on unfinished headers
(uvicorn's ``h11_max_incomplete_event_size``). ``GuardedH11Protocol`` is the portable
stack's protocol; ``app/cli/guarded_httptools.py`` the fast stack's.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("agentchat.serving")

#: How long an idle keep-alive connection is kept. Longer than any client or proxy in
#: front keeps one idle (httpx 5 s, Node's undici 4 s, nginx's upstream 60 s, AWS ALB
#: 60 s): the side that closes an idle connection must be the client, or a request it
#: sends just as the server closes fails with "Server disconnected without sending a
#: response" — which uvicorn's 5 s, equal to httpx's expiry, did in our own suite. 75 s
#: is nginx's own default; an idle connection costs a file descriptor and no task.
KEEP_ALIVE_S = 75
MAX_HEADER_BYTES = 16 * 1024
DEFAULT_HEADER_TIMEOUT_S = 10.0


class HeaderDeadline:
    """A deadline for a request's headers, for uvicorn's protocols (h11 and httptools).

    uvicorn times out idle keep-alive connections, but a connection that sends nothing,
    or trickles its request line and headers a byte at a time, is held forever. Here the
    headers of every request must be complete within ``header_timeout_s`` of its first
    byte (or of the connection); else the client gets ``408`` and the connection is
    closed, with one INFO line. Bodies have their own deadline (``read_json_body``).
    A protocol says when it awaits headers (``_awaiting_headers``) and arms the timer on
    connection and after every read.
    """

    header_timeout_s: float
    _header_timer: asyncio.TimerHandle | None
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    timeout_keep_alive_task: asyncio.TimerHandle | None
    client: tuple[str, int] | None

    def _init_deadline(self, config: uvicorn.Config) -> None:
        self.header_timeout_s = float(getattr(config, "header_timeout_s", DEFAULT_HEADER_TIMEOUT_S))
        self._header_timer = None

    def _awaiting_headers(self) -> bool:
        raise NotImplementedError

    def _after_read(self) -> None:
        if self._awaiting_headers():
            self._arm_header_timer()
        else:
            self._disarm_header_timer()

    def _arm_header_timer(self) -> None:
        if self._header_timer is None and self.header_timeout_s > 0:
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_timed_out)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_timed_out(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or not self._awaiting_headers():
            return
        if self.timeout_keep_alive_task is not None:
            return  # an idle keep-alive connection: uvicorn's own timer closes it
        peer = self.client[0] if self.client else "unknown"
        log.info("request headers too slow; closing", extra={"client": peer, "timeout_s": self.header_timeout_s})
        self.transport.write(
            b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
            b"connection: close\r\ncontent-length: 36\r\n\r\nthe request headers arrived too late"
        )
        self.transport.close()


class GuardedH11Protocol(HeaderDeadline, H11Protocol):
    """uvicorn's h11 protocol with the header deadline (the portable stack)."""

    def __init__(self, config: uvicorn.Config, server_state: Any, app_state: dict[str, Any], _loop: Any = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._init_deadline(config)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._after_read()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def _awaiting_headers(self) -> bool:
        return self.conn.their_state is h11.IDLE and self.conn.our_state is h11.IDLE
