"""A request before its run: the app's services, the caller (credentials, rate-limit key),
the JSON body within its limits, the ``Idempotency-Key`` and ``Last-Event-ID`` headers, and
``admit`` — the one fixed order of checks every chat face passes.

Apart from the routes so every face (native, OpenAI-compatible, AI SDK, the KB, history
and admin routes) parses and refuses requests the same way without importing the routes.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import orjson
from starlette.requests import ClientDisconnect, Request

from app.runs.records import ChatInput, could_be_run_id
from app.server import storage_budget
from app.server.bounds import MAX_JSON_DEPTH, MAX_SAFE_INTEGER, check_json, parse_int
from app.server.chat_request import parse_chat_input
from app.server.identity import AuthError, Identity
from app.server.problems import HTTPProblem

if TYPE_CHECKING:
    from app.config import Settings
    from app.server.services import Services

log = logging.getLogger("agentchat.http")

IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")  # visible ASCII, as HTTP header tokens go
#: A media type taken as JSON (case-insensitive, as media types are): ``application/json``
#: and the structured-syntax ``+json`` types (``application/merge-patch+json``, …).
_JSON_MEDIA_TYPE = re.compile(r"application/(?:[a-z0-9!#$&^_.+-]+\+)?json", re.IGNORECASE)
T = TypeVar("T")


def services(request: Request) -> Services:
    return request.app.state.services  # type: ignore[no-any-return]


async def read_json_body(request: Request, limit: int, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """The body as JSON: sent as JSON (``Content-Type``, ``json_media_type``), at most
    ``limit`` bytes, nested at most ``max_depth`` levels, its integers within SQLite's
    range (``app/server/bounds.py``) — else a ``4xx`` saying which."""
    declared_type = request.headers.get("content-type", "").strip()
    if declared_type and not json_media_type(declared_type):
        raise _not_json(declared_type)  # refused before a byte of the body is read
    declared = request.headers.get("content-length")
    if declared and declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise HTTPProblem(413, "payload_too_large", f"the body is larger than {limit} bytes")
    body = await _read_body(request, limit, services(request).settings.body_timeout_s)
    if not declared_type and body.strip():
        raise _not_json(None)
    if not body.strip():
        raise HTTPProblem(400, "invalid_json", "the body is empty; send a JSON object")
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if str(exc).startswith("depth limit exceeded"):  # orjson stops at 1024 levels, past any max_depth
            raise HTTPProblem(400, "too_deep", f"the body is nested deeper than {max_depth} levels") from None
        raise HTTPProblem(400, "invalid_json", f"the body is not valid JSON: {_json_error(body, exc)}") from None
    check_json(value, max_depth=max_depth)
    return value


def json_media_type(content_type: str) -> bool:
    """``application/json`` or ``application/<anything>+json``, parameters (``charset``)
    allowed. Why every JSON route insists: a browser page may send any site a "simple"
    request — a form post (``text/plain``, ``application/x-www-form-urlencoded``) or a
    ``fetch`` of a ``Blob`` without a type — with no CORS preflight; taking its body as
    JSON let any page the developer visits start runs on a local ``AGENT_AUTH=none``
    server (docs/security.md). ``application/json`` needs a preflight, which a
    cross-origin page only passes when ``AGENT_CORS_ORIGINS`` names it."""
    return _JSON_MEDIA_TYPE.fullmatch(content_type.split(";", 1)[0].strip()) is not None


def _not_json(content_type: str | None) -> HTTPProblem:
    sent = "no Content-Type" if content_type is None else f"Content-Type {content_type[:80]!r}"
    return HTTPProblem(
        415, "unsupported_media_type", f"the body must be JSON sent with Content-Type: application/json (got {sent})",
        {"Accept": "application/json"},
    )


def _json_error(body: bytes, exc: orjson.JSONDecodeError) -> str:
    """What is wrong with ``body``: orjson says "str is not valid UTF-8: surrogates not
    allowed" for any byte that is not UTF-8, surrogates or not; name the byte instead."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as bad:
        return f"it is not UTF-8 text (byte 0x{body[bad.start]:02x} at offset {bad.start})"
    return str(exc)


