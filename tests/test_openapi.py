"""The OpenAPI 3.1 description: complete, valid, served, rendered — and true.

- Every route the Starlette router serves is described, and nothing else is.
- The document is valid OpenAPI 3.1 (schemathesis' own validator) and every schema in it
  is valid JSON Schema 2020-12; the event catalogue is the ``events`` package's.
- ``/openapi.json`` and ``/docs`` are served (the page offline: no script, no CDN).
- Schemathesis runs property-based against a live uvicorn server (default settings with
  the offline extractive provider; the admin routes opened and the rate limit raised so
  the fuzzer gets past 403/429): for every operation, positive and negative examples,
  no 5xx, and every response's status, content type, headers and body match the
  description — SSE bodies included, each event's ``data`` against its schema.
"""

from __future__ import annotations

import asyncio
import copy
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import schemathesis
from jsonschema import Draft202012Validator
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.errors import InvalidSchema
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

import events
from app.config import Settings
from app.factory import create_app
from app.server.openapi import documented_operations, route_operations
from tests.conftest import running_app
from tests.support.server import serve_app

MAX_EXAMPLES = 15


def built_document(app: Any) -> dict[str, Any]:
    """The document the app serves, read from its route (no server needed)."""
    for route in app.routes:
        if getattr(route, "path", None) == "/openapi.json":
            response = asyncio.run(route.endpoint(None))
            return dict(orjson.loads(response.body))
    raise AssertionError("no /openapi.json route")


def test_every_route_is_described_and_nothing_else(settings: Settings) -> None:
    app = create_app(settings)
    served = route_operations(app.routes)
    described = documented_operations(built_document(app))
    assert served - described == set(), "routes without a description in the OpenAPI document"
    assert described - served == set(), "described operations no route serves"
    assert ("/v1/agent/runs/{run_id}/events", "get") in served and ("/static/{path}", "get") in served


def test_the_document_is_valid_openapi_31_and_its_schemas_valid_json_schema(settings: Settings) -> None:
    doc = built_document(create_app(settings))
    assert doc["openapi"].startswith("3.1.")
    schemathesis.openapi.from_dict(doc).validate()
    for schema in doc["components"]["schemas"].values():
        Draft202012Validator.check_schema(schema)  # raises naming the bad keyword
    # The validator is not a formality: a broken document is refused.
    broken = copy.deepcopy(doc)
    del broken["paths"]["/healthz"]["get"]["responses"]["200"]["description"]
    with pytest.raises((InvalidSchema, ValueError)):
        schemathesis.openapi.from_dict(broken).validate()


def unresolved_refs(document: dict[str, Any]) -> list[str]:
    """Every ``$ref`` of ``document`` that is not a local JSON pointer to a node of it."""
    refs: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str):
                refs.append(ref)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(document)
    bad = []
    for ref in refs:
        target: Any = document
        try:
            assert ref.startswith("#/")
            for part in ref[2:].split("/"):
                target = target[part.replace("~1", "/").replace("~0", "~")]
        except (AssertionError, KeyError, TypeError):
            bad.append(ref)
    return bad


def test_every_ref_resolves(settings: Settings) -> None:
    doc = built_document(create_app(settings))
    assert unresolved_refs(doc) == []
    assert any("requestBody" in op for item in doc["paths"].values() for op in item.values())
    # The check is not vacuous: a reference to a component that is not there is named.
    broken = copy.deepcopy(doc)
    broken["paths"]["/v1/agent/chat"]["post"]["requestBody"]["content"]["application/json"]["schema"] = {
        "$ref": "#/components/schemas/NoSuchRequest"
    }
    assert unresolved_refs(broken) == ["#/components/schemas/NoSuchRequest"]


def _section(html: str, operation_id: str) -> str:
    start = html.index(f'id="op-{operation_id}"')
    return html[start:html.index("</section>", start)]


