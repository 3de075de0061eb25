"""The model pool's HTTP/1.1 transport (``llm/h1transport.py``): httptools' parser on asyncio
protocols behind the ``httpx.AsyncBaseTransport`` contract. Each case runs against a real
loopback server; where httpx's own transport defines the behaviour (the error a dropped
or malformed answer raises, the timeouts), the case runs on both and expects the same."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvloop

from llm.h1connection import HIGH_WATER
from llm.h1transport import H1Transport
from llm.pool import pooled_transport
from tests.support.deadline import until, within
from tests.test_netstream import CHUNKED_HEAD, _tls_pair, chunk, read_request, server

Factory = Callable[..., httpx.AsyncBaseTransport]
BOTH: list[Factory] = [H1Transport, httpx.AsyncHTTPTransport]


def _id(factory: Factory) -> str:
    return "h1" if factory is H1Transport else "httpx"


async def test_a_streamed_answer_arrives_piece_by_piece_in_order() -> None:
    """Each line is written only after the client read the one before it: a read answers
    with what arrived, never waits for more; the connection is kept for the next request."""
    got: list[str] = []
    line_read = asyncio.Event()
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        for _ in range(2):
            await read_request(reader)
            writer.write(CHUNKED_HEAD)
            for i in range(20):
                writer.write(chunk(b'{"n":%d}\n' % i))
                await writer.drain()
                await line_read.wait()
                line_read.clear()
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    transport = H1Transport()
    async with server(handler) as port, httpx.AsyncClient(transport=transport, timeout=30) as client:
        for _ in range(2):
            async with client.stream("POST", f"http://127.0.0.1:{port}/api/chat", content=b"{}") as response:
                assert response.status_code == 200 and response.http_version == "HTTP/1.1"
                assert response.headers["content-type"] == "application/x-ndjson"
                async for line in response.aiter_lines():
                    got.append(line)
                    line_read.set()
        assert connections == 1 and transport.connections == 1
    assert got == [f'{{"n":{i}}}' for i in range(20)] * 2


async def test_request_bodies_with_a_length_and_chunked_arrive_whole() -> None:
    """A body of known length goes with ``Content-Length``; one from an async stream with
    ``Transfer-Encoding: chunked``, framed; the server's echo of each is the body sent."""
    big = bytes(range(256)) * 4096  # 1 MiB: past the join-with-the-head size

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return
            lines = head.lower().split(b"\r\n")
            length = next((int(x.split(b":")[1]) for x in lines if x.startswith(b"content-length:")), None)
            if length is not None:
                body = await reader.readexactly(length)
            else:
                assert b"transfer-encoding: chunked" in lines
                body = b""
                while size := int((await reader.readuntil(b"\r\n"))[:-2], 16):
                    body += (await reader.readexactly(size + 2))[:-2]
                await reader.readexactly(2)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()

    async def parts() -> AsyncIterator[bytes]:
        for i in range(5):
            yield b"part%d;" % i
        yield b""

    async def parts_of(pieces: list[bytes]) -> AsyncIterator[bytes]:
        for piece in pieces:
            yield piece

    async with server(handler) as port, httpx.AsyncClient(transport=H1Transport(), timeout=30) as client:
        url = f"http://127.0.0.1:{port}/"
        assert (await client.post(url, content=b"small")).content == b"small"
        assert (await client.post(url, content=big)).content == big
        assert (await client.post(url, content=parts())).content == b"part0;part1;part2;part3;part4;"
        assert (await client.post(url, json={"a": 1})).json() == {"a": 1}
        # A streamed body read into memory before the send (``Request.aread``: an auth
        # flow that needs the body does it) keeps its chunked framing.
        request = client.build_request("POST", url, content=parts())
        await request.aread()
        assert (await client.send(request)).content == b"part0;part1;part2;part3;part4;"
        empty = client.build_request("POST", url, content=parts_of([]))
        await empty.aread()
        assert (await client.send(empty)).content == b""


