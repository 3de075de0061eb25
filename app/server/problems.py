"""The error answer every route gives before a stream starts: ``4xx`` with ``{"error", "detail"}``.

Kept apart from ``app/server/http.py`` so small checkers (``app/server/bounds.py``) can raise it
without importing the routes, and the routes can use the checkers without a cycle.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import JSONResponse

from storage.errors import DatabaseLost

#: What a refusal says when the database file was removed or replaced under the server:
#: waiting cannot help, only a restart opens the file at the path again.
LOST_DETAIL = (
    "the database file was removed or replaced under the running server: nothing can be read "
    "or stored until the server is restarted (retrying helps only once it has been)"
)
#: The challenge every 401 carries (RFC 6750 §3), whichever route refused.
BEARER_CHALLENGE = "Bearer"
#: How deep the chain of exceptions behind a refusal is looked through for its cause.
_CAUSE_DEPTH = 8


class ORJSONResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


class HTTPProblem(Exception):
    """``fields``: what a client acts on beside the words (``approval_pending`` names the
    waiting run and call), members of the answer next to ``error`` and ``detail``."""

    def __init__(
        self,
        status: int,
        error: str,
        detail: str,
        headers: dict[str, str] | None = None,
        *,
        fields: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status, self.error, self.detail, self.headers = status, error, detail, headers or {}
        self.fields = fields or {}

    def response(self) -> ORJSONResponse:
        body = {**self.fields, "error": self.error, "detail": self.detail}
        return ORJSONResponse(body, self.status, headers=self.headers)


def _lost_behind(exc: BaseException) -> bool:
    """Whether ``exc`` was raised while handling a ``DatabaseLost`` (``raise ... from
    None`` hides the cause from a traceback but still keeps it as ``__context__``)."""
    seen: BaseException | None = exc
    for _ in range(_CAUSE_DEPTH):
        if seen is None:
            return False
        if isinstance(seen, DatabaseLost):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def as_said(exc: HTTPProblem) -> HTTPProblem:
    """The refusal as a client is told it, on every face (the agent's handler and the
    OpenAI face's error shape both answer through this).

    * Each route words its own ``storage_unavailable`` ("…; retry shortly") when a store
      raises; one made of a ``DatabaseLost`` (the SQLite file removed or replaced under
      the server) says instead that only a restart helps — retrying shortly never would.
      Its ``Retry-After`` stays: an orchestrator may restart the process meanwhile.
    * A 401 always carries ``WWW-Authenticate: Bearer`` (RFC 6750 §3): the stream-token
      refusal had none, so a route's 401 no longer depends on its author adding it."""
    headers = exc.headers
    if exc.status == 401 and not any(name.lower() == "www-authenticate" for name in headers):
        headers = {**headers, "WWW-Authenticate": BEARER_CHALLENGE}
    lost = exc.error == "storage_unavailable" and _lost_behind(exc)
    if not lost and headers is exc.headers:
        return exc
    detail = LOST_DETAIL if lost else exc.detail
    return HTTPProblem(exc.status, exc.error, detail, headers, fields=exc.fields)
