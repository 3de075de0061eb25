"""The SSE response of every streaming route: pre-encoded frame bytes written straight to ``send``.

Why we own it: ``sse_starlette.EventSourceResponse`` ran an anyio task group of three to
four tasks per response (stream, ping, exit watcher, disconnect listener), a send lock and
a timeout scope per event, and patched ``uvicorn.Server.handle_exit`` at import time. Our
frames are already bytes (encoded once per event, shared by every follower) and our pings
ride in the stream's own heartbeat, so all of that was per-token overhead. Here a response
is the request's own task plus one listener on ``receive``:

* the client leaves (``http.disconnect``): the stream is cancelled at once, so the
  follower's ``finally`` releases it (uvicorn drops writes to a closed socket silently, so
  waiting for a failed ``send`` would hold the follower until the next event);
* the server stops (uvicorn's ``should_exit``: after the drain of ``app/cli/serving.py``,
  or a second signal): every live stream is cancelled within ``POLL_S`` and its response
  left incomplete, as sse-starlette did, so clients see an interrupted stream and resume
  with ``Last-Event-ID`` from the next process rather than a clean end.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import AsyncGenerator, Callable, Mapping

from prometheus_client import Gauge
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from app.ops.log_context import DIRECT_SEND, DirectSend

#: How often the stop watcher looks at uvicorn's ``should_exit`` (sse-starlette's interval).
POLL_S = 0.5
BASE_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
)
TAIL_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"connection", b"keep-alive"),
    (b"content-type", b"text/event-stream; charset=utf-8"),
)


def uvicorn_exiting() -> bool:
    """True once the serving uvicorn ``Server`` was told to exit. uvicorn gives an app no
    hook for that; its SIGTERM handler is a bound method of the server (sse-starlette's
    fallback, kept because ``DrainingServer`` sets ``should_exit`` only after its drain).

    Only a server in the main thread installs that handler, so an app served from another
    thread never asks it: the handler found there is some other server's. Before, an app
    served in a thread (an embedding program, the schemathesis suite's live server) had
    every open stream cut within ``POLL_S`` when a server in the main thread stopped - or
    ever after, when one left its handler behind with ``should_exit`` set."""
    if threading.current_thread() is not threading.main_thread():
        return False
    server = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)
    return bool(getattr(server, "should_exit", False))


class LiveStreams:
    """The app's open SSE responses (built per app in ``Services``): ends them all when the
    server stops; one poller runs only while a stream is open."""

    def __init__(self, exiting: Callable[[], bool] = uvicorn_exiting) -> None:
        self._exiting = exiting
        self._ends: set[Callable[[], None]] = set()
        self._watcher: asyncio.Task[None] | None = None
        self._stopped = False

    @property
    def stopping(self) -> bool:
        """The server is stopping: a stream closing now leaves its run alone."""
        if not self._stopped and self._exiting():
            self._stopped = True
        return self._stopped

    def stop(self) -> None:
        """End every open stream now, and each one opened after, incomplete (clients resume
        with ``Last-Event-ID`` elsewhere): what a server that runs this app calls as it
        stops. uvicorn in the main thread (``agentchat serve``) is seen without it
        (``uvicorn_exiting``); a server run in another thread (a program embedding the app,
        the test suite's servers) has no other way to say it. Call it on the app's event
        loop (from another thread: ``loop.call_soon_threadsafe(streams.stop)``): it
        cancels the streams' tasks."""
        self._stopped = True
        for end in list(self._ends):
            end()

    def add(self, end: Callable[[], None]) -> None:
        self._ends.add(end)
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.get_running_loop().create_task(self._watch(), name="sse-stop-watcher")

    def discard(self, end: Callable[[], None]) -> None:
        self._ends.discard(end)

    async def _watch(self) -> None:
        while self._ends:
            if self.stopping:
                for end in list(self._ends):
                    end()
                return
            await asyncio.sleep(POLL_S)


class SSEResponse(Response):
    """``text/event-stream`` of ``frames`` (complete SSE frames as bytes), unbuffered
    through proxies; HEAD gets the headers only (the stream never starts). A ``Response``
    for the routes' types and ``.headers``; ``Response.__init__`` (a body) is not used.

    Per frame, nothing but the frame's own ``send``: ``open_streams`` (a gauge counted
    while the body is written) is kept here rather than by a generator around
    ``frames``, and the body goes through the request's :class:`DirectSend` when
    ``AccessLog`` set one (the start message always takes the middleware's way)."""

    media_type = "text/event-stream"

    def __init__(
        self,
        frames: AsyncGenerator[bytes, None],
        live: LiveStreams,
        headers: Mapping[str, str] | None = None,
        open_streams: Gauge | None = None,
    ) -> None:
        self.frames, self.live, self.open_streams = frames, live, open_streams
        self.status_code, self.background = 200, None
        extra = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
        names = {k for k, _ in extra}
        self.raw_headers = [h for h in BASE_HEADERS if h[0] not in names] + extra + list(TAIL_HEADERS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        if scope.get("method") == "HEAD":
            await self.frames.aclose()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        task = asyncio.current_task()
        assert task is not None
        ended: list[str] = []

        def end(why: str = "stopping") -> None:
            if not ended:
                ended.append(why)
                task.cancel()

        direct = scope.get(DIRECT_SEND)
        body_send = direct.send if isinstance(direct, DirectSend) else send
        sent = 0
        listener = asyncio.get_running_loop().create_task(_until_disconnect(receive, end))
        self.live.add(end)
        if self.open_streams is not None:
            self.open_streams.inc()
        try:
            async with contextlib.aclosing(self.frames):
                async for frame in self.frames:
                    await body_send({"type": "http.response.body", "body": frame, "more_body": True})
                    sent += len(frame)
            ended.append("done")
            await body_send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            # Ours (disconnect or stop) ends this response only; anyone else's propagates.
            if not ended or ended[0] == "done" or task.uncancel() > 0:
                raise
        finally:
            if self.open_streams is not None:
                self.open_streams.dec()
            if isinstance(direct, DirectSend) and body_send is direct.send:
                direct.sent += sent
            self.live.discard(end)
            listener.cancel()


async def _until_disconnect(receive: Receive, end: Callable[[str], None]) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    end("disconnect")