async def test_a_large_answer_is_read_whole_with_reading_paused_and_resumed() -> None:
    body = bytes(range(256)) * 8192  # 2 MiB: past the buffer's high-water mark

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body))
        writer.write(body)
        await writer.drain()

    async with (
        server(handler) as port,
        httpx.AsyncClient(transport=H1Transport(), timeout=10) as client,
        client.stream("GET", f"http://127.0.0.1:{port}/") as response,
    ):
        await asyncio.sleep(0)  # let the socket fill the buffer before reading
        got = b"".join([piece async for piece in response.aiter_raw()])
    assert got == body


async def test_an_answer_delimited_by_the_connections_end_and_interim_answers() -> None:
    """No length and no chunks: the body ends with the connection (which is not reused).
    A ``100 Continue`` before the answer is skipped. 204 has no body."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        path = (await read_request(reader)).split(b" ")[1]
        if path == b"/close":
            writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil the end")
        elif path == b"/interim":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\nok")
        else:
            writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        await writer.drain()
        writer.close()

    transport = H1Transport()
    async with server(handler) as port, httpx.AsyncClient(transport=transport, timeout=10) as client:
        closed = await client.get(f"http://127.0.0.1:{port}/close")
        assert (closed.status_code, closed.text) == (200, "until the end")
        interim = await client.get(f"http://127.0.0.1:{port}/interim")
        assert (interim.status_code, interim.text, interim.reason_phrase) == (201, "ok", "Created")
        empty = await client.get(f"http://127.0.0.1:{port}/empty")
        assert (empty.status_code, empty.content) == (204, b"")


async def test_head_requests_go_through_httpx_transport() -> None:
    """A HEAD answer's length describes a body that never comes: httpx's transport reads it."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n")
        await writer.drain()

    async with server(handler) as port, httpx.AsyncClient(transport=H1Transport(), timeout=10) as client:
        response = await within(client.head(f"http://127.0.0.1:{port}/"), "the HEAD answer")
    assert response.status_code == 200 and response.headers["content-length"] == "1000" and response.content == b""


async def test_keepalive_reuses_a_connection_and_retires_one_the_server_closed_or_wrote_to() -> None:
    connections = 0
    closed_by_server = asyncio.Event()
    wrote_idle = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        first = connections == 1
        for _ in range(2):  # two requests per connection
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()
        if first:  # then the first connection is closed by the server
            writer.close()
            await writer.wait_closed()
            closed_by_server.set()
        else:  # the second gets bytes nobody asked for
            writer.write(b"HTTP/1.1 200 OK\r\n")
            await writer.drain()
            wrote_idle.set()
            await reader.read()

    transport = H1Transport()
    async with server(handler) as port, httpx.AsyncClient(transport=transport, timeout=10) as client:
        url = f"http://127.0.0.1:{port}/"
        assert [(await client.get(url)).text for _ in range(2)] == ["ok", "ok"]
        assert connections == 1
        await within(closed_by_server.wait(), "the server to close the idle connection")
        assert [(await client.get(url)).text for _ in range(2)] == ["ok", "ok"]
        assert connections == 2
        await within(wrote_idle.wait(), "the server to write on the idle connection")
        assert (await client.get(url)).text == "ok"
        assert connections == 3 and transport.connections == 1


async def test_bytes_after_an_answer_never_reach_it_nor_the_next_request() -> None:
    """Bytes the server sends after the answer's end, in the same segment (a second
    answer nobody asked for): the answer is what its length says, and the connection is
    not reused (the next request would read them as its own answer)."""
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokHTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nstale")
        await writer.drain()
        await reader.read()

    transport = H1Transport()
    async with server(handler) as port, httpx.AsyncClient(transport=transport, timeout=10) as client:
        assert [(await client.get(f"http://127.0.0.1:{port}/")).text for _ in range(2)] == ["ok", "ok"]
        assert connections == 2 and transport.connections == 0


