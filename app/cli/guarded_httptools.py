"""uvicorn's httptools protocol with the guards the h11 one has (``app.cli.serving``).

httptools (llhttp, in C) parses a request for a fraction of h11's CPU; the serving stack
uses it whenever it is installed. The guards are the same on both parsers:

- a deadline for each request's headers (``HeaderDeadline``: ``408`` and close);
- at most ``MAX_HEADER_BYTES`` buffered for a request's line and headers while they are
  incomplete: h11 refuses more (``h11_max_incomplete_event_size``), llhttp has no such
  limit, so the bytes are counted here and the request gets uvicorn's own ``400`` answer
  to an unparsable request, as on h11.

Imported only when httptools is importable (``app.cli.serving.http_protocol``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.cli.header_guard import MAX_HEADER_BYTES, HeaderDeadline


class GuardedHttpToolsProtocol(HeaderDeadline, HttpToolsProtocol):
    def __init__(self, config: uvicorn.Config, server_state: Any, app_state: dict[str, Any], _loop: Any = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._init_deadline(config)
        # True from the connection (or a request's first byte) until its headers are in.
        self._in_headers = True
        self._header_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._in_headers and not self.transport.is_closing():
            self._header_bytes += len(data)
            if self._header_bytes > MAX_HEADER_BYTES:
                self._disarm_header_timer()
                self.send_400_response("Invalid HTTP request received.")  # what h11 answers here
                return
        self._after_read()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def _awaiting_headers(self) -> bool:
        return self._in_headers

    # --- parser callbacks ------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._in_headers = True
        self._header_bytes = 0
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._in_headers = False
        super().on_headers_complete()
