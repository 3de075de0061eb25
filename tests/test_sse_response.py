"""app/server/sse_response.py over a real uvicorn server: frames written verbatim with the
SSE headers, the follower released as soon as the client leaves (even while idle), every
live stream ended (incomplete, so clients resume) when the server stops, HEAD without a stream."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import AsyncGenerator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route

from app.server.sse_response import LiveStreams, SSEResponse, uvicorn_exiting
from tests.support.deadline import until
from tests.support.server import serve_app

FRAMES = [b"retry: 1000\nid: 1\nevent: a\ndata: {}\n\n", b'id: 2\nevent: b\ndata: {"x":1}\n\n']


class Source:
    """Yields ``FRAMES`` and then, unless ``finite``, waits forever (an idle follower);
    records whether it started and when its ``finally`` ran."""

    def __init__(self, *, finite: bool) -> None:
        self.finite = finite
        self.started = False
        self.closed = asyncio.Event()

    async def frames(self) -> AsyncGenerator[bytes, None]:
        self.started = True
        try:
            for frame in FRAMES:
                yield frame
            if not self.finite:
                await asyncio.Event().wait()
        finally:
            self.closed.set()


def app_for(source: Source, live: LiveStreams) -> Starlette:
    async def stream(request: Request) -> SSEResponse:
        return SSEResponse(source.frames(), live, {"X-Run-Id": "run_1"})

    return Starlette(routes=[Route("/s", stream, methods=["GET", "POST"])])


@pytest.mark.asyncio
async def test_frames_verbatim_with_sse_headers_and_a_clean_end() -> None:
    source = Source(finite=True)
    async with serve_app(app_for(source, LiveStreams()), lifespan="off") as url, httpx.AsyncClient() as client:
        resp = await client.post(f"{url}/s")
    assert resp.status_code == 200
    assert resp.content == b"".join(FRAMES)
    assert resp.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert resp.headers["cache-control"] == "no-cache"
    assert resp.headers["x-accel-buffering"] == "no"
    assert resp.headers["x-run-id"] == "run_1"
    assert source.closed.is_set()


@pytest.mark.asyncio
async def test_client_leaving_an_idle_stream_releases_the_follower() -> None:
    source, live = Source(finite=False), LiveStreams()
    async with serve_app(app_for(source, live), lifespan="off") as url, httpx.AsyncClient() as client:
        async with client.stream("POST", f"{url}/s") as resp:
            got = b""
            async for chunk in resp.aiter_bytes():
                got += chunk
                if got == b"".join(FRAMES):
                    break
        # The stream is idle (no frame will come): only the disconnect can end it.
        await asyncio.wait_for(source.closed.wait(), 10)
        await until(lambda: not live._ends, "the response to leave the registry")


@pytest.mark.asyncio
async def test_server_stopping_ends_live_streams_incomplete() -> None:
    source, stopping = Source(finite=False), asyncio.Event()
    live = LiveStreams(exiting=stopping.is_set)
    async with serve_app(app_for(source, live), lifespan="off") as url, httpx.AsyncClient() as client:
        async with client.stream("POST", f"{url}/s") as resp:
            it = resp.aiter_bytes()
            got = b""
            while got != b"".join(FRAMES):
                got += await anext(it)
            assert not live.stopping
            stopping.set()
            # No terminating chunk: the client sees an interrupted stream, not a finished one.
            with pytest.raises(httpx.RemoteProtocolError):
                async for _ in it:
                    pass
        assert source.closed.is_set()
        assert live.stopping


@pytest.mark.asyncio
async def test_head_answers_the_headers_without_starting_the_stream() -> None:
    source = Source(finite=False)
    async with serve_app(app_for(source, LiveStreams()), lifespan="off") as url, httpx.AsyncClient() as client:
        resp = await client.head(f"{url}/s")
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert not source.started


class SendSpy:
    """A middleware that wraps ``send`` as Starlette's own layers do; records what passed."""

    def __init__(self, app, seen: list[str]) -> None:  # type: ignore[no-untyped-def]
        self.app, self.seen = app, seen

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        async def spied(message) -> None:  # type: ignore[no-untyped-def]
            self.seen.append(message["type"])
            await send(message)

        await self.app(scope, receive, spied)