async def test_limits_bound_the_pool_its_idle_connections_and_their_age() -> None:
    """At most ``max_connections`` open (a request beyond waits, up to the pool timeout:
    ``httpx.PoolTimeout``); no idle connection kept with ``max_keepalive_connections=0``;
    none reused past ``keepalive_expiry``."""
    release = asyncio.Event()
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while True:
            try:
                path = (await read_request(reader)).split(b" ")[1]
            except asyncio.IncompleteReadError:
                return
            if path == b"/hold":
                writer.write(CHUNKED_HEAD + chunk(b"first\n"))
                await writer.drain()
                await release.wait()
                writer.write(b"0\r\n\r\n")
            else:
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()

    one = H1Transport(limits=httpx.Limits(max_connections=1))
    async with server(handler) as port, httpx.AsyncClient(transport=one, timeout=httpx.Timeout(10, pool=0.2)) as c:
        url = f"http://127.0.0.1:{port}"
        async with c.stream("GET", url + "/hold") as held:
            with pytest.raises(httpx.PoolTimeout):
                await c.get(url + "/")
            waiting = asyncio.create_task(c.get(url + "/", timeout=10))
            await asyncio.sleep(0.05)
            assert not waiting.done()
            release.set()
            await held.aread()
        assert (await within(waiting, "the waiting request")).text == "ok"
        assert connections == 1
    for limits in (httpx.Limits(max_keepalive_connections=0), httpx.Limits(keepalive_expiry=0)):
        connections = 0
        transport = H1Transport(limits=limits)
        async with server(handler) as port, httpx.AsyncClient(transport=transport, timeout=10) as c:
            assert [(await c.get(f"http://127.0.0.1:{port}/")).text for _ in range(3)] == ["ok"] * 3
            assert connections == 3  # each request's connection was accepted before its answer


async def test_idle_connections_past_their_expiry_are_closed_under_a_steady_load() -> None:
    """After a burst (three connections idle), a steady load reuses the most recent one;
    the two below it are closed once past ``keepalive_expiry``, not left open for ever."""
    accepted = 0
    hung_up = 0
    three = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted, hung_up
        accepted += 1
        if accepted == 3:
            three.set()
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                await read_request(reader)
                await three.wait()  # the burst's three requests are answered together
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                await writer.drain()
        hung_up += 1

    transport = H1Transport(limits=httpx.Limits(keepalive_expiry=0.2))
    async with server(handler) as port, httpx.AsyncClient(transport=transport, timeout=10) as client:
        url = f"http://127.0.0.1:{port}/"
        await within(asyncio.gather(*(client.get(url) for _ in range(3))), "the burst")
        deadline = time.monotonic() + 10
        while hung_up < 2 and time.monotonic() < deadline:  # a steady load, one request at a time
            assert (await client.get(url)).text == "ok"
        assert (accepted, hung_up, transport.connections) == (3, 2, 1)


async def test_an_answer_closed_before_its_end_closes_its_connection() -> None:
    """A reader that stops early (a cancelled run) leaves the connection mid-answer: it is
    closed, not handed to the next request, which gets a new one."""
    connections = 0
    hung_up = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await read_request(reader)
        writer.write(CHUNKED_HEAD + chunk(b"first\n"))
        await writer.drain()
        if await reader.read() == b"":
            hung_up.set()

    transport = H1Transport()
    async with server(handler) as port, httpx.AsyncClient(transport=transport, timeout=10) as client:
        for _ in range(2):
            async with client.stream("GET", f"http://127.0.0.1:{port}/") as response:
                async for piece in response.aiter_raw():
                    assert piece == b"first\n"
                    break
        await within(hung_up.wait(), "the client to hang up")
        assert connections == 2 and transport.connections == 0


