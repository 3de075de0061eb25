"""The SDK's stdio transport, with the end of the server's output reported at once.

Apart from ``McpConnection`` (``agenttools.mcp.client``) because it is a transport
concern, not a supervision one: it wraps the SDK's read stream so that the moment a
stdio server's process exits or its pipe breaks becomes a call the supervisor can act on,
and knows nothing of tools, states or reconnects.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
from mcp import StdioServerParameters
from mcp.client.stdio import stdio_client


@contextlib.asynccontextmanager
async def watched_stdio(params: StdioServerParameters, on_end: Callable[[], None]) -> AsyncIterator[Any]:
    """The SDK's stdio transport, with the end of the server's output reported at once.

    The SDK ends its read stream when the process exits (its stdout closes) or a write
    to its stdin breaks; the session then fails only the requests in flight. An idle
    server's death would go unnoticed until the next probe, so the read stream is wrapped
    to call ``on_end`` the moment it ends."""
    async with stdio_client(params) as (read_stream, write_stream):
        yield _EndSignallingStream(read_stream, on_end), write_stream


class _EndSignallingStream:
    """A receive stream that calls ``on_end`` when it reaches its end (not when closed by us)."""

    def __init__(self, inner: Any, on_end: Callable[[], None]) -> None:
        self._inner = inner
        self._on_end = on_end

    async def __aenter__(self) -> _EndSignallingStream:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> Any:
        return await self._inner.__aexit__(*exc_info)

    def __aiter__(self) -> _EndSignallingStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._inner.__anext__()
        except StopAsyncIteration:
            self._on_end()
            raise

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except anyio.EndOfStream:
            self._on_end()
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


__all__ = ["watched_stdio"]
