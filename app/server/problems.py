"""The error answer every route gives before a stream starts: ``4xx`` with ``{"error", "detail"}``.

Kept apart from ``app/server/http.py`` so small checkers (``app/server/bounds.py``) can raise it
without importing the routes, and the routes can use the checkers without a cycle.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import JSONResponse


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
