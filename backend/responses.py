"""JSON responses, the Ichor error body and request-body parsing.

Every error leaves the backend as ``{"code": ..., "message": ...}`` (plus optional detail
keys), the shape the tool executor turns into ``HTTP <status>: <body>`` for the model.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

MAX_BODY_BYTES = 1024 * 1024
# orjson encodes at most 254 levels and the validators recurse; no real workflow or table
# config comes close to this.
MAX_JSON_DEPTH = 64
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

_STATUS_CODES = {
    400: "invalid_argument",
    401: "unauthenticated",
    403: "permission_denied",
    404: "not_found",
    405: "method_not_allowed",
    409: "already_exists",
    413: "too_large",
    415: "unsupported_media_type",
}


class JSONResponse(Response):
    """orjson-encoded JSON response."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


class ApiError(Exception):
    """An error with an HTTP status and an Ichor error code."""

    def __init__(self, status: int, code: str, message: str, **detail: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.detail = detail

    def to_response(self) -> JSONResponse:
        body: dict[str, Any] = {"code": self.code, "message": self.message, **self.detail}
        headers = {"WWW-Authenticate": "Bearer"} if self.status == 401 else None
        return JSONResponse(body, status_code=self.status, headers=headers)


def invalid_argument(message: str, **detail: Any) -> ApiError:
    return ApiError(400, "invalid_argument", message, **detail)


def not_found(message: str) -> ApiError:
    return ApiError(404, "not_found", message)


def permission_denied(message: str) -> ApiError:
    return ApiError(403, "permission_denied", message)


async def handle_api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return exc.to_response()


async def handle_http_exception(request: Request, exc: Exception) -> Response:
    """Starlette's own 404/405/413 as JSON error bodies instead of plain text."""
    assert isinstance(exc, HTTPException)
    code = _STATUS_CODES.get(exc.status_code, "unknown")
    return JSONResponse(
        {"code": code, "message": str(exc.detail)},
        status_code=exc.status_code,
        headers=exc.headers,
    )


async def read_json_object(request: Request) -> dict[str, Any]:
    """The request body as a JSON object, or a 400 saying why it is not one.

    The body is read incrementally and refused with a 413 as soon as it passes
    ``MAX_BODY_BYTES``, so an enormous upload is never buffered whole.
    """
    too_large = ApiError(413, "too_large", f"request body exceeds {MAX_BODY_BYTES} bytes")
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise too_large
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        raise invalid_argument("request body is required")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise invalid_argument(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise invalid_argument("request body must be a JSON object")
    check_json(body)
    return body


def check_json(value: Any, max_depth: int = MAX_JSON_DEPTH) -> None:
    """A 400 for a document nested deeper than ``max_depth`` or holding an integer outside
    SQLite's signed 64-bit range (orjson decodes up to 2**64-1 as ``int``). Iterative."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            if type(node) is int and not INT64_MIN <= node <= INT64_MAX:
                raise invalid_argument(f"integers must lie between {INT64_MIN} and {INT64_MAX}")
            continue
        if depth > max_depth:
            raise invalid_argument(f"request body is nested deeper than {max_depth} levels")
        stack.extend((child, depth + 1) for child in children)


def dumps_text(value: Any) -> str:
    """Compact JSON text for a TEXT column."""
    return orjson.dumps(value).decode()


def loads_or_none(text: str | None) -> Any:
    return None if text is None else orjson.loads(text)
