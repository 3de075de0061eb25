"""``AgentClient``: the HTTP API of the agent service, typed, over one ``httpx.AsyncClient``.

The part worth a library is reading a run: ``stream`` (and ``chat``) hand back the run's
events as ``events`` classes and hide dropped connections. When a stream breaks before
``message_complete`` — a cut connection, a server restart, a replica going away — the
client reconnects with ``Last-Event-ID`` (the last event it delivered), so the caller
sees every event exactly once, in order. Retries are bounded (``max_retries`` failures
in a row, with exponential backoff, or the server's ``Retry-After``); a 204 means the
run has ended and everything was seen.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping
from typing import Any
from urllib.parse import quote

import httpx
from httpx_sse import EventSource, SSEError

import events
from client.errors import AgentClientError, APIError, StreamInterrupted
from client.history import HistoryMethods
from client.types import (
    ApprovalAccepted,
    ApprovalDecisionName,
    ContextType,
    Conversation,
    ConversationMessage,
    Multitask,
    RunState,
    StartedRun,
)

#: Statuses worth another attempt while following a stream: the server is restarting or
#: overloaded (it says when to come back), or a proxy in front of it hiccupped.
RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})


class AgentClient(HistoryMethods):
    """A client of one agent service. ``token`` is sent as ``Authorization: Bearer``;
    ``http`` is an ``httpx.AsyncClient`` to share (the caller closes it) — without one
    the client makes its own, closed by ``aclose`` or ``async with``."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        http: httpx.AsyncClient | None = None,
        *,
        max_retries: int = 5,
        backoff_s: float = 0.1,
        max_backoff_s: float = 5.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._owns_http = http is None
        # The read timeout outlasts the server's 15 s heartbeat, so a silent connection is a dead one.
        self.http = http if http is not None else httpx.AsyncClient(timeout=httpx.Timeout(30.0, connect=10.0))

    async def __aenter__(self) -> AgentClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owns_http:
            await self.http.aclose()

    # --- requests ------------------------------------------------------------------------------

    def headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        out = {"Accept": "application/json"}
        if self.token:
            out["Authorization"] = f"Bearer {self.token}"
        out.update(extra or {})
        return out

    def url(self, path: str) -> str:
        return self.base_url + path

    async def _json(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        response = await self.http.request(method, self.url(path), headers=self.headers(kwargs.pop("headers", None)),
                                           **kwargs)
        if response.status_code >= 400:
            raise APIError.from_response(response)
        return response.status_code, response.json()

    async def start_run(
        self,
        message: str,
        context_type: ContextType,
        context: Mapping[str, Any] | None = None,
        conversation_id: str | None = None,
        multitask: Multitask | None = None,
        *,
        idempotency_key: str | None = None,
        title: str | None = None,
    ) -> StartedRun:
        """Start a run (``POST /v1/agent/runs``); read it with ``stream(run.run_id)``.
        ``title`` names a conversation that has no title yet (no model call writes one)."""
        body = chat_body(message, context_type, context, conversation_id, multitask, title)
        extra = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        status, data = await self._json("POST", "/v1/agent/runs", json=body, headers=extra)
        return StartedRun(
            run_id=str(data["run_id"]),
            conversation_id=str(data["conversation_id"]),
            stream_url=str(data["stream_url"]),
            created=status == 201,
        )

    async def cancel(self, run_id: str) -> RunState:
        """Stop a run (idempotent): its status afterwards (``cancelled``, or how it had ended; ``cancelling``
        when it runs on another replica and had not ended within the server's wait)."""
        _, data = await self._json("POST", f"/v1/agent/runs/{quote(run_id, safe='')}/cancel")
        return RunState(run_id=str(data["run_id"]), status=data["status"])

    async def decide(
        self,
        run_id: str,
        tool_use_id: str,
        decision: ApprovalDecisionName,
        arguments: dict[str, Any] | None = None,
    ) -> ApprovalAccepted:
        """Approve, edit (with ``arguments``) or reject the call a run waits on
        (``ApprovalRequired``); ``APIError`` 404 (not your run, or not this call), 409
        (decided, cancelled or expired already), 400 (edited arguments that do not fit).
        Follow the run on with ``stream(run_id, after=<the approval_required id>)``."""
        body: dict[str, Any] = {"decision": decision}
        if arguments is not None:
            body["arguments"] = arguments
        path = f"/v1/agent/runs/{quote(run_id, safe='')}/approvals/{quote(tool_use_id, safe='')}"
        _, data = await self._json("POST", path, json=body)
        return ApprovalAccepted(
            run_id=str(data["run_id"]), tool_use_id=str(data["tool_use_id"]), decision=data["decision"],
            stream_url=str(data["stream_url"]),
        )

    async def conversation(self, conversation_id: str) -> Conversation:
        """A conversation's stored messages, oldest first (yours only: else ``APIError`` 404)."""
        _, data = await self._json("GET", f"/v1/agent/conversations/{quote(conversation_id, safe='')}")
        messages = tuple(
            ConversationMessage(
                seq=int(m["seq"]),
                created_at=float(m["created_at"]),
                role=str(m.get("role", "")),
                content=m.get("content"),
                payload=m,
            )
            for m in data["messages"]
        )
        return Conversation(conversation_id=str(data["conversation_id"]), messages=messages)

    # --- streams -------------------------------------------------------------------------------

    def stream(self, run_id: StartedRun | str, after: int | None = None) -> EventStream:
        """The run's events after ``after`` (all when None), resuming across dropped
        connections; ends after ``message_complete`` or when the server answers 204.
        ``run_id`` is the id or the ``StartedRun`` that ``start_run`` returned (handed
        that, it raised ``TypeError: quote_from_bytes() expected bytes``)."""
        if isinstance(run_id, StartedRun):
            run_id = run_id.run_id
        if not isinstance(run_id, str):
            raise TypeError(f"stream() takes a run id or a StartedRun, not {type(run_id).__name__}")
        return EventStream(self, "GET", f"/v1/agent/runs/{quote(run_id, safe='')}/events", run_id, after=after)

    def chat(
        self,
        message: str,
        context_type: ContextType,
        context: Mapping[str, Any] | None = None,
        conversation_id: str | None = None,
        multitask: Multitask | None = None,
        *,
        idempotency_key: str | None = None,
        title: str | None = None,
    ) -> EventStream:
        """Start a run and stream it in one request (``POST /v1/agent/chat``). A dropped
        connection is retried with the same body and ``Last-Event-ID``, which the server
        matches to the run (or with the ``Idempotency-Key``, when given). ``title`` names a
        conversation that has no title yet."""
        body = chat_body(message, context_type, context, conversation_id, multitask, title)
        extra = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return EventStream(self, "POST", "/v1/agent/chat", "chat", json=body, headers=extra)


def chat_body(
    message: str,
    context_type: str,
    context: Mapping[str, Any] | None,
    conversation_id: str | None,
    multitask: str | None,
    title: str | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"message": message, "context_type": context_type, "context": dict(context or {})}
    if conversation_id is not None:
        body["conversation_id"] = conversation_id
    if multitask is not None:
        body["multitask"] = multitask
    if title is not None:
        body["title"] = title
    return body


class EventStream:
    """An async iterator of a run's events (``events.Event``), one request at a time;
    ``async with`` (or ``aclose``) closes the connection of a stream left before its end.

    ``last_event_id`` is the id of the last event delivered (0 before the first) and
    ``reconnects`` how many times the stream was picked up again. Heartbeats and events
    this version does not know are skipped; an event whose id was already delivered (a
    server replaying from an older point) is dropped, so nothing arrives twice.
    """

    def __init__(
        self,
        client: AgentClient,
        method: str,
        path: str,
        what: str,
        *,
        after: int | None = None,
        json: dict[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.client, self.method, self.path, self.what = client, method, path, what
        self.last_event_id = after or 0
        self.reconnects = 0
        self._resume_header = after is not None
        self._json, self._headers = json, dict(headers or {})
        self._events = self._run()

    def __aiter__(self) -> EventStream:
        return self

    async def __aenter__(self) -> EventStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def __anext__(self) -> events.Event:
        return await self._events.__anext__()

    async def aclose(self) -> None:
        await self._events.aclose()

    def _request_headers(self) -> dict[str, str]:
        extra = {**self._headers, "Accept": "text/event-stream", "Cache-Control": "no-store"}
        if self._resume_header:
            extra["Last-Event-ID"] = str(self.last_event_id)
        return self.client.headers(extra)

    async def _run(self) -> AsyncGenerator[events.Event, None]:
        failures = 0
        while True:
            wait: float | None = None
            try:
                async with self.client.http.stream(
                    self.method, self.client.url(self.path), json=self._json, headers=self._request_headers()
                ) as response:
                    if response.status_code == 204:
                        return  # the run has ended and everything was seen
                    if response.status_code != 200:
                        await response.aread()
                        error = APIError.from_response(response)
                        if response.status_code not in RETRYABLE_STATUSES:
                            raise error
                        cause, wait = str(error), error.retry_after
                    else:
                        async for sse in EventSource(response).aiter_sse():
                            event = self._accept(sse.event, sse.id, sse.data)
                            if event is None:
                                continue
                            failures = 0
                            yield event
                            if isinstance(event, events.MessageComplete):
                                return
                        cause = "the stream ended before message_complete"
            except SSEError as exc:  # a 200 that is not an event stream: retrying will not help
                raise AgentClientError(f"{self.what}: {exc}") from None
            except httpx.TransportError as exc:
                cause = f"{type(exc).__name__}: {exc}"
            # From here on every request says where to resume (a chat retry needs it to
            # find its run even when no event had arrived yet).
            self._resume_header = True
            failures += 1
            if failures > self.client.max_retries:
                raise StreamInterrupted(self.what, self.last_event_id, failures, cause)
            self.reconnects += 1
            backoff = min(self.client.max_backoff_s, self.client.backoff_s * 2 ** (failures - 1))
            await asyncio.sleep(backoff if wait is None else min(wait, self.client.max_backoff_s))

    def _accept(self, name: str, event_id: str, data: str) -> events.Event | None:
        """The event to deliver, or None: a heartbeat, an unknown event, a repeat."""
        if not data or name == events.Heartbeat.name:
            return None
        if event_id:
            try:
                seq = int(event_id)
            except ValueError:
                seq = None
            if seq is not None:
                if seq <= self.last_event_id:
                    return None
                self.last_event_id = seq
        event = events.parse_event(name, data)
        return None if isinstance(event, events.UnknownEvent) else event