async def test_an_answer_whole_but_closed_unread_past_the_high_water_mark_leaves_reading_on() -> None:
    """An answer that arrived whole while its unread pieces paused reading (past the
    buffer's high-water mark), then closed unread: its connection is kept, and the next
    request on it reads its own answer (reading resumed), not a timeout."""
    first = b"x" * (HIGH_WATER - 10)  # buffered whole without pausing
    tail = b"y" * 20  # one small segment: crosses the mark and ends the answer
    buffered = asyncio.Event()
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while True:
            try:
                path = (await read_request(reader)).split(b" ")[1]
            except asyncio.IncompleteReadError:
                return
            if path == b"/big":
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(first + tail), first))
                await writer.drain()
                await buffered.wait()
                writer.write(tail)
            else:
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()

    transport = H1Transport()
    async with server(handler) as port, httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(10, read=2)) as c:
        async with c.stream("GET", f"http://127.0.0.1:{port}/big") as response:
            connection = response.extensions["network_stream"]
            await until(lambda: connection.buffered == len(first), "the first part to arrive unread")
            buffered.set()
            await until(lambda: connection.complete, "the tail to arrive")
            assert connection.paused_reading
        assert (await c.get(f"http://127.0.0.1:{port}/small")).text == "ok"
        assert connections == 1


async def test_an_answer_closed_by_another_task_while_read_is_not_read_after() -> None:
    """A streamed answer closed (``aclose``) by another task while its reader waits for the
    last bytes, which arrive just then: the connection goes to the next request whole; the
    old reader stops (``httpx.StreamClosed``) instead of waiting on that connection again,
    where it took the next request's wake-ups (that request hung, whatever its timeout)."""
    go = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(CHUNKED_HEAD + chunk(b"first\n"))
        await writer.drain()
        await go.wait()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nsecond")
        await writer.drain()
        await reader.read()

    transport = H1Transport()
    async with server(handler) as port, httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(10, read=5)) as c:
        response = await c.send(c.build_request("GET", f"http://127.0.0.1:{port}/a"), stream=True)
        connection = response.extensions["network_stream"]
        got: list[bytes] = []

        async def read() -> None:
            async for piece in response.aiter_raw():
                got.append(piece)

        reading = asyncio.create_task(read())
        await until(lambda: bool(got), "the first piece")
        go.set()
        # Polled turn by turn: this task sees the answer complete before its reader wakes.
        while not connection.complete:
            await asyncio.sleep(0)
        await response.aclose()
        second = c.get(f"http://127.0.0.1:{port}/b")  # takes the connection in this same turn
        assert (await within(second, "the next request on the connection", 10)).text == "second"
        with pytest.raises(httpx.StreamClosed):
            await within(reading, "the closed answer's reader", 10)
        assert got == [b"first\n"] and transport.connections == 1