def test_the_docs_page_shows_what_each_request_body_holds(settings: Settings) -> None:
    """A body given as a reference to a component is shown by the component's name and,
    for a request, its schema in place: the page showed every request body as the raw
    ``{"$ref": "#/components/schemas/…"}`` (issue 20's newcomer walkthrough)."""
    app = create_app(settings)
    doc = built_document(app)
    page = next(r for r in app.routes if getattr(r, "path", None) == "/docs")
    html = asyncio.run(page.endpoint(None)).body.decode()
    schemas = doc["components"]["schemas"]
    assert "<code>{&quot;$ref&quot;" not in html  # no body is shown as a bare reference
    shown = 0
    for item in doc["paths"].values():
        for op in item.values():
            body = op.get("requestBody")
            if not body:
                continue
            request = _section(html, op["operationId"]).split("<h4>Request body</h4>", 1)[1]
            request = request.split("<h4>Responses</h4>", 1)[0]
            for media in body["content"].values():
                ref = media["schema"].get("$ref")
                schema = schemas[ref.rsplit("/", 1)[-1]] if ref else media["schema"]
                if ref:
                    name = ref.rsplit("/", 1)[-1]
                    assert f'<a href="#schema-{name}">{name}</a>' in request, (op["operationId"], request[:300])
                for field in schema.get("properties", {}):
                    assert f"&quot;{field}&quot;: {{" in request, (op["operationId"], field)
                shown += bool(ref)
    assert shown >= 5  # chat, runs, approvals, feedback, rename, completions, documents


def test_the_event_catalogue_is_the_events_package(settings: Settings) -> None:
    doc = built_document(create_app(settings))
    catalogue = doc["x-sse-events"]
    assert list(catalogue) == list(events.EVENT_TYPES)
    schemas = doc["components"]["schemas"]
    for name, data_schema in events.event_data_schemas().items():
        assert schemas[catalogue[name]["$ref"].rsplit("/", 1)[-1]] == data_schema
    frames = schemas["RunEventFrame"]["oneOf"]
    assert [f["properties"]["event"]["const"] for f in frames] == list(events.EVENT_TYPES)
    assert [f["properties"]["data"]["contentSchema"] for f in frames] == list(catalogue.values())
    stream = doc["paths"]["/v1/agent/runs/{run_id}/events"]["get"]["responses"]["200"]["content"]["text/event-stream"]
    assert stream["x-sse-events"] == catalogue


