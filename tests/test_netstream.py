"""The asyncio network backend of the outbound pools on httpx's transport (``llm/netstream.py``;
a pool with a proxy or connect retries, the requests ``H1Transport`` hands on): httpx
over it reads a streamed answer in order, times out a stalled read, reuses and retires
connections, speaks TLS, and reports a refused connection the way httpx's own backend
does. Every server here is a real loopback socket."""

from __future__ import annotations

import asyncio
import datetime
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import uvloop
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from llm.netstream import AsyncioStream, lean_transport, uses_lean_backend
from llm.pool import pooled_transport
from tests.support.deadline import within

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    if length:
        await reader.readexactly(length)
    return head


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\n\r\n"


@asynccontextmanager
async def server(handler: Handler, tls: ssl.SSLContext | None = None) -> AsyncIterator[int]:
    srv = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=tls)
    try:
        yield srv.sockets[0].getsockname()[1]
    finally:
        srv.close()


def streams_of(client: httpx.AsyncClient) -> list[object]:
    """The network streams of the client's pooled connections (httpcore internals, read-only)."""
    transport = client._transport  # type: ignore[attr-defined]
    shards = getattr(transport, "_shards", [transport])
    found = []
    for shard in shards:
        for conn in shard._pool.connections:
            inner = getattr(conn, "_connection", None)
            stream = getattr(inner, "_network_stream", None)
            if stream is not None:
                found.append(stream)
    return found


async def test_every_pool_shard_uses_the_lean_backend() -> None:
    transport = pooled_transport("llm", 100, retries=1)  # a pool on httpx's transport
    assert len(transport._shards) > 1
    assert all(uses_lean_backend(shard) for shard in transport._shards)
    await transport.aclose()


async def test_a_streamed_answer_arrives_line_by_line_in_order() -> None:
    """Each line is written only after the client has read the one before it: a read
    answers with what arrived, never waits for more."""
    got: list[bytes] = []
    line_read = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(CHUNKED_HEAD)
        for i in range(20):
            writer.write(chunk(b'{"n":%d}\n' % i))
            await writer.drain()
            await line_read.wait()
            line_read.clear()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async with server(handler) as port, httpx.AsyncClient(transport=lean_transport(), timeout=30) as client:
        async with client.stream("POST", f"http://127.0.0.1:{port}/api/chat", content=b"{}") as response:
            async for line in response.aiter_lines():
                got.append(line.encode())
                line_read.set()
        assert any(isinstance(s, AsyncioStream) for s in streams_of(client))
    assert got == [b'{"n":%d}' % i for i in range(20)]


async def test_a_stalled_stream_times_out_and_a_paced_one_does_not() -> None:
    """A read timeout bounds the wait for each next piece: a stream whose pieces keep
    coming (each sent only once the client read the previous one) outlives many
    timeout periods' worth of reads; one that stalls raises ``httpx.ReadTimeout``."""
    release = asyncio.Event()
    line_read = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        path = (await read_request(reader)).split(b" ")[1]
        writer.write(CHUNKED_HEAD)
        writer.write(chunk(b"first\n"))
        await writer.drain()
        if path == b"/paced":
            for _ in range(5):
                await line_read.wait()
                line_read.clear()
                writer.write(chunk(b"more\n"))
                await writer.drain()
            writer.write(b"0\r\n\r\n")
        await release.wait()  # /stall: nothing more until the test ends
        writer.close()

    async with server(handler) as port:
        async with httpx.AsyncClient(transport=lean_transport(), timeout=httpx.Timeout(5, read=0.3)) as c:
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
        release.set()


async def test_a_read_without_timeout_outlives_the_previous_reads_timer() -> None:
    """A request without a read timeout on a kept-alive connection is not ended by the
    timer a previous request's read armed on that connection: the server answers the
    second request only once that timer has run (its check found the untimed read)."""
    one = httpx.Limits(max_connections=1)
    async with httpx.AsyncClient(transport=lean_transport(limits=one), timeout=httpx.Timeout(5, read=0.05)) as c:
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
            (stream,) = streams_of(c)
            protocol = stream._protocol  # type: ignore[attr-defined]
            assert protocol.timer is not None  # the first request's read armed it

            async def watch() -> None:
                while protocol.timer is not None:
                    await asyncio.sleep(0.01)
                timer_ran.set()

            watcher = asyncio.create_task(watch())
            second = await c.get(f"http://127.0.0.1:{port}/b", timeout=httpx.Timeout(5, read=None))
            await watcher
            assert second.text == "second"