@pytest.mark.parametrize("factory", BOTH, ids=_id)
@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (CHUNKED_HEAD + chunk(b"first\n"), httpx.RemoteProtocolError),  # dropped mid-stream
        (b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort", httpx.RemoteProtocolError),
        (b"", httpx.RemoteProtocolError),  # closed before any answer
        (b"NOT HTTP AT ALL\r\n\r\n", httpx.RemoteProtocolError),
    ],
    ids=["mid-stream", "short-body", "no-answer", "not-http"],
)
async def test_a_broken_answer_raises_what_httpx_transport_raises(
    factory: Factory, answer: bytes, error: type[Exception]
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(answer)
        await writer.drain()
        writer.close()

    async with server(handler) as port, httpx.AsyncClient(transport=factory(), timeout=10) as client:
        with pytest.raises(error):
            async with client.stream("GET", f"http://127.0.0.1:{port}/") as response:
                async for _ in response.aiter_raw():
                    pass


async def test_an_answer_sent_before_the_request_was_whole_is_returned() -> None:
    """A server that answers (413) and closes before it has read the whole request: the
    send that finds the connection closed is not the request's error; the answer is
    returned, as httpcore returns it. Without an answer it is the missing answer's
    error (``RemoteProtocolError``)."""
    closed = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        path = (await reader.readuntil(b"\r\n\r\n")).split(b" ")[1]
        if path == b"/refuse":
            writer.write(b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 8\r\nconnection: close\r\n\r\ntoo long")
            await writer.drain()
        writer.close()
        await writer.wait_closed()
        closed.set()

    async def body() -> AsyncIterator[bytes]:
        closed.clear()
        yield b"first"
        await closed.wait()
        for _ in range(1000):  # until a send finds the connection closed (a few loop turns)
            yield b"more"
            await asyncio.sleep(0)

    async with server(handler) as port, httpx.AsyncClient(transport=H1Transport(), timeout=10) as client:
        response = await client.post(f"http://127.0.0.1:{port}/refuse", content=body())
        assert (response.status_code, response.text) == (413, "too long")
        with pytest.raises(httpx.RemoteProtocolError):
            await client.post(f"http://127.0.0.1:{port}/silent", content=body())


@pytest.mark.parametrize("factory", BOTH, ids=_id)
@pytest.mark.parametrize(
    "headers",
    [{"x-user": "v\r\nx-injected: 1"}, {"x-user": "v\nx-injected: 1"}, {"x-user": "a\x00b"}, {"x-a: b": "c"}],
    ids=["crlf", "lf", "nul", "name"],
)
async def test_a_header_that_would_inject_another_is_refused_unsent(factory: Factory, headers: dict[str, str]) -> None:
    """A CR, LF or NUL in a header value (user input passed on), or a name that is not a
    token: ``httpx.LocalProtocolError``, as h11 raises it, and nothing of it is sent."""
    heads: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError):
            while True:
                heads.append(await read_request(reader))
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                await writer.drain()

    async with server(handler) as port, httpx.AsyncClient(transport=factory(), timeout=10) as client:
        with pytest.raises(httpx.LocalProtocolError, match="Illegal header"):
            await client.get(f"http://127.0.0.1:{port}/", headers=headers)
        assert (await client.get(f"http://127.0.0.1:{port}/", headers={"x-user": "v\tw"})).text == "ok"
    assert len(heads) == 1 and b"x-user: v\tw\r\n" in heads[0]


@pytest.mark.parametrize("factory", BOTH, ids=_id)
async def test_an_http_1_0_answer_says_so_and_its_connection_is_not_reused(factory: Factory) -> None:
    """An ``HTTP/1.0`` answer (no keep-alive stated): ``response.http_version`` is the
    answer's, as httpx's transport reports it, and its connection is not kept, though the
    server leaves it open."""
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await read_request(reader)
        writer.write(b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        await reader.read()

    async with server(handler) as port, httpx.AsyncClient(transport=factory(), timeout=10) as client:
        for _ in range(2):
            response = await client.get(f"http://127.0.0.1:{port}/")
            assert (response.http_version, response.text) == ("HTTP/1.0", "ok")
    assert connections == 2


@pytest.mark.parametrize("factory", BOTH, ids=_id)
async def test_a_socket_option_the_system_refuses_is_connect_error(factory: Factory) -> None:
    """``socket_options`` with an option the system refuses: ``httpx.ConnectError`` as
    httpx's transport raises it (not a bare ``OSError``), and ours closes the socket
    (httpx's, on anyio, leaves it open)."""
    hung_up = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if await reader.read() == b"":
            hung_up.set()

    transport = factory(socket_options=[(socket.SOL_SOCKET, 12345, 1)])
    async with server(handler) as port, httpx.AsyncClient(transport=transport, timeout=10) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(f"http://127.0.0.1:{port}/")
        if isinstance(transport, H1Transport):
            await within(hung_up.wait(), "the refused connection to be closed")
            assert transport.connections == 0


@pytest.mark.parametrize("factory", BOTH, ids=_id)
async def test_a_request_that_says_connection_close_ends_its_connection(factory: Factory) -> None:
    """A request sent with ``Connection: close``: its connection is not reused (the server
    may close it at any moment after its answer, which need not repeat the header)."""
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        with contextlib.suppress(asyncio.IncompleteReadError):
            while True:
                await read_request(reader)
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                await writer.drain()

    async with server(handler) as port, httpx.AsyncClient(transport=factory(), timeout=10) as client:
        url = f"http://127.0.0.1:{port}/"
        assert (await client.get(url, headers={"Connection": "close"})).text == "ok"
        assert [(await client.get(url)).text for _ in range(2)] == ["ok", "ok"]
    assert connections == 2


class _ResolvingLoop(asyncio.SelectorEventLoop):
    """A loop whose resolver knows one name, on loopback, and records the names asked."""

    def __init__(self, known: str) -> None:
        super().__init__()
        self.known = known
        self.asked: list[str] = []

    async def getaddrinfo(self, host: Any, port: Any, **kwargs: Any) -> Any:
        host = host.decode("ascii") if isinstance(host, bytes) else host  # anyio asks in bytes
        self.asked.append(host)
        if host != self.known:
            raise socket.gaierror(socket.EAI_NONAME, "unknown name")
        return await super().getaddrinfo("127.0.0.1", port, **kwargs)


@pytest.mark.parametrize("factory", BOTH, ids=_id)
def test_an_international_host_name_is_resolved_as_its_host_header_says(factory: Factory) -> None:
    """A host name whose IDNA 2008 form (httpx's, the ``Host`` header's) differs from
    IDNA 2003's ("faß.de": "xn--fa-hia.de", not "fass.de") is resolved in that form, as
    httpx's transport resolves it: the host the request names is the host connected to."""
    loop = _ResolvingLoop("xn--fa-hia.de")

    async def case() -> None:
        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head = await read_request(reader)
            assert b"\r\nHost: xn--fa-hia.de:" in head
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()

        async with server(handler) as port, httpx.AsyncClient(transport=factory(), timeout=10) as client:
            assert (await client.get(f"http://faß.de:{port}/")).text == "ok"

    with asyncio.Runner(loop_factory=lambda: loop) as runner:
        runner.run(case())
    assert "xn--fa-hia.de" in loop.asked and "faß.de" not in loop.asked


@pytest.mark.parametrize("factory", BOTH, ids=_id)
async def test_a_chunked_answers_trailer_is_not_among_its_headers(factory: Factory) -> None:
    """A chunked answer's trailer (and a chunk extension) arriving with its head: the
    response's headers are the head's only, as httpx's transport gives them, and the
    connection is kept."""
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        with contextlib.suppress(asyncio.IncompleteReadError):
            while True:
                await read_request(reader)
                writer.write(
                    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntrailer: x-sum\r\n\r\n"
                    b"2;ext=1\r\nok\r\n0\r\nx-sum: 1\r\ncontent-type: text/evil\r\n\r\n"
                )
                await writer.drain()

    async with server(handler) as port, httpx.AsyncClient(transport=factory(), timeout=10) as client:
        for _ in range(2):
            response = await client.get(f"http://127.0.0.1:{port}/")
            assert response.text == "ok"
            assert response.headers.multi_items() == [("transfer-encoding", "chunked"), ("trailer", "x-sum")]
    assert connections == 1


@pytest.mark.parametrize("factory", BOTH, ids=_id)
async def test_a_head_that_never_ends_is_remote_protocol_error(factory: Factory) -> None:
    """A server that sends header lines without end: ``RemoteProtocolError`` once the head
    passes a bound (as httpx's transport raises it), not a head growing without bound."""
    stop = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\n")
        i = 0
        with contextlib.suppress(ConnectionError):
            while not stop.is_set() and not writer.is_closing():  # until the client hangs up
                writer.write(b"x-filler-%08d: %s\r\n" % (i, b"v" * 20))
                await writer.drain()
                i += 1
        writer.close()

    async with server(handler) as port, httpx.AsyncClient(transport=factory(), timeout=10) as client:
        try:
            with pytest.raises(httpx.RemoteProtocolError):
                await within(client.get(f"http://127.0.0.1:{port}/"), "the endless head's error", 10)
        finally:
            stop.set()


@pytest.mark.parametrize("factory", BOTH, ids=_id)
async def test_a_connection_reset_mid_stream_is_a_read_error(factory: Factory) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(CHUNKED_HEAD + chunk(b"first\n"))
        await writer.drain()
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
        writer.transport.abort()

    async with server(handler) as port, httpx.AsyncClient(transport=factory(), timeout=10) as client:
        with pytest.raises(httpx.ReadError):
            async with client.stream("GET", f"http://127.0.0.1:{port}/") as response:
                async for _ in response.aiter_raw():
                    pass


@pytest.mark.parametrize("factory", BOTH, ids=_id)
async def test_timeouts_are_httpx_timeouts(factory: Factory) -> None:
    """A stalled answer is ``ReadTimeout`` (each wait for the next bytes: a paced one
    outlives many periods of it); a server that reads nothing makes a large body's send
    ``WriteTimeout``; a refused connection is ``ConnectError``."""
    release = asyncio.Event()
    line_read = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        path = (await read_request(reader)).split(b" ")[1]
        writer.write(CHUNKED_HEAD + chunk(b"first\n"))
        await writer.drain()
        if path == b"/paced":
            for _ in range(5):
                await line_read.wait()
                line_read.clear()
                await asyncio.sleep(0.1)  # a third of the read timeout, five times
                writer.write(chunk(b"more\n"))
                await writer.drain()
            writer.write(b"0\r\n\r\n")
        await release.wait()
        writer.close()

    async def deaf(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await release.wait()

    timeout = httpx.Timeout(5, read=0.3, write=0.3)
    async with server(handler) as port, httpx.AsyncClient(transport=factory(), timeout=timeout) as c:
        lines = []
        async with c.stream("GET", f"http://127.0.0.1:{port}/paced") as response:
            async for line in response.aiter_lines():
                lines.append(line)
                line_read.set()
        assert lines == ["first"] + ["more"] * 5
        with pytest.raises(httpx.ReadTimeout):
            async with c.stream("GET", f"http://127.0.0.1:{port}/stall") as response:
                async for _ in response.aiter_lines():
                    pass
        async with server(deaf) as deaf_port:
            with pytest.raises(httpx.WriteTimeout):
                await c.post(f"http://127.0.0.1:{deaf_port}/", content=b"x" * (64 << 20))
        release.set()
    async with server(read_request) as port:  # a port that was free a moment ago
        pass
    async with httpx.AsyncClient(transport=factory(), timeout=5) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(f"http://127.0.0.1:{port}/")


@pytest.mark.parametrize("factory", BOTH, ids=_id)
async def test_a_connect_that_is_not_answered_is_connect_timeout(factory: Factory) -> None:
    """A listening socket whose accept queue is full drops new SYNs: the connect waits, and
    the ``connect`` timeout ends it as ``httpx.ConnectTimeout``."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(3):
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
            fillers.append(filler)
        async with httpx.AsyncClient(transport=factory(), timeout=httpx.Timeout(5, connect=0.3)) as client:
            with pytest.raises(httpx.ConnectTimeout):
                await within(client.get(f"http://127.0.0.1:{port}/"), "the connect timeout")
    finally:
        for sock in [*fillers, listener]:
            sock.close()


async def test_a_read_without_timeout_outlives_the_previous_reads_timer() -> None:
    """A request without a read timeout on a kept-alive connection is not ended by the
    timer a previous request's read armed on that connection."""
    transport = H1Transport(limits=httpx.Limits(max_connections=1))
    async with httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(5, read=0.05)) as c:
        timer_ran = asyncio.Event()

        async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nfirst")
            await writer.drain()
            await read_request(reader)
            await timer_ran.wait()
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nsecond")
            await writer.drain()
            writer.close()

        async with server(handler) as port:
            first = await c.get(f"http://127.0.0.1:{port}/a")
            assert first.text == "first"
            ((connection,),) = transport._idle.values()
            assert connection.timer is not None  # the first request's read armed it

            async def watch() -> None:
                while connection.timer is not None:
                    await asyncio.sleep(0.01)
                timer_ran.set()

            watcher = asyncio.create_task(watch())
            second = await c.get(f"http://127.0.0.1:{port}/b", timeout=httpx.Timeout(5, read=None))
            await watcher
            assert second.text == "second"


async def test_tls_with_the_given_context(tmp_path: Path) -> None:
    """https with the pool's context: a trusted server streams, the SNI name is sent, the
    TLS object is on the answer's ``network_stream``; an untrusted one is ``ConnectError``."""
    server_ctx, client_ctx = _tls_pair(tmp_path)
    names: list[str | None] = []
    server_ctx.sni_callback = lambda sock, name, ctx: names.append(name)  # type: ignore[assignment,misc]

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(CHUNKED_HEAD + chunk(b"a\n") + chunk(b"b\n") + b"0\r\n\r\n")
        await writer.drain()

    async with server(handler, tls=server_ctx) as port:
        async with (
            httpx.AsyncClient(transport=H1Transport(verify=client_ctx), timeout=10) as client,
            client.stream("GET", f"https://localhost:{port}/") as response,
        ):
            lines = [line async for line in response.aiter_lines()]
            ssl_object = response.extensions["network_stream"].get_extra_info("ssl_object")
            assert ssl_object is not None and ssl_object.selected_alpn_protocol() in (None, "http/1.1")
        async with httpx.AsyncClient(transport=H1Transport(), timeout=10) as client:
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await client.get(f"https://localhost:{port}/")
    assert lines == ["a", "b"] and names[0] == "localhost"


async def test_the_model_pool_is_this_transport_and_a_proxy_keeps_httpx() -> None:
    """``pooled_transport`` puts this transport behind the gate unless the pool needs what
    it does not do: a proxy keeps httpx's transport (sharded, on ``llm.netstream``)."""
    pool = pooled_transport("llm", 64)
    assert [type(s) for s in pool._shards] == [H1Transport]
    proxied = pooled_transport("llm", 64, proxy="http://127.0.0.1:9")
    assert len(proxied._shards) == 2 and all(isinstance(s, httpx.AsyncHTTPTransport) for s in proxied._shards)
    await pool.aclose()
    await proxied.aclose()


@pytest.mark.parametrize(
    "case",
    [
        test_a_streamed_answer_arrives_piece_by_piece_in_order,
        test_request_bodies_with_a_length_and_chunked_arrive_whole,
        test_a_large_answer_is_read_whole_with_reading_paused_and_resumed,
        test_an_answer_delimited_by_the_connections_end_and_interim_answers,
        test_keepalive_reuses_a_connection_and_retires_one_the_server_closed_or_wrote_to,
        test_bytes_after_an_answer_never_reach_it_nor_the_next_request,
        test_an_answer_sent_before_the_request_was_whole_is_returned,
        test_limits_bound_the_pool_its_idle_connections_and_their_age,
        test_an_answer_closed_before_its_end_closes_its_connection,
        test_an_answer_whole_but_closed_unread_past_the_high_water_mark_leaves_reading_on,
        test_an_answer_closed_by_another_task_while_read_is_not_read_after,
        test_a_read_without_timeout_outlives_the_previous_reads_timer,
    ],
)
def test_the_same_on_uvloop(case: Callable[[], Awaitable[None]]) -> None:
    """The server runs on uvloop (``agentchat serve``), whose transports are its own."""
    uvloop.run(case())


@pytest.mark.parametrize("factory", BOTH, ids=_id)
def test_errors_and_timeouts_on_uvloop(factory: Factory) -> None:
    uvloop.run(test_timeouts_are_httpx_timeouts(factory))
    uvloop.run(test_a_connection_reset_mid_stream_is_a_read_error(factory))


def test_tls_on_uvloop(tmp_path: Path) -> None:
    uvloop.run(test_tls_with_the_given_context(tmp_path))
