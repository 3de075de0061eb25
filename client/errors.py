"""What the client raises: the server's refusal (its problem JSON kept whole), or a
stream that could not be resumed within the retry budget."""

from __future__ import annotations

from typing import Any

import httpx
import orjson


class AgentClientError(Exception):
    """Base of everything this client raises on purpose."""


class APIError(AgentClientError):
    """The server refused a request: ``status`` with its ``{"error", "detail"}`` body.

    ``error`` is the stable code to branch on (``not_found``, ``rate_limited``,
    ``conversation_busy`` …); ``retry_after`` is the server's ``Retry-After`` in seconds
    when it sent one. A body that is not problem JSON (a proxy's page) becomes
    ``error="http_<status>"`` with the start of the text as ``detail``.
    """

    def __init__(self, status: int, problem: dict[str, Any], retry_after: float | None = None) -> None:
        self.status = status
        self.problem = problem
        self.error = str(problem.get("error", f"http_{status}"))
        self.detail = str(problem.get("detail", ""))
        self.retry_after = retry_after
        super().__init__(f"HTTP {status} {self.error}: {self.detail}")

    @classmethod
    def from_response(cls, response: httpx.Response) -> APIError:
        """Build from a response whose body has been read."""
        try:
            body = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            body = None
        if not isinstance(body, dict) or "error" not in body:
            body = {"error": f"http_{response.status_code}", "detail": response.text[:300]}
        return cls(response.status_code, body, _retry_after(response))


class StreamInterrupted(AgentClientError):
    """The stream kept failing (connection refused or cut, or the server answering 503)
    more times in a row than the client's retry budget allows. ``last_event_id`` is the
    last event delivered: ``stream(run_id, after=last_event_id)`` carries on later."""

    def __init__(self, run: str, last_event_id: int, attempts: int, cause: str) -> None:
        self.run = run
        self.last_event_id = last_event_id
        self.attempts = attempts
        self.cause = cause
        super().__init__(f"{run}: gave up after {attempts} attempts at event {last_event_id} ({cause})")


def _retry_after(response: httpx.Response) -> float | None:
    raw = response.headers.get("retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        return None