async def test_keepalive_reuses_a_connection_and_retires_one_the_server_closed() -> None:
    connections = 0
    closed_by_server = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        try:
            for _ in range(2):  # two requests per connection, then the server hangs up
                await read_request(reader)
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                await writer.drain()
        except asyncio.IncompleteReadError:
            return
        writer.close()
        await writer.wait_closed()
        closed_by_server.set()

    async with server(handler) as port, httpx.AsyncClient(transport=lean_transport(), timeout=10) as client:
        url = f"http://127.0.0.1:{port}/"
        assert (await client.get(url)).text == "ok"
        assert (await client.get(url)).text == "ok"
        assert connections == 1
        await within(closed_by_server.wait(), "the server to close the idle connection")
        # The idle connection's end is seen (``is_readable``) before it is reused: a
        # new one is opened, where reusing the closed one would fail the request.
        assert (await client.get(url)).text == "ok"
        assert connections == 2


async def test_a_large_body_is_read_whole() -> None:
    body = bytes(range(256)) * 8192  # 2 MiB: past the buffer's high-water mark

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body))
        writer.write(body)
        await writer.drain()
        writer.close()

    async with server(handler) as port, httpx.AsyncClient(transport=lean_transport(), timeout=10) as client:
        response = await client.post(f"http://127.0.0.1:{port}/", content=body[:100_000])
    assert response.content == body


async def test_a_refused_connection_is_httpx_connect_error() -> None:
    async with server(read_request) as port:  # a port that was free a moment ago
        pass
    async with httpx.AsyncClient(transport=lean_transport(), timeout=5) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(f"http://127.0.0.1:{port}/")


def _tls_pair(tmp: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert_path, key_path)
    client_ctx = ssl.create_default_context(cafile=str(cert_path))
    return server_ctx, client_ctx


async def test_tls_streams_through_the_same_backend(tmp_path: Path) -> None:
    server_ctx, client_ctx = _tls_pair(tmp_path)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(CHUNKED_HEAD + chunk(b"a\n") + chunk(b"b\n") + b"0\r\n\r\n")
        await writer.drain()

    async with server(handler, tls=server_ctx) as port:
        async with httpx.AsyncClient(transport=lean_transport(verify=client_ctx), timeout=10) as client:
            async with client.stream("GET", f"https://localhost:{port}/") as response:
                lines = [line async for line in response.aiter_lines()]
                assert response.extensions["network_stream"].get_extra_info("ssl_object") is not None
            assert any(isinstance(s, AsyncioStream) for s in streams_of(client))
        # A certificate the client does not trust is refused, as by httpx's own backend.
        async with httpx.AsyncClient(transport=lean_transport(), timeout=10) as client:
            with pytest.raises(httpx.ConnectError):
                await client.get(f"https://localhost:{port}/")
    assert lines == ["a", "b"]


@pytest.mark.parametrize(
    "case",
    [
        test_a_streamed_answer_arrives_line_by_line_in_order,
        test_a_stalled_stream_times_out_and_a_paced_one_does_not,
        test_keepalive_reuses_a_connection_and_retires_one_the_server_closed,
        test_a_read_without_timeout_outlives_the_previous_reads_timer,
        test_a_large_body_is_read_whole,
        test_a_refused_connection_is_httpx_connect_error,
    ],
)
def test_the_same_on_uvloop(case: Callable[[], Awaitable[None]]) -> None:
    """The server runs on uvloop (``uvicorn --loop uvloop``), whose transports are its own."""
    uvloop.run(case())


def test_tls_on_uvloop(tmp_path: Path) -> None:
    uvloop.run(test_tls_streams_through_the_same_backend(tmp_path))
