"""The backend HTTP client and the fault paths every tool shares.

The faults (down, slow, HTML, 10 MB, odd paths) are served by a small Starlette fake on
real loopback, so httpx's real streaming, timeout and size handling run.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from agenttools.backend_tools import register_backend_tools
from agenttools.core.backend_client import BackendClient, BackendError, build_path, encode_query
from agenttools.core.catalog import build_catalog
from agenttools.core.drafts import Drafts
from agenttools.core.registry import ToolContext, ToolRegistry
from agenttools.core.tool_support import WorkflowToolDeps
from storage.sqlite import SqliteStorage, open_sqlite_storage
from tests.support.server import free_port, serve_app


def test_build_path_escapes_every_segment() -> None:
    assert build_path("v1", "data", "name", "a/b?c#d") == "/v1/data/name/a%2Fb%3Fc%23d"
    assert build_path("v1", "x", "..") == "/v1/x/%2E%2E"
    assert build_path("v1", "x", ".") == "/v1/x/%2E"
    assert build_path("v1", "x", "a..b") == "/v1/x/a..b"
    with pytest.raises(BackendError):
        build_path("v1", "")


def test_encode_query_escapes_values_and_drops_none() -> None:
    assert encode_query({"status": "active&rows=1000", "severity": None, "page": 2}) == "?status=active%26rows%3D1000&page=2"
    assert encode_query({}) == ""


def _fault_app(seen: list[Request]) -> Starlette:
    async def echo(request: Request) -> Response:
        seen.append(request)
        return JSONResponse(
            {
                "raw_path": request.scope["raw_path"].decode(),
                "query": request.url.query,
                "auth": request.headers.get("authorization"),
                "accept": request.headers.get("accept"),
            }
        )

    async def slow(request: Request) -> Response:
        # Never answers in time: holds the request until the client gives up and leaves
        # (a fixed 2 s sleep here held every test's server shutdown for those 2 s).
        while not await request.is_disconnected():
            await asyncio.sleep(0.02)
        return JSONResponse({})

    async def trickle(request: Request) -> Response:
        async def body():  # each chunk arrives inside the read timeout, the whole does not
            for _ in range(50):
                yield b" "
                await asyncio.sleep(0.05)
            yield b"{}"

        return StreamingResponse(body(), media_type="application/json")

    async def html_ok(request: Request) -> Response:
        return HTMLResponse("<html><body><h1>Login</h1></body></html>")

    async def html_502(request: Request) -> Response:
        return HTMLResponse("<html><head><title>Bad gateway</title></head><body>nginx</body></html>", status_code=502)

    async def huge(request: Request) -> Response:
        return Response(b"[" + b"1," * 5_000_000 + b"1]", media_type="application/json")

    async def huge_stream(request: Request) -> Response:
        async def body():
            yield b"["
            for _ in range(1000):
                yield b"1," * 5000
            yield b"1]"

        return StreamingResponse(body(), media_type="application/json")

    async def json_error(request: Request) -> Response:
        return JSONResponse({"code": "not_found", "message": "rule not found"}, status_code=404)

    async def no_content(request: Request) -> Response:
        return Response(status_code=204)

    return Starlette(
        routes=[
            Route("/echo/{rest:path}", echo, methods=["GET", "POST"]),
            Route("/slow", slow),
            Route("/trickle", trickle),
            Route("/html", html_ok),
            Route("/html502", html_502),
            Route("/huge", huge),
            Route("/huge-stream", huge_stream),
            Route("/err", json_error),
            Route("/empty", no_content, methods=["POST"]),
            Route("/slowbase/{rest:path}", slow),
            Route("/htmlbase/{rest:path}", html_ok),
            Route("/hugebase/{rest:path}", huge),
        ]
    )


@pytest.fixture
async def fault_server():
    seen: list[Request] = []
    async with serve_app(_fault_app(seen)) as url:
        yield url, seen


@pytest.fixture
async def http():
    async with httpx.AsyncClient() as client:
        yield client


def _client(http: httpx.AsyncClient, base: str, **kw) -> BackendClient:
    return BackendClient(http=http, base_url=base, authorization="Bearer tok-123", **kw)


async def test_forwards_authorization_and_accept_unchanged(fault_server, http) -> None:
    base, _ = fault_server
    body = await _client(http, base).get(build_path("echo", "a b", "..", "x/y"), {"q": "1&2", "z": "#"})
    assert body["auth"] == "Bearer tok-123"
    assert body["accept"] == "application/json"
    assert body["raw_path"] == "/echo/a%20b/%2E%2E/x%2Fy"
    assert body["query"] == "q=1%262&z=%23"


async def test_json_error_body_becomes_http_code_and_message(fault_server, http) -> None:
    base, _ = fault_server
    with pytest.raises(BackendError) as err:
        await _client(http, base).get("/err")
    assert str(err.value) == "HTTP 404: rule not found"
    assert err.value.status == 404


async def test_html_error_page_is_trimmed_text(fault_server, http) -> None:
    base, _ = fault_server
    with pytest.raises(BackendError) as err:
        await _client(http, base).get("/html502")
    assert str(err.value).startswith("HTTP 502: non-JSON error page")
    assert "<" not in str(err.value)


async def test_html_success_body_is_a_clear_error(fault_server, http) -> None:
    base, _ = fault_server
    with pytest.raises(BackendError, match=r"non-JSON response \(text/html\)"):
        await _client(http, base).get("/html")


async def test_slow_backend_times_out(fault_server, http) -> None:
    base, _ = fault_server
    with pytest.raises(BackendError, match="did not answer within 0.3 s"):
        await _client(http, base, timeout_s=0.3).get("/slow")


async def test_trickling_backend_hits_the_overall_deadline(fault_server, http) -> None:
    base, _ = fault_server
    with pytest.raises(BackendError, match="did not answer within"):
        await _client(http, base, timeout_s=0.5).get("/trickle")


@pytest.mark.parametrize("path", ["/huge", "/huge-stream"])
async def test_ten_megabytes_is_refused(fault_server, http, path: str) -> None:
    base, _ = fault_server
    with pytest.raises(BackendError, match="larger than the 1000 KB limit"):
        await _client(http, base, max_response_bytes=1_000_000).get(path)


async def test_backend_down_is_readable(http) -> None:
    base = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(BackendError, match="unreachable"):
        await _client(http, base).get("/anything")


async def test_empty_204_is_none(fault_server, http) -> None:
    base, _ = fault_server
    assert await _client(http, base).post("/empty", {"a": 1}) is None


# -- through the tool handlers: a failing backend never raises out of a tool -------------


@pytest.fixture
async def registry_for(tmp_path, http):
    stores: list[SqliteStorage] = []

    async def make(base: str, **kw) -> tuple[ToolRegistry, ToolContext]:
        storage = await open_sqlite_storage(tmp_path / "drafts.db")
        drafts = Drafts(storage.drafts)
        stores.append(storage)
        reg = ToolRegistry(build_catalog())
        register_backend_tools(reg, WorkflowToolDeps(backend_url=base, drafts=drafts, **kw))
        ctx = ToolContext(
            user_id="u1", authorization="Bearer x", conversation_id="c", run_id="r",
            context_type="workflow", context={}, http=http,
        )
        return reg, ctx

    yield make
    for s in stores:
        await s.close()


@pytest.mark.parametrize(
    "tool,args",
    [
        ("discover", {"category": "entities"}),
        ("list_workflow_rules", {}),
        ("list_my_alerts", {}),
        ("search_database_schema", {}),
        ("list_table_configs", {}),
        ("start_draft", {"name": "x", "entity": "sales.orders", "trigger_type": "on_create"}),
    ],
)
async def test_tools_report_a_down_backend_as_a_tool_error(registry_for, tool, args) -> None:
    reg, ctx = await registry_for(f"http://127.0.0.1:{free_port()}")
    outcome = await reg.handler(tool)(args, ctx)
    assert outcome.is_error
    assert "unreachable" in outcome.content["error"]


async def test_tool_reports_a_missing_route_as_http_404(registry_for, fault_server) -> None:
    base, _ = fault_server
    reg, ctx = await registry_for(base + "/nowhere")
    outcome = await reg.handler("list_table_configs")({}, ctx)
    assert outcome.is_error and outcome.content["error"].startswith("HTTP 404:")


@pytest.mark.parametrize(
    "prefix,expected",
    [
        ("/slowbase", "did not answer within 0.2 s"),
        ("/htmlbase", "non-JSON response (text/html)"),
        ("/hugebase", "larger than the 1000 KB limit"),
    ],
)
async def test_tools_report_slow_html_and_huge_backends(registry_for, fault_server, prefix, expected) -> None:
    base, _ = fault_server
    reg, ctx = await registry_for(base + prefix, timeout_s=0.2, max_response_bytes=1_000_000)
    for tool, args in (("get_table_config", {"name": "Open orders"}), ("discover", {"category": "action_types"})):
        outcome = await reg.handler(tool)(args, ctx)
        assert outcome.is_error, tool
        assert expected in outcome.content["error"], outcome.content
