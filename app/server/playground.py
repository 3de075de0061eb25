"""The playground: one static page (HTML + JS + CSS, no build step) served at ``GET /``.

It is a plain ``EventSource`` client of ``/v1/agent/runs``, so it doubles as the
reference for browser integrations. The page is strict about what it runs: a
Content-Security-Policy that allows only its own script and style files and requests
to this origin, so model output can never become code even if a renderer slipped.
``Referrer-Policy: no-referrer`` keeps stream tokens (in ``stream_url``) out of the
``Referer`` header when a user follows a source link.
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Message, Receive, Scope, Send

STATIC_DIR = Path(__file__).with_name("static")

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


async def index(request: Request) -> Response:
    """The playground page."""
    return FileResponse(STATIC_DIR / "index.html", media_type="text/html; charset=utf-8", headers=SECURITY_HEADERS)


async def favicon(request: Request) -> Response:
    """The page links ``/static/favicon.svg``; browsers that ask for ``/favicon.ico`` get it too."""
    headers = {**SECURITY_HEADERS, "Cache-Control": "public, max-age=86400"}
    return FileResponse(STATIC_DIR / "favicon.svg", media_type="image/svg+xml", headers=headers)


class _StaticWithHeaders(StaticFiles):
    """``StaticFiles`` (which refuses paths outside its directory) plus our headers."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {k.lower() for k, _ in headers}
                for name, value in SECURITY_HEADERS.items():
                    key = name.lower().encode()
                    if key not in present:
                        headers.append((key, value.encode()))
                message = {**message, "headers": headers}
            await send(message)

        await super().__call__(scope, receive, send_with_headers)


def playground_routes() -> list[BaseRoute]:
    """``GET /`` (the page), ``GET /favicon.ico`` and ``GET /static/...`` (script, style, icon)."""
    return [
        Route("/", index, methods=["GET"], name="playground"),
        Route("/favicon.ico", favicon, methods=["GET"], name="favicon"),
        Mount("/static", app=_StaticWithHeaders(directory=STATIC_DIR), name="static"),
    ]
