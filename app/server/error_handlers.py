"""The app's exception handlers: every error a route raises becomes a JSON ``{"error",
"detail"}`` answer — an ``HTTPProblem`` as itself, the database away as 503 with
``Retry-After``, unknown routes and methods as 404/405, anything else as a logged 500.

Apart from the routes because the factory installs them for every route of every face.
"""

from __future__ import annotations

import logging

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Route

from app.server.problems import LOST_DETAIL, HTTPProblem, ORJSONResponse, as_said
from storage.errors import DatabaseLost

log = logging.getLogger("agentchat.http")


async def problem(request: Request, exc: Exception) -> Response:
    """An ``HTTPProblem`` as itself (``as_said``: a refusal made of a removed database
    file says a restart is needed)."""
    assert isinstance(exc, HTTPProblem)
    return as_said(exc).response()


async def storage_unavailable(request: Request, exc: Exception) -> Response:
    """Any route whose database is away — a write given up, SQLite's file removed or
    replaced, PostgreSQL's pool without a connection — answers 503 with ``Retry-After``,
    never 500. A removed or replaced file (``DatabaseLost``) is said to need a restart:
    "retry shortly" would send clients back for as long as nobody restarts the server."""
    log.warning("database unavailable; answered 503", extra={"path": request.url.path, "error": str(exc)[:300]})
    lost = isinstance(exc, DatabaseLost)
    detail = LOST_DETAIL if lost else "the service cannot reach its database right now; retry shortly"
    return ORJSONResponse({"error": "storage_unavailable", "detail": detail}, 503, headers={"Retry-After": "5"})


async def not_found(request: Request, exc: Exception) -> Response:
    return ORJSONResponse({"error": "not_found", "detail": f"no route for {request.url.path}"}, 404)


def _allowed_methods(request: Request) -> str | None:
    """Every method some route serves at this path, for ``Allow`` (RFC 9110 §15.5.6: the
    target resource's methods). Starlette's router names only the first route whose path
    matched, and a path served by several routes (GET, PATCH and DELETE of a conversation,
    one route each) was said to allow GET alone (found by schemathesis' Allow check)."""
    methods: set[str] = set()
    for route in getattr(request.app, "routes", ()):
        if isinstance(route, Route) and route.methods and route.matches(request.scope)[0] is not Match.NONE:
            methods |= route.methods
    return ", ".join(sorted(methods)) or None


async def method_not_allowed(request: Request, exc: Exception) -> Response:
    # Starlette's router raises the 405 with the route's ``Allow`` header; it names all the path's methods.
    headers = dict(exc.headers or {}) if isinstance(exc, HTTPException) else None
    allow = _allowed_methods(request)
    if headers is not None and allow is not None:
        headers["Allow"] = allow
    allowed = f"; allowed: {headers['Allow']}" if headers and "Allow" in headers else ""
    detail = f"{request.method} is not allowed here{allowed}"
    return ORJSONResponse({"error": "method_not_allowed", "detail": detail}, 405, headers=headers)


async def server_error(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error", exc_info=exc)
    return ORJSONResponse({"error": "internal_error", "detail": "unexpected server error"}, 500)
