"""uvicorn's WebSocket protocol for a service without WebSocket routes: every handshake
is refused with ``403``, as it was with uvicorn's own protocol (the app's router closes
a websocket scope it has no route for, before accepting it).

Why not ``ws="auto"``: it imports the ``websockets`` library at every start, and that,
through its version module, ``importlib.metadata`` - ~25 ms of CPU of every ``agentchat
serve`` (each restart, each ``--workers`` child, each of the hundreds the test suite
starts), for a handshake that can only be refused. Not ``ws="none"`` either: uvicorn then
serves the handshake as a plain HTTP request, with two warnings that tell the operator
to install a WebSocket library.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

#: uvicorn's own line for a refused handshake (its WebSocket protocols log it so).
_log = logging.getLogger("uvicorn.error")

_REFUSAL = b"Connection: close\r\nContent-Length: 0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"


class RefuseWebSocket(asyncio.Protocol):
    """Takes over a connection whose request asked to upgrade to a WebSocket: uvicorn's
    HTTP protocol hands it the request's head (``data_received``), and it answers 403,
    closes the connection and logs ``"WebSocket <path>" 403`` as uvicorn's would."""

    def __init__(
        self, config: Any, server_state: Any, app_state: dict[str, Any], _loop: asyncio.AbstractEventLoop | None = None
    ) -> None:
        self._transport: asyncio.Transport | None = None
        self._answered = False
        #: uvicorn's headers of every response (``date``, ``server`` when configured).
        self._default_headers: list[tuple[bytes, bytes]] = list(getattr(server_state, "default_headers", []))

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # a TCP transport (asyncio's or uvloop's)

    def data_received(self, data: bytes) -> None:
        if self._answered or self._transport is None:  # anything sent after the head is dropped
            return
        self._answered = True
        target = data.split(b"\r\n", 1)[0].split(b" ")
        path = target[1].decode("latin-1") if len(target) > 1 else "?"
        peer = self._transport.get_extra_info("peername")
        client = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else "-"
        _log.info('%s - "WebSocket %s" 403', client, path)
        head = b"".join(b"%s: %s\r\n" % (name, value) for name, value in self._default_headers)
        self._transport.write(b"HTTP/1.1 403 Forbidden\r\n" + head + _REFUSAL)
        self._transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
