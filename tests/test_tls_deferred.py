"""The outbound pools' TLS context reads its CA bundle at the first handshake, not when a
pool is built (``llm/tls.py``): ~45 ms of CPU every ``agentchat serve`` start paid though
many never open an https connection. Read then, it verifies as httpx's default does -
an untrusted certificate is refused, ``SSL_CERT_FILE`` is honoured - on asyncio and on
uvloop (which ``agentchat serve`` runs on), through a real loopback TLS server."""

from __future__ import annotations

import asyncio
import ssl
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvloop

from app.config import Settings
from llm.pool import PooledTransport, pooled_transport
from llm.tls import DeferredTrustContext
from tests.conftest import running_app
from tests.support.deadline import within
from tests.test_netstream import CHUNKED_HEAD, _tls_pair, chunk, read_request, server
from tests.test_pool import shard_context


def _context(transport: PooledTransport) -> ssl.SSLContext:
    contexts = {id(c): c for c in (shard_context(shard) for shard in transport._shards)}
    assert len(contexts) == 1, "the shards of one pool share one context"
    context = next(iter(contexts.values()))
    assert isinstance(context, ssl.SSLContext)
    return context


async def _answer_ok(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The loopback https server's one answer: a chunked "ok"."""
    await read_request(reader)
    writer.write(CHUNKED_HEAD + chunk(b"ok\n") + b"0\r\n\r\n")
    await writer.drain()
    writer.close()


async def _get(transport: PooledTransport, port: int) -> httpx.Response:
    async with httpx.AsyncClient(transport=transport, timeout=10) as client:
        return await client.get(f"https://localhost:{port}/")


async def _untrusted_then_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server_ctx, _ = _tls_pair(tmp_path)

    async with server(_answer_ok, tls=server_ctx) as port:
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
        monkeypatch.delenv("SSL_CERT_DIR", raising=False)
        pool = pooled_transport("llm", 64)
        context = _context(pool)
        assert isinstance(context, DeferredTrustContext) and not context.trust_loaded
        assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await _get(pool, port)  # certifi's bundle does not hold the test's certificate
        assert context.trust_loaded

        monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "cert.pem"))  # read at the first handshake
        trusting = pooled_transport("llm", 64)
        assert not _context(trusting).trust_loaded
        response = await _get(trusting, port)
        assert response.status_code == 200 and response.text == "ok\n"
        assert _context(trusting).get_ca_certs()[0]["subject"] == ((("commonName", "localhost"),),)


async def test_the_bundle_is_read_at_the_first_handshake_and_verifies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _untrusted_then_trusted(tmp_path, monkeypatch)


def test_the_same_on_uvloop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uvloop.run(_untrusted_then_trusted(tmp_path, monkeypatch))


def test_a_bundle_that_does_not_exist_fails_when_the_pool_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As httpx's own context does (``load_verify_locations`` at build): a start with a
    wrong ``SSL_CERT_FILE`` still fails at start, not at its first https call."""
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "missing.pem"))
    with pytest.raises(FileNotFoundError, match=r"missing\.pem"):
        pooled_transport("llm", 64)
    with pytest.raises(FileNotFoundError):
        httpx.create_ssl_context()  # httpx's own: the same error, when built


def _record_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The thread of each CA bundle read of a deferred context (the read itself is real)."""
    threads: list[int] = []
    real = ssl.SSLContext.load_verify_locations

    def load_verify_locations(self: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        threads.append(threading.get_ident())
        real(self, *args, **kwargs)

    monkeypatch.setattr(DeferredTrustContext, "load_verify_locations", load_verify_locations)
    return threads


async def _first_handshakes_off_the_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server_ctx, _ = _tls_pair(tmp_path)

    reads = _record_reads(monkeypatch)
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "cert.pem"))
    async with server(_answer_ok, tls=server_ctx) as port:
        pool = pooled_transport("llm", 64)
        async with httpx.AsyncClient(transport=pool, timeout=10) as client:
            answers = await asyncio.gather(*(client.get(f"https://localhost:{port}/") for _ in range(32)))
    assert [a.text for a in answers] == ["ok\n"] * 32
    assert _context(pool).trust_loaded
    assert len(reads) == 1, f"{len(reads)} reads of the bundle for one context"
    assert reads[0] != threading.get_ident(), "the bundle was read on the event loop's thread"


async def test_the_first_handshakes_read_the_bundle_once_in_a_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review 39: the first handshake read the bundle (~45 ms of CPU) in ``wrap_bio``, on
    the loop, stalling every live stream. Now 32 concurrent first requests await one
    read, in a worker thread (fails before: read on the loop's thread)."""
    await _first_handshakes_off_the_loop(tmp_path, monkeypatch)


def test_the_same_off_the_loop_on_uvloop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uvloop.run(_first_handshakes_off_the_loop(tmp_path, monkeypatch))


async def test_an_app_that_opens_no_https_connection_never_reads_the_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither the start nor a ready ``/readyz`` reads the bundle (~45 ms of CPU): only a
    first https request does, in a worker thread (the tests above)."""
    reads = _record_reads(monkeypatch)
    settings = Settings(db_path=tmp_path / "agent.sqlite3", llm_provider="extractive", embedder="none",
                        ingest_sample_kb=False)
    async with running_app(settings) as (base, _app), httpx.AsyncClient(base_url=base, timeout=30) as http:

        async def ready() -> None:
            while (await http.get("/readyz")).status_code != 200:
                await asyncio.sleep(0.05)

        await within(ready(), "/readyz answering ready", 30)
        assert (await http.get("/healthz")).status_code == 200
    assert reads == []
