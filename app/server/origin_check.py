"""Unsafe requests a web page on another origin sends are refused (cross-site request
forgery): ``403 cross_origin_request``, before any route runs.

A page the developer visits may send a local ``AGENT_AUTH=none`` server (or any server
its browser reaches) a POST no CORS preflight guards: a form, so ``multipart/form-data``
(an attachment upload to a conversation id of its choosing), a form-encoded or
``text/plain`` body, or none (a run's cancel). JSON routes already refuse those types
(``415``, ``request_admission``); the routes that read no JSON body did not. The page
cannot read the answer, but the request was served.

Browsers say where a request comes from. ``Sec-Fetch-Site`` (every current browser, to a
secure context: https, ``localhost``, loopback addresses) is ``same-origin``, ``same-site``,
``cross-site`` or ``none`` (the user typed the address); ``Origin`` is on every POST, PATCH
and DELETE a page sends. So, as Go's ``net/http.CrossOriginProtection`` and Django's CSRF
origin check do, a request with an unsafe method (not GET, HEAD, OPTIONS) is refused when

- its ``Sec-Fetch-Site`` is anything but ``same-origin`` or ``none`` (``same-site`` too: a
  page on another port of ``localhost`` is same-site), or
- it has no ``Sec-Fetch-Site`` (an older browser, or an http server under another name
  than a loopback one, where browsers do not send it) and its ``Origin`` is not this
  server's own origin (the request's scheme and its ``Host``, default port omitted);

unless its ``Origin`` is one of ``AGENT_CORS_ORIGINS``: pages the operator trusts to call
the API (they pass CORS too). With ``*`` there any page may call it on purpose, and there
is no check at all. A request with neither header is not a browser's page (curl, the SDKs,
a server-side proxy) and passes: such a caller sends what it likes and is no forgery.

Why not the ``Origin``/``Referer`` comparison alone, or a token: a token needs every client
(the SDKs, curl) to fetch and echo it, for a threat only browsers pose; browsers already
state the relation in a header the page cannot set.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from app.server.guards import refusal, scope_header
from app.server.problems import ORJSONResponse

log = logging.getLogger("agentchat.http")

#: Methods a page may send anywhere without effect on the server (they change nothing here).
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: ``Sec-Fetch-Site`` values that say the request is the server's own page's, or the user's.
_OWN = frozenset({"same-origin", "none"})
#: Origins warned about once per app (a hostile page may send thousands of requests); the
#: rest of the refusals are logged at INFO.
_WARNED_AT_MOST = 64
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class OriginRule:
    """The origins whose pages may send unsafe requests besides the server's own:
    ``AGENT_CORS_ORIGINS``, compared as the CORS middleware compares them (exactly)."""

    trusted: frozenset[str]

    def refuses(self, method: str, fetch_site: str | None, origin: str | None, scheme: str,
                host: str | None) -> bool:
        """Whether a request of this method and these headers came from another origin's page
        the operator did not trust, and is refused."""
        if method.upper() in SAFE_METHODS:
            return False
        if fetch_site is not None:
            if fetch_site.strip().lower() in _OWN:
                return False
        elif origin is None or _same_origin(origin, scheme, host):
            return False  # no browser's page, or the server's own
        return origin not in self.trusted


def origin_rule(cors_origins: tuple[str, ...]) -> OriginRule | None:
    """The rule for ``AGENT_CORS_ORIGINS``, or ``None`` when any page may call (``*``)."""
    if "*" in cors_origins:
        return None
    return OriginRule(frozenset(cors_origins))


def _same_origin(origin: str, scheme: str, host: str | None) -> bool:
    """Whether ``Origin`` names the request's own ``scheme://Host``; ``null`` (a sandboxed or
    ``file:`` page) and anything unparsable never do."""
    if host is None:
        return False
    own = _triple(scheme, "//" + host.strip())
    theirs = _triple(None, origin.strip())
    return own is not None and own == theirs


def _triple(scheme: str | None, text: str) -> tuple[str, str, int] | None:
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return None
    kind = (scheme or parts.scheme).lower()
    name = (parts.hostname or "").removesuffix(".")
    if kind not in _DEFAULT_PORTS or not name or parts.path or parts.query:
        return None
    return kind, name, port if port is not None else _DEFAULT_PORTS[kind]


class OriginCheck:
    """Pure ASGI (streams pass through untouched): an unsafe request the rule refuses is
    answered ``403 cross_origin_request`` before any route runs, its body unread."""

    def __init__(self, app: ASGIApp, rule: OriginRule) -> None:
        self.app, self.rule = app, rule
        self.warned: set[str] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            origin = scope_header(scope, b"origin")
            refused = self.rule.refuses(
                str(scope.get("method", "GET")), scope_header(scope, b"sec-fetch-site"), origin,
                str(scope.get("scheme", "http")), scope_header(scope, b"host"),
            )
            if refused:
                await self._refuse(scope, origin)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _refuse(self, scope: Scope, origin: str | None) -> ORJSONResponse:
        shown = _shortened(origin) if origin is not None else "another site"
        detail = (
            f"this server does not take {scope.get('method', 'POST')} requests from a page of another origin "
            f"({shown!r}; a guard against cross-site request forgery); to let that origin's pages call it, "
            "add the origin to AGENT_CORS_ORIGINS (comma-separated)"
        )
        fields = {"origin": shown, "path": scope.get("path", ""), "method": scope.get("method", "")}
        if len(self.warned) < _WARNED_AT_MOST and shown not in self.warned:
            self.warned.add(shown)
            log.warning("refused a cross-origin request (AGENT_CORS_ORIGINS)", extra=fields)
        else:
            log.info("refused a cross-origin request (AGENT_CORS_ORIGINS)", extra=fields)
        return refusal(scope, 403, "cross_origin_request", detail)


def _shortened(text: str) -> str:
    return text if len(text) <= 100 else text[:100] + "…"


__all__ = ["SAFE_METHODS", "OriginCheck", "OriginRule", "origin_rule"]
