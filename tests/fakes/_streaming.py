"""A raw ASGI streaming response that notices a client leaving early.

Starlette's ``StreamingResponse`` hides whether the client went away; the fakes need
to *know* (tests assert that providers close their HTTP stream when the consumer
stops), and need to be able to cut a connection without finishing the body.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send


class DropConnection(Exception):
    """Raised by a chunk producer to end the response without completing the body."""


class ObservedStream:
    """ASGI app streaming ``chunks``; calls ``on_closed_early`` if the client leaves first.

    The producer and a disconnect listener run side by side: a client that closes its
    end while the producer is blocked (a ``Hold``) is seen at once, not at the next write.
    Raising ``DropConnection`` from the producer returns without the final empty body
    message, so uvicorn closes the socket mid-body and the client sees a truncated stream.
    """

    def __init__(
        self,
        chunks: AsyncIterator[bytes],
        *,
        media_type: str,
        on_closed_early: Callable[[], None],
        status_code: int = 200,
    ) -> None:
        self._chunks = chunks
        self._media_type = media_type
        self._on_closed_early = on_closed_early
        self._status_code = status_code

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        disconnected = asyncio.Event()

        async def listen() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    disconnected.set()
                    return

        async def produce() -> bool:
            """Stream everything; True when the body was completed, False when dropped."""
            await send(
                {
                    "type": "http.response.start",
                    "status": self._status_code,
                    "headers": [(b"content-type", self._media_type.encode())],
                }
            )
            try:
                async for chunk in self._chunks:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            except DropConnection:
                return False
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return True

        listener = asyncio.create_task(listen())
        producer = asyncio.create_task(produce())
        try:
            await asyncio.wait({listener, producer}, return_when=asyncio.FIRST_COMPLETED)
            if not producer.done():
                producer.cancel()
                with contextlib.suppress(asyncio.CancelledError, OSError):
                    await producer
                self._on_closed_early()
                return
            try:
                producer.result()
            except OSError:  # the server refused a write: the client is gone
                self._on_closed_early()
        finally:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener
            with contextlib.suppress(Exception):
                await self._chunks.aclose()  # type: ignore[attr-defined]


def header_dict(raw: list[tuple[bytes, bytes]] | Any) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw}


class AsgiResponse(Response):
    """Lets a Starlette request/response endpoint hand the connection to a raw ASGI app."""

    def __init__(self, app: ObservedStream) -> None:
        self._app = app
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)
