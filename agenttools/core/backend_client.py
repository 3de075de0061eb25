"""HTTP client for the workflow/table backend, scoped to one caller.

Why a wrapper around the shared ``httpx.AsyncClient``: every call the tools make must
forward the caller's ``Authorization`` unchanged, escape everything the model controls
before it reaches a URL, stop reading past a size cap, give up after a deadline, and turn
every failure into one readable sentence the model can act on (``HTTP 404: …``). Doing that
in one place keeps the tool handlers free of transport details.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import orjson

__all__ = ["BackendClient", "BackendError", "build_path", "encode_query"]

_TAG_RE = re.compile(r"<[^>]*>")
_SPACE_RE = re.compile(r"\s+")
_ERROR_TEXT_LIMIT = 300


class BackendError(Exception):
    """A backend call failed; ``str(err)`` is the sentence the model reads."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def _segment(value: str) -> str:
    """One path segment, percent-encoded so it cannot add, remove or climb segments.

    ``quote(…, safe="")`` leaves dots alone, and httpx (like browsers) collapses literal
    ``.``/``..`` segments, so an all-dots segment is encoded explicitly.
    """
    if value == "":
        raise BackendError("an empty value cannot be used in a backend path")
    encoded = quote(value, safe="")
    if set(encoded) == {"."}:
        encoded = encoded.replace(".", "%2E")
    return encoded


def build_path(*segments: str) -> str:
    """``build_path("v1", "data", name)`` → ``/v1/data/<escaped name>``."""
    return "/" + "/".join(_segment(str(s)) for s in segments)


def encode_query(params: Mapping[str, Any] | None) -> str:
    """Query string with every key and value escaped; ``None`` values are left out."""
    if not params:
        return ""
    parts = [
        f"{quote(str(k), safe='')}={quote(str(v), safe='')}"
        for k, v in params.items()
        if v is not None
    ]
    return "?" + "&".join(parts) if parts else ""


def _trim(text: str, limit: int = _ERROR_TEXT_LIMIT) -> str:
    text = _SPACE_RE.sub(" ", _TAG_RE.sub(" ", text)).strip()
    return text if len(text) <= limit else text[:limit].rstrip() + "…"


def _error_message(body: bytes, content_type: str) -> str:
    """The backend's own message from a JSON error body, else a trimmed text."""
    if body:
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            data = None
        if isinstance(data, dict):
            for key in ("message", "error", "detail"):
                value = data.get(key)
                if isinstance(value, str) and value:
                    return _trim(value)
            return _trim(orjson.dumps(data).decode())
        if data is not None:
            return _trim(orjson.dumps(data).decode())
        text = _trim(body.decode("utf-8", "replace"))
        if "html" in content_type:
            return f"non-JSON error page ({text})" if text else "non-JSON error page"
        if text:
            return text
    return "no error message"


@dataclass(slots=True)
class BackendClient:
    """Calls the backend as one caller. Cheap to build: one per tool call."""

    http: httpx.AsyncClient
    base_url: str
    authorization: str | None
    timeout_s: float = 15.0
    max_response_bytes: int = 2_000_000

    async def get(self, path: str, query: Mapping[str, Any] | None = None) -> Any:
        return await self.request("GET", path, query=query)

    async def post(self, path: str, body: Any, query: Mapping[str, Any] | None = None) -> Any:
        return await self.request("POST", path, query=query, body=body)

    async def put(self, path: str, body: Any, query: Mapping[str, Any] | None = None) -> Any:
        return await self.request("PUT", path, query=query, body=body)

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
    ) -> Any:
        """Send one request; return the decoded JSON (``None`` for an empty body).

        ``path`` must come from :func:`build_path`. Raises :class:`BackendError` only.
        """
        url = self.base_url.rstrip("/") + path + encode_query(query)
        headers = {"Accept": "application/json"}
        if self.authorization:
            headers["Authorization"] = self.authorization
        content: bytes | None = None
        if body is not None:
            content = orjson.dumps(body)
            headers["Content-Type"] = "application/json"
        where = f"{method} {path}"
        try:
            async with asyncio.timeout(self.timeout_s):
                status, content_type, data = await self._send(method, url, headers, content, where)
        except TimeoutError:
            raise BackendError(
                f"the backend did not answer within {self.timeout_s:g} s ({where}); try again later"
            ) from None
        except httpx.TimeoutException:
            raise BackendError(
                f"the backend did not answer within {self.timeout_s:g} s ({where}); try again later"
            ) from None
        except httpx.ConnectError:
            raise BackendError(
                f"the backend is unreachable ({where}); it may be down, try again later"
            ) from None
        except httpx.HTTPError as exc:
            raise BackendError(
                f"backend request failed ({where}): {type(exc).__name__}: {_trim(str(exc))}"
            ) from None
        if status >= 400:
            raise BackendError(f"HTTP {status}: {_error_message(data, content_type)}", status=status)
        if not data.strip():
            return None
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            kind = content_type.split(";")[0].strip() or "unknown content type"
            raise BackendError(
                f"the backend returned a non-JSON response ({kind}) for {where}"
            ) from None

    async def _send(
        self, method: str, url: str, headers: dict[str, str], content: bytes | None, where: str
    ) -> tuple[int, str, bytes]:
        timeout = httpx.Timeout(self.timeout_s)
        async with self.http.stream(
            method, url, headers=headers, content=content, timeout=timeout
        ) as response:
            content_type = response.headers.get("content-type", "").lower()
            declared = response.headers.get("content-length")
            if declared and declared.isdigit() and int(declared) > self.max_response_bytes:
                raise BackendError(self._too_large(where))
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > self.max_response_bytes:
                    raise BackendError(self._too_large(where))
                chunks.append(chunk)
            return response.status_code, content_type, b"".join(chunks)

    def _too_large(self, where: str) -> str:
        return (
            f"the backend response for {where} is larger than the "
            f"{self.max_response_bytes // 1000} KB limit; narrow the request"
        )


def require_sequence(value: Any, what: str) -> Sequence[Any]:
    """The backend promised a JSON array; say so clearly when it is not one."""
    if isinstance(value, list):
        return value
    raise BackendError(f"unexpected backend response for {what}: expected a JSON array")


def require_object(value: Any, what: str) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    raise BackendError(f"unexpected backend response for {what}: expected a JSON object")