async def _read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    """The whole body within ``timeout_s`` (a client that trickles it gets 408 and the
    connection is closed); a client that leaves mid-body is one INFO line, no traceback."""
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise HTTPProblem(
                        413, "payload_too_large", f"the body is larger than {limit} bytes", {"Connection": "close"}
                    )
                chunks.append(chunk)
    except TimeoutError:
        log.info(
            "request body too slow; closing",
            extra={"path": request.url.path, "client": _peer(request), "received": size, "timeout_s": timeout_s},
        )
        raise HTTPProblem(
            408, "body_timeout", f"the body did not arrive within {timeout_s:g} s", {"Connection": "close"}
        ) from None
    except ClientDisconnect:
        log.info(
            "client left before sending its whole body",
            extra={"path": request.url.path, "client": _peer(request), "received": size},
        )
        raise HTTPProblem(400, "client_disconnected", "the client disconnected", {"Connection": "close"}) from None
    return b"".join(chunks)


def _peer(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def identify(request: Request) -> Identity:
    try:
        return services(request).auth.identify(request.headers.get("authorization"))
    except AuthError as exc:
        raise HTTPProblem(exc.status, "unauthenticated", str(exc), {"WWW-Authenticate": "Bearer"}) from None


def run_id_param(request: Request) -> str:
    """The ``{run_id}`` of a route's path; one no run can have (``could_be_run_id``) is
    the 404 an unknown or another user's run gets, before any storage read."""
    run_id = request.path_params["run_id"]
    if not could_be_run_id(run_id):
        raise HTTPProblem(404, "not_found", "no such run")
    return str(run_id)


def rate_limit_key(request: Request, ident: Identity) -> str:
    """Whose budget a request spends: the authenticated user; with ``AGENT_AUTH=none``
    (one shared local user) the client's address, so one client cannot lock out the rest."""
    if services(request).auth.mode == "none":
        return f"addr:{_peer(request)}"
    return f"user:{ident.user_id}"


def idempotency_key(request: Request) -> str | None:
    raw = request.headers.get("idempotency-key")
    if raw is None:
        return None
    key = raw.strip()
    if not IDEMPOTENCY_KEY.match(key):
        raise HTTPProblem(400, "invalid_header", "Idempotency-Key must be 1-255 visible ASCII characters")
    return key


async def admit(
    request: Request, parse: Callable[[dict[str, Any], Settings], T], *, max_body: int | None = None
) -> tuple[Services, Identity, T]:
    """Every chat request of every face (native, OpenAI-compatible, AI SDK) passes the same
    checks in one fixed order: shutting down → 503, credentials → 401, rate → 429, the
    body (size, arrival time, JSON, nesting, integers) → 4xx, not a JSON object → 400,
    then the face's own fields (``parse``) → 400. The run limit is not checked here: a
    retry that resumes its run does not start another (``check_run_limit``).

    The request's storage budget (``storage_budget``: ``AGENT_DB_POOL_TIMEOUT_S`` for all
    its waits on the database until its client is acknowledged) opens here, at its
    first storage step; reading the body does not spend it. ``max_body``: a face whose
    body may carry a file (the AI SDK's ``file`` parts) reads more than
    ``AGENT_MAX_BODY_BYTES``."""
    svc = services(request)
    if svc.runs.closing:
        raise HTTPProblem(503, "shutting_down", "the server is restarting; retry shortly", {"Retry-After": "2"})
    ident = identify(request)
    deadline = storage_budget.start(svc.settings.db_pool_timeout_s)
    wait = await svc.limits.check_rate(rate_limit_key(request, ident), deadline=deadline)
    if wait is not None:
        raise HTTPProblem(429, "rate_limited", "too many requests; slow down", {"Retry-After": str(int(wait))})
    with storage_budget.paused():
        body = await read_json_body(request, max_body or svc.settings.max_body_bytes)
    if not isinstance(body, dict):
        raise HTTPProblem(400, "invalid_request", "the body must be a JSON object")
    return svc, ident, parse(body, svc.settings)


async def admit_request(request: Request) -> tuple[Identity, ChatInput]:
    """A native chat request admitted (``admit``). Its ``conversation_id`` names the
    caller's own conversation: ids are a namespace per user, nothing to check here."""
    _, ident, chat = await admit(
        request, lambda body, settings: parse_chat_input(body, max_message_chars=settings.max_message_chars)
    )
    return ident, chat


def events_after(request: Request) -> int:
    """The last event id the client has seen (``Last-Event-ID`` header, else ``?after=``); 0 = all."""
    if request.headers.get("last-event-id"):
        return parse_int(request.headers["last-event-id"], name="Last-Event-ID", lo=0, hi=MAX_SAFE_INTEGER)
    return parse_int(request.query_params.get("after"), name="after", lo=0, hi=MAX_SAFE_INTEGER, default=0)
