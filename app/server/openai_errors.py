"""OpenAI's error shape, ``{"error": {"message", "type", "param", "code"}}``, for the
OpenAI-compatible face: an ``HTTPProblem`` that also names the request field at fault."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from app.server.problems import HTTPProblem, ORJSONResponse, as_said

_STATUS_TYPES = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error"}
#: The paths of the OpenAI-compatible face: a refusal before any route (the Host and
#: cross-origin guards) answers there in OpenAI's shape, as its clients read it.
OPENAI_PATHS = ("/v1/chat/completions", "/v1/models")


class OpenAIProblem(HTTPProblem):
    """An ``HTTPProblem`` that also names the request field at fault (OpenAI's ``param``)."""

    def __init__(self, status: int, error: str, detail: str, param: str | None = None) -> None:
        super().__init__(status, error, detail)
        self.param = param


def error_body(message: str, code: str, status: int, param: str | None = None) -> dict[str, Any]:
    kind = _STATUS_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_response(exc: HTTPProblem) -> Response:
    said = as_said(exc)  # the words and headers every face gives (problems.as_said)
    body = error_body(said.detail, said.error, said.status, getattr(exc, "param", None))
    body["error"] = {**said.fields, **body["error"]}  # e.g. approval_pending's run and call
    return ORJSONResponse(body, said.status, headers=said.headers)
