"""What the guards in front of every route share (``host_check``, ``origin_check``).

They are pure ASGI (a streamed answer passes through them untouched), so they read a
header from the connection scope themselves, and they refuse before any route runs, so
they pick the error shape the path's clients read: OpenAI's on the OpenAI-compatible
face, ours everywhere else.
"""

from __future__ import annotations

from starlette.types import Scope

from app.server.openai_errors import OPENAI_PATHS, error_body
from app.server.problems import ORJSONResponse


def scope_header(scope: Scope, name: bytes) -> str | None:
    """The first value of header ``name`` (lower case), as latin-1 text; ``None`` when absent."""
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def refusal(scope: Scope, status: int, code: str, detail: str) -> ORJSONResponse:
    """A guard's refusal in the shape the request's path is answered in."""
    if str(scope.get("path", "")).startswith(OPENAI_PATHS):
        return ORJSONResponse(error_body(detail, code, status), status)
    return ORJSONResponse({"error": code, "detail": detail}, status)


__all__ = ["refusal", "scope_header"]
