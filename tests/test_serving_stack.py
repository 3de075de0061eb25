"""The serving stack (``app/cli/serving.py``): uvloop + httptools when installed, asyncio +
h11 otherwise or with ``AGENT_SERVER_STACK=portable`` — and the same guards on both
parsers: a deadline for a request's headers (408, closed), at most 16 KiB of headers
(400), keep-alive requests served as before, a stream written event by event. Each
guarded protocol is served for real on a loopback socket."""

from __future__ import annotations

import asyncio
import importlib.util
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import uvicorn

from app.cli.serving import MAX_HEADER_BYTES, Stack, choose_stack, http_protocol, run, uvicorn_config
from app.config import Settings
from tests.support.deadline import until
from tests.support.server import stopped

FAST = importlib.util.find_spec("uvloop") is not None and importlib.util.find_spec("httptools") is not None
STACKS = [Stack("asyncio", "h11"), pytest.param(Stack("uvloop", "httptools"), marks=pytest.mark.skipif(
    not FAST, reason="uvloop / httptools not installed"))]


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """``/stream``: three SSE events, each its own write; anything else: ``ok``."""
    assert scope["type"] == "http"
    if scope["path"] == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        for i in range(1, 4):
            await send({"type": "http.response.body", "body": b"id: %d\ndata: {}\n\n" % i, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@asynccontextmanager
async def served(stack: Stack, header_timeout_s: float = 0.3) -> AsyncIterator[int]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn_config(app, host="127.0.0.1", port=0, header_timeout_s=header_timeout_s, stack=stack,
                            lifespan="off", log_level="warning")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await until(lambda: server.started or task.done(), "uvicorn to start")
        assert not task.done(), "uvicorn exited before starting"
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        try:
            await stopped(task, sock.getsockname()[1])
        finally:
            sock.close()


def test_auto_picks_uvloop_and_httptools_when_installed_and_portable_picks_neither() -> None:
    auto = choose_stack(Settings.from_env({}).server_stack)
    assert (auto.loop, auto.http) == (("uvloop", "httptools") if FAST else (auto.loop, auto.http))
    portable = choose_stack(Settings.from_env({"AGENT_SERVER_STACK": "portable"}).server_stack)
    assert (portable.loop, portable.http) == ("asyncio", "h11") and "portable" in portable.describe()
    # The outbound pools follow the same setting: httpx's own HTTP/1.1 when portable.
    assert "outbound httpcore" in portable.describe() and "outbound httptools" in auto.describe()
    assert Settings.from_env({"AGENT_SERVER_STACK": "portable"}).outbound_http1 == portable.outbound == "httpcore"
    assert Settings.from_env({}).outbound_http1 == auto.outbound == "httptools"
    assert http_protocol(portable).__name__ == "GuardedH11Protocol"
    with pytest.raises(ValueError, match="AGENT_SERVER_STACK"):
        Settings.from_env({"AGENT_SERVER_STACK": "fastest"})


@pytest.mark.parametrize("stack", STACKS, ids=lambda s: s.http)
def test_run_uses_the_stacks_event_loop(stack: Stack) -> None:
    async def loop_module() -> str:
        return type(asyncio.get_running_loop()).__module__

    assert run(loop_module(), stack).startswith("uvloop" if stack.loop == "uvloop" else "asyncio")


@pytest.mark.parametrize("stack", STACKS, ids=lambda s: s.http)
async def test_both_parsers_guard_headers_and_serve_keep_alive_and_streams(stack: Stack) -> None:
    async with served(stack) as port:
        # Silent and trickled headers: 408, then closed.
        silent_r, silent_w = await asyncio.open_connection("127.0.0.1", port)
        trickle_r, trickle_w = await asyncio.open_connection("127.0.0.1", port)
        trickle_w.write(b"GET / HTTP/1.1\r\nHost: x\r\n")
        # Unfinished headers past the limit: 400 (h11's answer), not an ever-growing buffer.
        big_r, big_w = await asyncio.open_connection("127.0.0.1", port)
        big_w.write(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (MAX_HEADER_BYTES + 10))
        async with asyncio.timeout(10):
            silent, trickled, big = await asyncio.gather(silent_r.read(), trickle_r.read(), big_r.read())
        for w in (silent_w, trickle_w, big_w):
            w.close()
        assert silent.startswith(b"HTTP/1.1 408 ") and trickled.startswith(b"HTTP/1.1 408 ")
        assert big.startswith(b"HTTP/1.1 400 ")
        # Well-behaved clients: keep-alive, headers just under the limit, a stream in order.
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            for _ in range(2):
                assert (await http.get("/", headers={"X-Pad": "a" * (MAX_HEADER_BYTES // 2)})).text == "ok"
            ids = []
            async with http.stream("GET", "/stream") as response:
                async for line in response.aiter_lines():
                    if line.startswith("id: "):
                        ids.append(int(line[4:]))
            assert ids == [1, 2, 3]


@pytest.mark.parametrize("stack", STACKS, ids=lambda s: s.http)
async def test_a_websocket_handshake_is_refused_with_403_and_the_app_never_sees_it(stack: Stack) -> None:
    """The agent has no WebSocket route: a handshake gets 403 and a closed connection, as
    with uvicorn's own WebSocket protocol (the router closed the websocket scope) -
    answered by ``app/cli/no_websockets.py``, so that no start imports a WebSocket
    library (``app`` here accepts only http scopes)."""
    handshake = (b"GET /v1/agent/chat?x=1 HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")  # fmt: skip
    async with served(stack) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(handshake)
        async with asyncio.timeout(10):
            answer = await reader.read()  # to the end: the connection is closed
        writer.close()
        head = answer.split(b"\r\n\r\n", 1)[0].lower().split(b"\r\n")
        assert head[0] == b"http/1.1 403 forbidden", answer
        assert b"content-length: 0" in head and b"connection: close" in head
        assert any(line.startswith(b"date: ") for line in head)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            assert (await http.get("/")).text == "ok"  # the server serves on


def test_the_server_keeps_an_idle_connection_longer_than_its_clients_and_proxies() -> None:
    """The side that closes an idle keep-alive connection must be the client: uvicorn's
    5 s, equal to httpx's expiry, let a request go out on a connection the server was
    closing ("Server disconnected without sending a response", test_workers_feed under
    load). Longer than httpx's and undici's expiry and than nginx's and AWS ALB's 60 s."""
    config = uvicorn_config(app, host="127.0.0.1", port=0, header_timeout_s=10)
    clients_and_proxies_s = [httpx.Limits().keepalive_expiry or 0.0, 4.0, 60.0]
    assert config.timeout_keep_alive > max(clients_and_proxies_s)