@pytest.mark.asyncio
@pytest.mark.parametrize("access_log", [True, False])
async def test_body_frames_skip_the_middleware_between_the_access_log_and_the_route(
    access_log: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Behind ``AccessLog`` the frames are written past the wrappers below it (which only
    look at the start message, and the start message still reaches them) and counted in
    the access line; without it, every frame goes the ordinary way."""
    import logging

    from starlette.middleware import Middleware

    from app.ops.log_context import AccessLog

    seen: list[str] = []
    source = Source(finite=True)

    async def stream(request: Request) -> SSEResponse:
        return SSEResponse(source.frames(), LiveStreams(), {"X-Run-Id": "run_1"})

    middleware = ([Middleware(AccessLog)] if access_log else []) + [Middleware(SendSpy, seen=seen)]
    app = Starlette(routes=[Route("/s", stream, methods=["GET"])], middleware=middleware)
    with caplog.at_level(logging.INFO, logger="agentchat.access"):
        async with serve_app(app, lifespan="off") as url, httpx.AsyncClient() as client:
            resp = await client.get(f"{url}/s")
            assert resp.content == b"".join(FRAMES) and resp.headers["x-run-id"] == "run_1"
            for _ in range(1000):  # the line is written as the response's handler returns
                if not access_log or any(r.name == "agentchat.access" for r in caplog.records):
                    break
                await asyncio.sleep(0.01)
    if access_log:
        assert seen == ["http.response.start"]
        line = next(r for r in caplog.records if r.name == "agentchat.access")
        assert line.bytes == len(b"".join(FRAMES)) and line.status == 200  # type: ignore[attr-defined]
    else:
        assert seen == ["http.response.start"] + ["http.response.body"] * (len(FRAMES) + 1)


class _StoppedServer:
    """What uvicorn installs as the SIGTERM handler while it serves in the main thread: a
    bound method of a server, here one told to exit."""

    should_exit = True

    def handle_exit(self, sig: int, frame: object) -> None:
        pass


def test_a_server_stopping_in_the_main_thread_ends_no_stream_of_an_app_served_in_another() -> None:
    """The schemathesis suite serves the app from a thread; the project's CI on 1827cfe saw
    its knowledge chat cut mid-body (``IncompleteRead``) while a server of the main thread
    said ``should_exit`` through the SIGTERM handler it installed: only the main thread's
    own streams may read that handler."""
    stopped = _StoppedServer()
    previous = signal.signal(signal.SIGTERM, stopped.handle_exit)
    try:
        assert uvicorn_exiting()  # the main thread's server is stopping
        seen: list[bool] = []
        worker = threading.Thread(target=lambda: seen.append(LiveStreams().stopping))
        worker.start()
        worker.join(10)
        assert seen == [False]
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.asyncio
async def test_test_servers_leave_the_processs_sigterm_handler_as_they_found_it() -> None:
    """Two servers stopped in the order they started (a test's replicas): uvicorn restored
    the first one's handler as the second one's 'previous', and it stayed installed."""
    before = signal.getsignal(signal.SIGTERM)
    first = serve_app(app_for(Source(finite=True), LiveStreams()), lifespan="off")
    second = serve_app(app_for(Source(finite=True), LiveStreams()), lifespan="off")
    await first.__aenter__()
    await second.__aenter__()
    await first.__aexit__(None, None, None)
    await second.__aexit__(None, None, None)
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.asyncio
async def test_stop_ends_the_open_streams_incomplete_and_each_one_opened_after() -> None:
    """``LiveStreams.stop``: how a server that runs the app off the main thread (a program
    embedding it, the suite's servers) says it stops, which ``uvicorn_exiting`` cannot see."""
    source, later, live = Source(finite=False), Source(finite=False), LiveStreams(exiting=lambda: False)
    sources = iter([source, later])

    async def stream(request: Request) -> SSEResponse:
        return SSEResponse(next(sources).frames(), live)

    app = Starlette(routes=[Route("/s", stream, methods=["GET"])])
    async with serve_app(app, lifespan="off") as url, httpx.AsyncClient() as client:
        async with client.stream("GET", f"{url}/s") as resp:
            it = resp.aiter_bytes()
            got = b""
            while got != b"".join(FRAMES):
                got += await anext(it)
            live.stop()
            with pytest.raises(httpx.RemoteProtocolError):  # no terminating chunk: resume elsewhere
                async for _ in it:
                    pass
        assert source.closed.is_set() and live.stopping
        with pytest.raises(httpx.RemoteProtocolError):
            async with client.stream("GET", f"{url}/s") as resp:
                async for _ in resp.aiter_bytes():
                    pass
        await asyncio.wait_for(later.closed.wait(), 10)
