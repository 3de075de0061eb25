"""Who and what a log line is about: ``run_id``, ``conversation_id``, ``user``, ``route``.

Every line logged while a request is handled or a run executes carries these fields
when they are known, without each ``log.info`` call naming them:

* ``AccessLog`` (pure ASGI middleware, outermost) opens a ``LogFields`` for each HTTP
  request — the matched route template and its ``run_id`` / ``conversation_id`` path
  parameters — and, when the response has ended (for a stream: when the stream ends),
  writes one access-log line: method, path, a query with its secrets masked, status,
  ``duration_ms``, ``bytes``, user and client address.
* The authenticator notes the caller (``note_user``) and admission notes the new run
  (``note_run``) on the request's fields.
* ``bind_run`` gives a run's task fields of its own (every run: new, resumed after a
  restart, or taken over from another replica), so lines of the agent loop, the model
  and the tools carry the run's ids long after the request that started it is gone.
* ``ContextFilter`` (on the log handler) copies the fields onto each record; fields a
  call passes itself (``extra={"run_id": …}``) win.

The fields live in a ``ContextVar`` — the only module-level object here, and it holds
no state of its own: each request and each run task sees its own value (asyncio copies
the context into every task), so apps in one process never see each other's fields.
Nothing here ever reads headers or bodies: tokens and messages cannot reach a line.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any, Final

from app.ops.masking import mask_query

FIELDS: Final = ("run_id", "conversation_id", "user", "route")

access_log = logging.getLogger("agentchat.access")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


@dataclass(slots=True)
class LogFields:
    """The fields of one request or one run (mutable: learned as handling goes on)."""

    run_id: str | None = None
    conversation_id: str | None = None
    user: str | None = None
    route: str | None = None


_current: ContextVar[LogFields | None] = ContextVar("agentchat_log_fields", default=None)


def current() -> LogFields | None:
    return _current.get()


def note_user(user_id: str) -> None:
    """The caller of the request being handled is known (set by the authenticator)."""
    fields = _current.get()
    if fields is not None:
        fields.user = user_id


def note_run(run_id: str, conversation_id: str) -> None:
    """The request being handled started (or resumed) this run."""
    fields = _current.get()
    if fields is not None:
        fields.run_id, fields.conversation_id = run_id, conversation_id


def bind_run(run_id: str, conversation_id: str, user_id: str) -> None:
    """Give the current task (a run's) its own fields; the route it was started from,
    if any, is kept. Call it first thing in the run's task: the task's context is its
    own copy, so the request's fields are left as they were."""
    outer = _current.get()
    _current.set(LogFields(run_id, conversation_id, user_id, outer.route if outer is not None else None))


class ContextFilter(logging.Filter):
    """Copies the current request's or run's fields onto every record it passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        fields = _current.get()
        if fields is not None:
            for name in FIELDS:
                value = getattr(fields, name)
                if value is not None and name not in record.__dict__:
                    setattr(record, name, value)
        return True


def safe_query(raw: bytes) -> str | None:
    """The query string with the values of every parameter whose name suggests a
    credential masked (``jwt=***``, ``client_secret=***``: ``app.ops.masking``)."""
    return mask_query(raw)


def _route_of(scope: Scope) -> tuple[str | None, dict[str, Any]]:
    """The template of the route the request will reach, and its path parameters."""
    # Here, not at the top: every agentchat command configures its logs through this
    # module (``app.ops.logs``), and only the served app needs Starlette (~45 ms of CPU
    # of ``agentchat --help``'s ~270). Once imported, this line is a dictionary lookup.
    from starlette.routing import Match

    app = scope.get("app")
    partial: tuple[str | None, dict[str, Any]] | None = None
    for route in getattr(app, "routes", ()):
        match, child = route.matches(scope)
        if match is Match.FULL:
            return getattr(route, "path", None), dict(child.get("path_params") or {})
        if match is Match.PARTIAL and partial is None:  # the path matches, the method does not
            partial = getattr(route, "path", None), dict(child.get("path_params") or {})
    return partial or (None, {})


#: The scope key of the request's :class:`DirectSend` (set by ``AccessLog``).
DIRECT_SEND: Final = "agentchat.direct_send"


class DirectSend:
    """How a streaming response writes its body frames past the middleware between
    ``AccessLog`` and the route (Starlette's exception layers, CORS, the JWKS prefetch):
    each of them wraps ``send`` but looks only at the response's start message, and at
    one frame per streamed token three wrappers were measurable (issue 23). The start
    message still goes through all of them; a body written here is counted (``sent``)
    into the access line's ``bytes``."""

    __slots__ = ("send", "sent")

    def __init__(self, send: Send) -> None:
        self.send, self.sent = send, 0


class AccessLog:
    """ASGI middleware: the request's log fields, and one access-log line per request,
    written when its response has ended (a stream's end, or its client leaving)."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        route, params = _route_of(scope)
        fields = LogFields(
            run_id=_str(params.get("run_id")), conversation_id=_str(params.get("conversation_id")), route=route
        )
        token: Token[LogFields | None] | None = _current.set(fields)
        status: int | None = None
        sent = 0
        direct = scope[DIRECT_SEND] = DirectSend(send)

        async def counting_send(message: Message) -> None:
            nonlocal status, sent
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body":
                sent += len(message.get("body", b""))
            await send(message)

        error: str | None = None
        try:
            await self.app(scope, receive, counting_send)
        except BaseException as exc:
            error = type(exc).__name__
            # Keep the fields for the server's error handler (outside this middleware),
            # whose traceback line then names the route too; the request's task ends there.
            token = None
            raise
        finally:
            client = scope.get("client")
            line: dict[str, Any] = {
                "method": scope.get("method"),
                "path": scope.get("path"),
                "query": safe_query(scope.get("query_string", b"")),
                # No response started: the server's error handler answers 500.
                "status": status if status is not None else 500,
                "duration_ms": round((time.perf_counter() - started) * 1000, 2),
                "bytes": sent + direct.sent,
                "client_ip": client[0] if client else None,
            }
            if error is not None:
                line["error"] = error
            access_log.info("%s %s %s", line["method"], line["path"], line["status"], extra=line)
            if token is not None:
                _current.reset(token)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None