def test_security_follows_agent_auth(settings: Settings) -> None:
    open_doc = built_document(create_app(settings))
    jwt_doc = built_document(create_app(settings.with_(auth="jwt", jwt_secret="x" * 32)))
    assert {} in open_doc["security"] and jwt_doc["security"] == [{"bearerAuth": []}]
    assert open_doc["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    assert jwt_doc["paths"]["/healthz"]["get"]["security"] == []


async def test_served_document_and_offline_docs_page(settings: Settings) -> None:
    async with running_app(settings) as (base, app), httpx.AsyncClient(base_url=base, timeout=30) as http:
        served = await http.get("/openapi.json")
        page = await http.get("/docs")
        css = await http.get("/static/docs.css")
        playground = await http.get("/")
    assert served.status_code == 200 and served.headers["content-type"] == "application/json"
    doc = served.json()
    assert documented_operations(doc) == route_operations(app.routes)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert 'href="/docs"' in playground.text
    html = page.text
    assert "<script" not in html and "@import" not in css.text and "url(" not in css.text
    linked = re.findall(r'(?:src|href)="([^"]*)"', html)
    assert linked and all(url.startswith(("/", "#")) for url in linked), "the page must work offline"
    for path, item in doc["paths"].items():
        assert f"<code>{path}</code>" in html
        for op in item.values():
            assert f'id="op-{op["operationId"]}"' in html
    for name in events.EVENT_TYPES:
        assert f'id="event-{name}"' in html
    assert 'href="#schema-MessageCompleteEvent"' in html  # refs are links


async def test_a_conversation_id_with_a_trailing_newline_is_refused(settings: Settings) -> None:
    """Found while describing the pattern: ``$`` matched before a final newline."""
    async with running_app(settings) as (base, _app), httpx.AsyncClient(base_url=base, timeout=30) as http:
        body = {"message": "hi", "context_type": "knowledge", "conversation_id": "conv_1\n"}
        refused = await http.post("/v1/agent/runs", json=body)
    assert refused.status_code == 400 and refused.json()["error"] == "invalid_field"


def _parameter_schema(doc: dict[str, Any], path: str, method: str, name: str) -> dict[str, Any]:
    for param in doc["paths"][path][method]["parameters"]:
        if param["name"] == name:
            return dict(param["schema"])
    raise AssertionError(f"{method} {path} has no parameter {name}")


async def test_parameters_the_server_refuses_are_described_as_refused(settings: Settings) -> None:
    """Each parameter value below is refused with 400 or served with 200, and the document
    says the same of it: a deep schemathesis run found conversation ids the attachment,
    rename, delete and run-list routes refuse described as any string, and ``?bucket=`` and
    ``?after=`` (read as not sent) described as refused."""
    probes = [  # (method, path template, parameter, value, the route's answer)
        ("get", "/v1/agent/conversations/{conversation_id}/attachments", "conversation_id", "\u00d6", 400),
        ("post", "/v1/agent/conversations/{conversation_id}/attachments", "conversation_id", "a b", 400),
        ("delete", "/v1/agent/conversations/{conversation_id}/attachments/{attachment_id}",
         "conversation_id", "\u00d6", 400),
        ("patch", "/v1/agent/conversations/{conversation_id}", "conversation_id", "\u00d6", 400),
        ("delete", "/v1/agent/conversations/{conversation_id}", "conversation_id", "x" * 129, 400),
        ("get", "/v1/agent/runs", "conversation_id", "", 400),
        ("get", "/v1/kb/documents", "bucket", "", 200),
        ("get", "/v1/kb/documents", "after", "", 200),
    ]
    async with running_app(settings.with_(admin_open=True)) as (base, _app), httpx.AsyncClient(
        base_url=base, timeout=30
    ) as http:
        doc = (await http.get("/openapi.json")).json()
        for method, template, name, value, status in probes:
            schema = _parameter_schema(doc, template, method, name)
            described_valid = Draft202012Validator(schema).is_valid(value)
            if "{" + name + "}" in template:
                url, params = template.replace("{" + name + "}", value), {}
            else:
                url, params = template, {name: value}
            url = url.replace("{attachment_id}", "att-1")
            kwargs: dict[str, Any] = {"json": {"title": "t"}} if method == "patch" else {}
            if method == "post":
                kwargs = {"files": {"file": ("a.txt", b"text", "text/plain")}}
            answer = await http.request(method.upper(), url, params=params, **kwargs)
            assert answer.status_code == status, (method, template, value, answer.text)
            assert described_valid == (status == 200), (method, template, name, value, schema)


async def test_an_upload_with_more_parts_than_the_route_reads_is_described_as_refused(settings: Settings) -> None:
    """The attachment upload reads at most 8 text parts beside ``file``: a body with 9 is a
    400 ``invalid_multipart``, and the document's multipart schema refuses it too (it
    allowed any parts; found by schemathesis' stateful phase on PostgreSQL)."""
    async with running_app(settings) as (base, _app), httpx.AsyncClient(base_url=base, timeout=30) as http:
        doc = (await http.get("/openapi.json")).json()
        op = doc["paths"]["/v1/agent/conversations/{conversation_id}/attachments"]["post"]
        validator = Draft202012Validator(op["requestBody"]["content"]["multipart/form-data"]["schema"])
        for extra, status in [(8, 201), (9, 400)]:
            fields = {f"note{i}": "x" for i in range(extra)}
            answer = await http.post(
                f"/v1/agent/conversations/conv_parts{extra}/attachments",
                data=fields,
                files={"file": ("a.txt", b"some text", "text/plain")},
            )
            assert answer.status_code == status, answer.text
            assert validator.is_valid({"file": "some text", **fields}) == (status == 201), extra


async def test_an_approval_body_is_refused_exactly_when_its_schema_refuses_it(settings: Settings) -> None:
    """``arguments`` go with ``edit`` only, and an edit needs them: the route refuses either
    mistake with 400 before it looks for the run, while a good body reaches the lookup (404
    here). The schema said ``arguments`` were an optional object for every decision (found
    by schemathesis: ``{"decision": "reject", "arguments": {}}`` refused)."""
    bodies = [
        ({"decision": "reject", "arguments": {}}, 400),
        ({"decision": "approve", "arguments": {"x": 1}}, 400),
        ({"decision": "edit"}, 400),
        ({"decision": "edit", "arguments": None}, 400),
        ({"decision": "approve", "arguments": None}, 404),
        ({"decision": "approve"}, 404),
        ({"decision": "edit", "arguments": {"x": 1}}, 404),
    ]
    async with running_app(settings) as (base, _app), httpx.AsyncClient(base_url=base, timeout=30) as http:
        doc = (await http.get("/openapi.json")).json()
        validator = Draft202012Validator(doc["components"]["schemas"]["ApprovalDecision"])
        for body, status in bodies:
            answer = await http.post("/v1/agent/runs/run_none/approvals/call_1", json=body)
            assert answer.status_code == status, (body, answer.text)
            assert validator.is_valid(body) == (status == 404), body


# --- schemathesis against a live server ---------------------------------------------------------


@contextmanager
def live_server(app: Any) -> Iterator[str]:
    """``serve_app`` on its own event loop in a thread: schemathesis' test functions are
    synchronous (requests), the server must keep serving while they block."""
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def main() -> None:
        box["stop"] = asyncio.Event()
        try:
            async with serve_app(app) as base:
                box["base"] = base
                ready.set()
                await box["stop"].wait()
        finally:
            ready.set()

    def run() -> None:
        loop.run_until_complete(main())
        # What the server leaves behind (sse-starlette's shutdown watcher) ends with its loop.
        leftovers = asyncio.all_tasks(loop)
        for task in leftovers:
            task.cancel()
        if leftovers:  # ``gather()`` of nothing looks for a current loop, and this thread has none
            loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=run, name="live-api", daemon=True)
    thread.start()
    ready.wait(60)
    try:
        assert "base" in box, "the server did not start"
        yield box["base"]
    finally:
        if "stop" in box:
            loop.call_soon_threadsafe(box["stop"].set)
        thread.join(30)
        if thread.is_alive():  # closing a running loop would only say "running"
            raise AssertionError("the live API server's thread did not stop within 30 s")
        loop.close()


