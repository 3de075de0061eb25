"""The OpenAPI 3.1 description of the HTTP API: the shared pieces and the builder.

Starlette routes carry no types, so the description is written down beside the
validation it mirrors (``app/server/openapi_paths.py`` for the built-in routes) and a test
compares it with the router: a route without a description fails the suite.

Each route module contributes an ``ApiContribution`` — its path items
(``{path: {method: operation}}``), the component schemas they reference and their tags —
and ``build_openapi`` merges them with what every route shares: the problem body of
every refusal, ``Retry-After``, the bearer scheme, and the SSE event catalogue, which
comes from ``events.event_data_schemas()``: the classes that emit the events also give
their schemas, so the description cannot drift from the wire. The document is built
once, in the app factory, and served as bytes.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route

import events
from app.server.playground import SECURITY_HEADERS

OPENAPI_VERSION = "3.1.0"
PathItems = dict[str, dict[str, Any]]
HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
#: The one event that is not part of a run's log: no id.
HEARTBEAT = events.Heartbeat.name


@dataclass(frozen=True, slots=True)
class ApiContribution:
    """What one route module adds to the description. ``schemas`` go to
    ``components/schemas`` (names must not collide with another module's)."""

    paths: PathItems
    schemas: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    tags: Sequence[dict[str, str]] = ()


# --- helpers for path items (used by every contributing module) ----------------------------


def schema_ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def json_content(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def json_body(schema: dict[str, Any], description: str = "") -> dict[str, Any]:
    """A required JSON request body."""
    body: dict[str, Any] = {"required": True, "content": json_content(schema)}
    if description:
        body["description"] = description
    return body


def json_response(description: str, schema: dict[str, Any], headers: dict[str, Any] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"description": description, "content": json_content(schema)}
    if headers:
        response["headers"] = headers
    return response


def problem(description: str, *, retry_after: bool = False, authenticate: bool = False) -> dict[str, Any]:
    """A refusal: ``{"error": code, "detail": text}``. ``retry_after`` when the answer always
    carries ``Retry-After``; ``authenticate`` for the 401 of a bearer-checked route."""
    headers: dict[str, Any] = {}
    if retry_after:
        headers["Retry-After"] = {"$ref": "#/components/headers/RetryAfter"}
    if authenticate:
        headers["WWW-Authenticate"] = {"$ref": "#/components/headers/WWWAuthenticate"}
    return json_response(description, schema_ref("Problem"), headers)


def sse_response(description: str) -> dict[str, Any]:
    """A ``text/event-stream`` of run events. As OpenAPI before 3.2 has it (3.2 calls it
    ``itemSchema``), the schema describes *each event* of the stream: ``RunEventFrame``,
    whose ``data`` is JSON text with a ``contentSchema``. The builder adds
    ``x-sse-events``: each event name with the schema of its ``data``."""
    return {"description": description, "content": {"text/event-stream": {"schema": schema_ref("RunEventFrame")}}}


def header(name: str, schema: dict[str, Any], description: str, *, required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": "header", "required": required, "description": description, "schema": schema}


def query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "description": description, "schema": schema}


def path_param(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "description": description, "schema": schema}


def public() -> list[dict[str, list[str]]]:
    """The ``security`` of a route anyone may call, whatever ``AGENT_AUTH`` says."""
    return []


# --- shared components -------------------------------------------------------------------------


def _problem_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "Why a request was refused, before anything streamed. Failures after a stream "
        "started are an `error` event followed by `message_complete` instead.",
        "required": ["error", "detail"],
        "properties": {
            "error": {"type": "string", "description": "A stable code (`invalid_field`, `not_found`, …)."},
            "detail": {"type": "string", "description": "For people: what was wrong and how to fix it."},
            "unknown_fields": {"type": "array", "items": {"type": "string"}, "description": "With "
                               "`unknown_field`: the members the body does not have (the first five)."},
            "did_you_mean": {"type": "object", "additionalProperties": {"type": "string"}, "description": "With "
                             "`unknown_field`: the known field each unknown one was probably meant to be."},
        },
    }


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[^A-Za-z0-9]+", name) if part)


def _event_components(data_schemas: Mapping[str, dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(component schemas, event name → ``$ref``) for the SSE catalogue. The event
    schemas are self-contained (no ``$ref``), so they drop in as components as they are."""
    schemas: dict[str, Any] = {}
    catalogue: dict[str, Any] = {}
    frames: list[dict[str, Any]] = []
    for name, raw in data_schemas.items():
        component = f"{_camel(name)}Event"
        schemas[component] = raw
        catalogue[name] = schema_ref(component)
        data = {"type": "string", "contentMediaType": "application/json", "contentSchema": schema_ref(component)}
        frame: dict[str, Any] = {
            "type": "object",
            "title": f"{name} frame",
            "required": ["event", "data"] if name == HEARTBEAT else ["id", "event", "data"],
            "properties": {
                "event": {"const": name},
                "data": data,
                "retry": {"type": "integer", "minimum": 0, "description": "Reconnection delay (ms); first frame only."},
            },
        }
        if name == HEARTBEAT:
            frame["description"] = (
                "Keep-alive after `AGENT_HEARTBEAT_S` of quiet, with a `: ping` comment line for proxies; "
                "no id of its own (not part of the run's log)."
            )
        else:
            frame["properties"]["id"] = {
                "type": "string",
                "pattern": "^[1-9][0-9]*$",
                "description": "The event's position in its run, from 1: send it back as `Last-Event-ID`.",
            }
        frames.append(frame)
    schemas["RunEventFrame"] = {
        "description": "One event of a run's stream (`id:`, `event:`, `data:` lines and a blank line); `data` is "
        "compact JSON. A run's events come in id order, exactly one `message_complete` last: a stream that ends "
        "without it was cut, so reconnect with `Last-Event-ID`. Clients must ignore events they do not know.",
        "oneOf": frames,
    }
    return schemas, catalogue


def _security_schemes(auth_mode: str) -> dict[str, Any]:
    note = (
        "This server runs with `AGENT_AUTH=none`: every caller is one local user and a token, when "
        "sent, is only forwarded to the workflow/table backend."
        if auth_mode == "none"
        else "This server runs with `AGENT_AUTH=jwt`: routes answer 401 without a valid token."
    )
    return {
        "bearerAuth": {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "JWT",
            "description": "A JWT: HS256 with `AGENT_JWT_SECRET`, or RS256/ES256 verified with "
            "`AGENT_JWT_JWKS_URL` or a PEM key; `sub` is the user. " + note,
        }
    }


def _api_version() -> str:
    from importlib import metadata  # at the document's first build: not every start's ~25 ms

    try:
        return metadata.version("agentchat")
    except metadata.PackageNotFoundError:
        return "0.0.0"


# --- the builder ----------------------------------------------------------------------------------


def build_openapi(contributions: Iterable[ApiContribution], *, auth_mode: str) -> dict[str, Any]:
    """The whole document. Two contributions describing the same operation, or the same
    component schema differently, are a programming error (``ValueError``)."""
    event_schemas, catalogue = _event_components(events.event_data_schemas())
    schemas: dict[str, Any] = {"Problem": _problem_schema(), **event_schemas}
    paths: PathItems = {}
    tags: dict[str, dict[str, str]] = {}
    for contribution in (*contributions, self_description()):
        for name, schema in contribution.schemas.items():
            if name in schemas and schemas[name] != schema:
                raise ValueError(f"component schema {name!r} is described twice, differently")
            schemas[name] = schema
        for path, item in contribution.paths.items():
            merged = paths.setdefault(path, {})
            for method, op in item.items():
                if method in merged:
                    raise ValueError(f"{method.upper()} {path} is described twice")
                merged[method] = copy.deepcopy(op)  # the builder adds to it
        for tag in contribution.tags:
            tags.setdefault(tag["name"], tag)
    _add_event_catalogue(paths, catalogue)
    _add_json_only(paths)
    optional_auth = auth_mode == "none"
    return {
        "openapi": OPENAPI_VERSION,
        "jsonSchemaDialect": "https://spec.openapis.org/oas/3.1/dialect/base",
        "info": {
            "title": "agentchat",
            "version": _api_version(),
            "summary": "Async streaming agent chat: runs stream their events as Server-Sent Events.",
            "description": "Start a run (`POST /v1/agent/runs`) and read its events "
            "(`GET /v1/agent/runs/{run_id}/events`), or do both in one request (`POST /v1/agent/chat`). "
            "Every event has an `id` (its position in the run, from 1); reconnect with `Last-Event-ID` "
            "to resume without loss or repeats. A run ends with exactly one `message_complete`. "
            "Refusals before a stream starts are `4xx`/`503` with a `Problem` body. JSON bodies are sent as "
            "`Content-Type: application/json` (`415 unsupported_media_type` otherwise); a native body with a member "
            "it does not have is `400 unknown_field` (`additionalProperties: false`; the OpenAI-compatible and AI "
            "SDK bodies ignore unknown members); a server listening on "
            "loopback only answers this machine's `Host` names (`403 host_not_allowed` on every route "
            "otherwise: `AGENT_ALLOWED_HOSTS`); a POST, PATCH or DELETE a browser says comes from a page of "
            "another origin (`Sec-Fetch-Site`, `Origin`) is `403 cross_origin_request` unless that origin is in "
            "`AGENT_CORS_ORIGINS`.",
        },
        "tags": list(tags.values()),
        # With AGENT_AUTH=none a token is optional ({} = anonymous is fine).
        "security": [{}, {"bearerAuth": []}] if optional_auth else [{"bearerAuth": []}],
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": schemas,
            "securitySchemes": _security_schemes(auth_mode),
            "headers": {
                "RetryAfter": {
                    "description": "Seconds to wait before retrying.",
                    "required": True,
                    "schema": {"type": "string", "pattern": "^[0-9]+$"},
                },
                "WWWAuthenticate": {
                    "description": "`Bearer`: the route wants a bearer token.",
                    "required": True,
                    "schema": {"type": "string"},
                },
            },
        },
        "x-sse-events": catalogue,
    }


def _add_event_catalogue(paths: PathItems, catalogue: dict[str, Any]) -> None:
    """Give every ``text/event-stream`` body its ``x-sse-events`` (event name → ``data`` schema)."""
    for item in paths.values():
        for op in item.values():
            for response in (op.get("responses") or {}).values():
                media = (response.get("content") or {}).get("text/event-stream")
                if media is not None:
                    media.setdefault("x-sse-events", dict(catalogue))


#: What every route that reads a JSON body answers to another ``Content-Type``.
_NOT_JSON = ("The body was not sent as JSON: its `Content-Type` is not `application/json` (or `application/*+json`), "
             "or it has none (`unsupported_media_type`)")


def _add_json_only(paths: PathItems) -> None:
    """Every operation whose body is JSON may answer 415 (``request_admission.read_json_body``),
    in the error shape of its own 400 (OpenAI's on that face); one that already lists a 415
    (the AI SDK's file parts) gets the reason added."""
    for item in paths.values():
        for op in item.values():
            content = (op.get("requestBody") or {}).get("content") or {}
            responses = op.get("responses") or {}
            if "application/json" not in content or "400" not in responses:
                continue
            if "415" in responses:
                responses["415"]["description"] += f"; or {_NOT_JSON[0].lower()}{_NOT_JSON[1:]}"
            else:
                responses["415"] = {**copy.deepcopy(responses["400"]), "description": _NOT_JSON}


# --- /openapi.json and /docs --------------------------------------------------------------------


def self_description() -> ApiContribution:
    text = {"description": "The page", "content": {"text/html": {"schema": {"type": "string"}}}}
    return ApiContribution(
        paths={
            "/openapi.json": {
                "get": {
                    "tags": ["meta"],
                    "operationId": "getOpenapi",
                    "summary": "This description (OpenAPI 3.1)",
                    "security": public(),
                    "responses": {"200": json_response("The OpenAPI document", {"type": "object"})},
                }
            },
            "/docs": {
                "get": {
                    "tags": ["meta"],
                    "operationId": "getDocs",
                    "summary": "This description as a page: routes, parameters, bodies, responses, events",
                    "security": public(),
                    "responses": {"200": text},
                }
            },
        },
        tags=[{"name": "meta", "description": "The description of this API."}],
    )


def openapi_routes(
    describe: Callable[[], dict[str, Any]], render_docs: Callable[[dict[str, Any]], bytes]
) -> list[BaseRoute]:
    """``GET /openapi.json`` and ``GET /docs``: ``describe()`` builds the document and
    ``render_docs`` its page at the first request for either, once for this app. Not at
    start-up: ~45 ms of CPU that every ``agentchat serve`` (a restarted replica, each
    ``--workers`` child, every test's server) paid for two pages few of them serve."""
    rendered: list[tuple[bytes, bytes]] = []

    def pages() -> tuple[bytes, bytes]:
        if not rendered:
            document = describe()
            rendered.append((orjson.dumps(document), render_docs(document)))
        return rendered[0]

    async def openapi_json(request: Request) -> Response:
        return Response(pages()[0], media_type="application/json", headers={"Cache-Control": "no-cache"})

    async def docs(request: Request) -> Response:
        return Response(pages()[1], media_type="text/html; charset=utf-8", headers=SECURITY_HEADERS)

    return [
        Route("/openapi.json", openapi_json, methods=["GET"], name="openapi"),
        Route("/docs", docs, methods=["GET"], name="docs"),
    ]


def route_operations(routes: Iterable[BaseRoute]) -> set[tuple[str, str]]:
    """``(path, method)`` of everything the router serves, in OpenAPI spelling: ``HEAD``
    (Starlette adds it to every ``GET``) left out, a ``Mount`` as ``{prefix}/{path}``."""
    out: set[tuple[str, str]] = set()
    for route in routes:
        if isinstance(route, Route):
            path = re.sub(r"\{([^}:]+):[^}]+\}", r"{\1}", route.path)
            for method in route.methods or ("GET",):
                if method != "HEAD":
                    out.add((path, method.lower()))
        elif isinstance(route, Mount):
            out.add((f"{route.path}/{{path}}", "get"))
    return out


def documented_operations(document: Mapping[str, Any]) -> set[tuple[str, str]]:
    return {
        (path, method)
        for path, item in document.get("paths", {}).items()
        for method in item
        if method in HTTP_METHODS
    }
