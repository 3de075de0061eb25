"""``llm.lean_http.post_stream`` (issue 23): a POST handed straight to the client's
transport sends what the client itself would send (URL, headers, body), keeps the
client's timeout and its transport's error types, and leaves nothing the client does
silently undone — cookies are stored and then sent, redirects followed, a client with
``auth`` takes the client's own path. Over a real loopback HTTP server."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from llm.lean_http import endpoint, post_stream
from llm.pool import pooled_transport
from tests.fakes import running_fake
from tests.support.deadline import within
from tests.support.server import free_port


class Recorder:
    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.stall = asyncio.Event()
        self.app = Starlette(
            routes=[
                Route("/api/echo", self.echo, methods=["POST"]),
                Route("/api/cookie", self.cookie, methods=["POST"]),
                Route("/api/moved", self.moved, methods=["POST"]),
                Route("/api/stall", self.stalled, methods=["POST"]),
            ]
        )

    async def _record(self, request: Request) -> dict[str, Any]:
        seen = {
            "method": request.method,
            "path": request.url.path,
            "query": request.url.query,
            "headers": [(k.lower(), v) for k, v in request.headers.items()],
            "body": await request.body(),
        }
        self.seen.append(seen)
        return seen

    async def echo(self, request: Request) -> Response:
        await self._record(request)

        async def lines() -> Any:
            for i in range(3):
                yield b'{"i": %d}\n' % i

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    async def cookie(self, request: Request) -> Response:
        await self._record(request)
        response = JSONResponse({"ok": True})
        response.set_cookie("sticky", "replica-2")
        return response

    async def moved(self, request: Request) -> Response:
        await self._record(request)
        return RedirectResponse("/api/echo", status_code=307)

    async def stalled(self, request: Request) -> Response:
        await self._record(request)
        await self.stall.wait()
        return Response(b"late")


def client(base: str, **kwargs: Any) -> httpx.AsyncClient:
    kwargs.setdefault("headers", {"Content-Type": "application/json", "Authorization": "Bearer key-1"})
    kwargs.setdefault("timeout", httpx.Timeout(10))
    return httpx.AsyncClient(base_url=base, transport=pooled_transport("test", 8), follow_redirects=True, **kwargs)


async def read(response: httpx.Response) -> bytes:
    try:
        return await response.aread()
    finally:
        await response.aclose()


async def test_the_request_is_the_one_the_client_would_send() -> None:
    rec = Recorder()
    async with running_fake(rec.app) as base, client(base) as http:
        body = b'{"model": "m", "stream": true}'
        answer = await read(await post_stream(http, "/api/echo", body))
        own = await http.post("/api/echo", content=body)
    assert answer == own.content == b'{"i": 0}\n{"i": 1}\n{"i": 2}\n'
    lean, theirs = rec.seen
    assert lean["path"] == theirs["path"] == "/api/echo" and lean["method"] == "POST"
    assert lean["body"] == theirs["body"] == body
    assert sorted(lean["headers"]) == sorted(theirs["headers"])
    assert ("authorization", "Bearer key-1") in lean["headers"]


async def test_a_base_url_with_a_path_prefix_is_kept() -> None:
    rec = Recorder()
    app = Starlette(routes=[Route("/prefix/api/echo", rec.echo, methods=["POST"])])
    async with running_fake(app) as base, client(base + "/prefix") as http:
        await read(await post_stream(http, "/api/echo", b"{}"))
    assert rec.seen[0]["path"] == "/prefix/api/echo"


async def test_a_cookie_set_by_the_server_is_stored_and_sent_next_time() -> None:
    rec = Recorder()
    async with running_fake(rec.app) as base, client(base) as http:
        await read(await post_stream(http, "/api/cookie", b"{}"))
        assert http.cookies.get("sticky") == "replica-2"
        await read(await post_stream(http, "/api/echo", b"{}"))
    assert ("cookie", "sticky=replica-2") in rec.seen[1]["headers"]


async def test_a_redirect_is_followed_as_the_client_would() -> None:
    rec = Recorder()
    async with running_fake(rec.app) as base, client(base) as http:
        response = await post_stream(http, "/api/moved", b'{"a": 1}')
        assert response.status_code == 200
        assert await read(response) == b'{"i": 0}\n{"i": 1}\n{"i": 2}\n'
    assert [(s["method"], s["path"]) for s in rec.seen] == [("POST", "/api/moved"), ("POST", "/api/echo")]
    assert rec.seen[-1]["body"] == b'{"a": 1}'  # a 307 keeps the method and the body


async def test_a_client_with_auth_takes_its_own_path() -> None:
    rec = Recorder()
    async with running_fake(rec.app) as base, client(base, headers={}, auth=("user", "secret")) as http:
        await read(await post_stream(http, "/api/echo", b"{}"))
    assert any(k == "authorization" and v.startswith("Basic ") for k, v in rec.seen[0]["headers"])


async def test_the_clients_timeout_holds() -> None:
    rec = Recorder()
    async with running_fake(rec.app) as base, client(base, timeout=httpx.Timeout(10, read=0.2)) as http:

        async def stalled() -> bytes:
            return await read(await post_stream(http, "/api/stall", b"{}"))

        try:
            with pytest.raises(httpx.ReadTimeout):  # a timeout not applied would wait for ever: guarded
                await within(stalled(), "the 0.2 s read timeout", 30)
        finally:
            rec.stall.set()


async def test_a_refused_connection_is_httpx_connect_error() -> None:
    async with client(f"http://127.0.0.1:{free_port()}") as http:
        with pytest.raises(httpx.ConnectError):
            await post_stream(http, "/api/echo", b"{}")


async def test_the_connection_is_released_when_the_answer_is_closed() -> None:
    rec = Recorder()
    transport = pooled_transport("test", 1)
    async with (
        running_fake(rec.app) as base,
        httpx.AsyncClient(base_url=base, transport=transport, timeout=httpx.Timeout(10, pool=2)) as http,
    ):
        for _ in range(3):  # a pool of one: each request needs the previous one's connection back
            response = await post_stream(http, "/api/echo", b"{}")
            assert transport.in_flight == 1
            await read(response)
            assert transport.in_flight == 0


async def test_an_endpoint_merged_once_is_the_same_url() -> None:
    rec = Recorder()
    app = Starlette(routes=[Route("/prefix/api/echo", rec.echo, methods=["POST"])])
    async with running_fake(app) as base, client(base + "/prefix") as http:
        url = endpoint(http, "/api/echo")
        assert url == http.build_request("POST", "/api/echo").url
        await read(await post_stream(http, url, b"{}"))
        await read(await post_stream(http, url, b"{}"))
    assert [s["path"] for s in rec.seen] == ["/prefix/api/echo", "/prefix/api/echo"]


async def test_a_closed_client_sends_nothing() -> None:
    """As ``AsyncClient.send`` refuses: a request on a closed client would open a pooled
    connection that nothing closes any more."""
    rec = Recorder()
    async with running_fake(rec.app) as base:
        http = client(base)
        await http.aclose()
        with pytest.raises(RuntimeError, match="closed"):
            await post_stream(http, "/api/echo", b"{}")
    assert rec.seen == []


async def test_the_clients_query_parameters_are_sent() -> None:
    rec = Recorder()
    async with running_fake(rec.app) as base, client(base, params={"api-version": "2"}) as http:
        await read(await post_stream(http, "/api/echo", b"{}"))
        await http.post("/api/echo", content=b"{}")
    lean, theirs = rec.seen
    assert lean["path"] == theirs["path"] == "/api/echo"
    assert lean["query"] == theirs["query"] == "api-version=2"