def live_settings(db_path: Path) -> Settings:
    """The default configuration with the offline provider, except that the request rate
    is raised and the admin routes are open (``AGENT_ADMIN_OPEN``), so the fuzzer reaches
    past the limiter and the 403 into the routes' own code (their 403 and 429 have tests
    of their own)."""
    return Settings.from_env(
        {
            "AGENT_DB_PATH": str(db_path),
            "AGENT_LLM_PROVIDER": "extractive",
            "AGENT_EMBEDDER": "none",
            "AGENT_INGEST_SAMPLE_KB": "false",
            "OLLAMA_HOST": "http://127.0.0.1:9",
            "AGENT_REQUESTS_PER_MINUTE": "100000",
            "AGENT_ADMIN_OPEN": "true",
        }
    )


@pytest.fixture(scope="module")
def live_base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work: Path = tmp_path_factory.mktemp("schemathesis")
    with live_server(create_app(live_settings(work / "agent.sqlite3"))) as base:
        yield base


# The operations to test are known before any server runs: the app's own document (the
# same bytes the live server serves, as test_served_document_and_offline_docs_page checks).
schema = schemathesis.openapi.from_dict(
    built_document(create_app(live_settings(Path("unused.sqlite3")))),
    config=schemathesis.Config.from_dict(
        {
            "generation": {"max-examples": MAX_EXAMPLES, "deterministic": True, "database": "none", "mode": "all"},
            "phases": {"stateful": {"enabled": False}, "coverage": {"enabled": False}},
            "suppress-health-check": ["too_slow", "filter_too_much"],
        }
    ),
)

def not_a_server_error_but_overload(ctx: Any, response: Any, case: Any) -> bool | None:
    """``not_a_server_error``, except the documented overload refusal: a ``503`` whose
    problem ``error`` is ``replica_busy`` and which says when to retry. The live server shares
    this process (and its GIL) with the example generator, so its event loop can really be
    late for a second and refuse new runs, as it is meant to; any other 5xx still fails."""
    if response.status_code == 503 and response.headers.get("retry-after"):
        try:
            code = orjson.loads(response.content).get("error")
        except orjson.JSONDecodeError:
            code = None
        if code == "replica_busy":
            return None
    return not_a_server_error(ctx, response, case)


CHECKS = [
    not_a_server_error_but_overload,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@pytest.mark.slow  # every operation's generated examples against a live server
@schema.parametrize()
def test_the_live_server_keeps_its_description(case: Any, live_base: str) -> None:
    case.call_and_validate(base_url=live_base, checks=CHECKS, timeout=30)


def test_schemathesis_reads_the_events_inside_the_stream(live_base: str) -> None:
    """The SSE checks are not vacuous: with ``message_complete`` described wrongly, the
    same validation fails on a real run's stream."""
    doc = built_document(create_app(live_settings(Path("unused.sqlite3"))))
    doc["components"]["schemas"]["MessageCompleteEvent"]["required"].append("not_sent")
    chat = schemathesis.openapi.from_dict(doc)["/v1/agent/chat"]["POST"]
    case = chat.Case(body={"message": "What is in the knowledge base?", "context_type": "knowledge"})
    with pytest.raises(FailureGroup) as caught:
        case.call_and_validate(base_url=live_base, checks=CHECKS, timeout=30)
    [failure] = caught.value.exceptions
    assert failure.title == "SSE event violates schema" and '"event": "message_complete"' in failure.message
