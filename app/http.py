"""HTTP routes: the chat stream, runs (start, follow, cancel), conversations, health.

Everything before the stream starts fails as ``4xx`` with ``{"error", "detail"}``;
everything after is an ``error`` event followed by ``message_complete``.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import orjson
from sse_starlette import EventSourceResponse
from sse_starlette.sse import AppStatus
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from app.auth import LOCAL_USER, AuthError, Identity
from app.bounds import MAX_JSON_DEPTH, MAX_SAFE_INTEGER, check_json, parse_int
from app.config import CONTEXT_TYPES
from app.problems import HTTPProblem, ORJSONResponse
from app.records import Caller, ChatInput
from app.runs import Run, RunEvent
from storage.errors import ConversationBusy, ConversationOwnedByAnother, StorageUnavailable
from storage.records import MULTITASK_POLICIES

if TYPE_CHECKING:
    from app.services import Services

log = logging.getLogger("agentchat.http")

CONVERSATION_ID = re.compile(r"^[A-Za-z0-9_.:\-]{1,128}$")
RETRY_MS = 2000


def services(request: Request) -> Services:
    return request.app.state.services  # type: ignore[no-any-return]


async def read_json_body(request: Request, limit: int, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """The body as JSON: at most ``limit`` bytes, nested at most ``max_depth`` levels, its
    integers within SQLite's range (``app/bounds.py``) — else a ``4xx`` saying which."""
    declared = request.headers.get("content-length")
    if declared and declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise HTTPProblem(413, "payload_too_large", f"the body is larger than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPProblem(413, "payload_too_large", f"the body is larger than {limit} bytes")
        chunks.append(chunk)
    body = b"".join(chunks)
    if not body.strip():
        raise HTTPProblem(400, "invalid_json", "the body is empty; send a JSON object")
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise HTTPProblem(400, "invalid_json", f"the body is not valid JSON: {exc}") from None
    check_json(value, max_depth=max_depth)
    return value


def parse_chat_input(body: Any, *, max_message_chars: int) -> ChatInput:
    if not isinstance(body, dict):
        raise HTTPProblem(400, "invalid_request", "the body must be a JSON object")
    message = body.get("message")
    if message is None:
        raise HTTPProblem(400, "invalid_field", "message is required")
    if not isinstance(message, str):
        raise HTTPProblem(400, "invalid_field", "message must be a string")
    if not message.strip():
        raise HTTPProblem(400, "invalid_field", "message must not be empty")
    if len(message) > max_message_chars:
        raise HTTPProblem(400, "invalid_field", f"message is longer than {max_message_chars} characters")
    context_type = body.get("context_type")
    if not isinstance(context_type, str) or context_type not in CONTEXT_TYPES:
        raise HTTPProblem(
            400,
            "unknown_context_type",
            f"context_type must be one of {', '.join(CONTEXT_TYPES)}; got {context_type!r}",
        )
    context = body.get("context")
    if context is None:
        context = {}
    if not isinstance(context, dict):
        raise HTTPProblem(400, "invalid_field", "context must be a JSON object")
    conversation_id = body.get("conversation_id")
    if conversation_id is not None and (
        not isinstance(conversation_id, str) or not CONVERSATION_ID.match(conversation_id)
    ):
        raise HTTPProblem(
            400, "invalid_field", "conversation_id must be 1-128 characters of letters, digits, '_', '-', '.', ':'"
        )
    multitask = body.get("multitask", "enqueue")
    if multitask not in MULTITASK_POLICIES:
        raise HTTPProblem(400, "invalid_field", f"multitask must be one of {', '.join(MULTITASK_POLICIES)}")
    return ChatInput(
        message=message,
        context_type=context_type,
        context=context,
        conversation_id=conversation_id,
        multitask=multitask,
    )


def identify(request: Request) -> Identity:
    try:
        return services(request).auth.identify(request.headers.get("authorization"))
    except AuthError as exc:
        raise HTTPProblem(exc.status, "unauthenticated", str(exc), {"WWW-Authenticate": "Bearer"}) from None


async def admit(request: Request) -> tuple[Identity, ChatInput]:
    """Everything that can refuse a chat before a run exists, in a fixed order."""
    svc = services(request)
    if svc.runs.closing:
        raise HTTPProblem(503, "shutting_down", "the server is restarting; retry shortly", {"Retry-After": "2"})
    ident = identify(request)
    wait = svc.rate_limiter.check(ident.user_id)
    if wait is not None:
        raise HTTPProblem(429, "rate_limited", "too many requests; slow down", {"Retry-After": str(int(wait))})
    body = await read_json_body(request, svc.settings.max_body_bytes)
    chat = parse_chat_input(body, max_message_chars=svc.settings.max_message_chars)
    if chat.conversation_id is not None:
        owner = await svc.conversations.owner(chat.conversation_id)
        if owner is not None and owner != ident.user_id:
            raise HTTPProblem(404, "not_found", "no such conversation")
    if svc.runs.count_active(ident.user_id) >= svc.settings.max_runs_per_user:
        raise HTTPProblem(
            429, "too_many_runs", "too many runs in progress for this user", {"Retry-After": "5"}
        )
    return ident, chat


async def start_run(svc: Services, ident: Identity, chat: ChatInput) -> Run:
    """Store the run and its message, claim the conversation, start the agent — or
    refuse with a 4xx/503 before anything streams."""
    try:
        return await svc.runs.submit(chat, Caller(ident.user_id, ident.authorization))
    except ConversationOwnedByAnother:
        raise HTTPProblem(404, "not_found", "no such conversation") from None
    except ConversationBusy:
        raise HTTPProblem(
            409,
            "conversation_busy",
            "a run of this conversation is still in progress; wait for it to end, or send "
            'multitask "enqueue" (run after it) or "interrupt" (cancel it)',
        ) from None
    except StorageUnavailable:
        raise HTTPProblem(
            503, "storage_unavailable", "the service cannot store new runs right now; retry shortly",
            {"Retry-After": "5"},
        ) from None


def server_stopping() -> bool:
    """True once uvicorn received SIGTERM/SIGINT (sse-starlette records it to drain streams)."""
    return bool(AppStatus.should_exit)


def heartbeat_frame() -> bytes:
    return b"event: heartbeat\ndata: {\"ts\":%d}\n\n" % int(time.time())


async def stream_run(
    svc: Services, run: Run, after: int, *, cancel_on_exit: bool
) -> AsyncIterator[bytes]:
    """Frames of a live run from ``after`` on. When ``cancel_on_exit`` (the single-request
    chat) and the client leaves first, the agent is cancelled — synchronously, because
    this generator is being cancelled and must not await."""
    run.followers += 1
    try:
        yield b"retry: %d\n\n" % RETRY_MS
        async for frames in run.follow_wire(after, idle=svc.settings.heartbeat_s):
            yield heartbeat_frame() if frames is None else frames
    finally:
        run.followers -= 1
        if run.followers == 0:
            run.last_detached_at = time.time()
        # A stream closed because the server is stopping leaves its run alone: the run
        # finishes (up to the shutdown deadline) into the durable log, and the client
        # resumes it from the next process with Last-Event-ID.
        if cancel_on_exit and not run.finished and run.task is not None and not server_stopping():
            run.task.cancel()


async def stream_stored(events: list[RunEvent]) -> AsyncIterator[bytes]:
    yield b"retry: %d\n\n" % RETRY_MS
    for ev in events:
        yield ev.wire


def sse(content: AsyncIterator[bytes], svc: Services) -> EventSourceResponse:
    return EventSourceResponse(
        content,
        ping=svc.settings.heartbeat_s,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


# --- routes -------------------------------------------------------------------------------


async def chat(request: Request) -> Response:
    ident, chat_input = await admit(request)
    svc = services(request)
    run = await start_run(svc, ident, chat_input)
    return sse(stream_run(svc, run, 0, cancel_on_exit=True), svc)


async def create_run(request: Request) -> Response:
    ident, chat_input = await admit(request)
    svc = services(request)
    run = await start_run(svc, ident, chat_input)
    token = svc.auth.stream_token(run.id, ident.user_id)
    return ORJSONResponse(
        {
            "run_id": run.id,
            "conversation_id": run.conversation_id,
            "stream_url": f"/v1/agent/runs/{run.id}/events?token={token}",
        },
        status_code=201,
    )


def _after(request: Request) -> int:
    """The last event id the client has seen (``Last-Event-ID`` header, else ``?after=``); 0 = all."""
    if request.headers.get("last-event-id"):
        return parse_int(request.headers["last-event-id"], name="Last-Event-ID", lo=0, hi=MAX_SAFE_INTEGER)
    return parse_int(request.query_params.get("after"), name="after", lo=0, hi=MAX_SAFE_INTEGER, default=0)


def _reader(request: Request, run_id: str) -> str:
    """The user reading a run: from a stream token (EventSource) or the Authorization header."""
    svc = services(request)
    if svc.auth.mode == "none":
        # One local user: a link from before a restart (new signing key) still resumes.
        return LOCAL_USER
    token = request.query_params.get("token")
    if token:
        run = svc.runs.get(run_id)
        live = run is not None and (
            not run.finished or (run.finished_at is not None and time.time() - run.finished_at < svc.runs.grace_s)
        )
        try:
            return svc.auth.verify_stream_token(token, run_id, run_live=live)
        except AuthError as exc:
            raise HTTPProblem(401, "unauthenticated", str(exc)) from None
    return identify(request).user_id


async def run_events(request: Request) -> Response:
    svc = services(request)
    run_id = request.path_params["run_id"]
    user_id = _reader(request, run_id)
    after = _after(request)
    run = svc.runs.get(run_id)
    if run is not None:
        if run.user_id != user_id:
            raise HTTPProblem(404, "not_found", "no such run")
        if run.finished and after >= run.last_seq:
            return Response(status_code=204)
        return sse(stream_run(svc, run, after, cancel_on_exit=False), svc)
    stored = await svc.run_store.get(run_id)
    if stored is None or stored.user_id != user_id:
        raise HTTPProblem(404, "not_found", "no such run")
    events = await svc.run_store.events_after(run_id, after)
    if not events:
        return Response(status_code=204)
    return sse(stream_stored(events), svc)


async def cancel_run(request: Request) -> Response:
    svc = services(request)
    run_id = request.path_params["run_id"]
    ident = identify(request)
    run = svc.runs.get(run_id)
    if run is None or run.user_id != ident.user_id:
        stored = await svc.run_store.get(run_id)
        if stored is None or stored.user_id != ident.user_id:
            raise HTTPProblem(404, "not_found", "no such run")
        return ORJSONResponse({"run_id": run_id, "status": stored.status})
    if not run.finished:
        await svc.runs.cancel(run)
    return ORJSONResponse({"run_id": run_id, "status": run.status})


async def get_conversation(request: Request) -> Response:
    svc = services(request)
    conversation_id = request.path_params["conversation_id"]
    ident = identify(request)
    owner = await svc.conversations.owner(conversation_id)
    if owner is None or owner != ident.user_id:
        raise HTTPProblem(404, "not_found", "no such conversation")
    messages = []
    for stored in await svc.conversations.messages(conversation_id):
        d = dict(stored.payload)
        d.pop("replay", None)
        d["seq"], d["created_at"] = stored.seq, stored.created_at
        messages.append(d)
    return ORJSONResponse({"conversation_id": conversation_id, "messages": messages})


async def healthz(request: Request) -> Response:
    return ORJSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    report = await services(request).readiness()
    return ORJSONResponse(report, status_code=200 if report["ready"] else 503)


async def metrics(request: Request) -> Response:
    return Response(services(request).metrics_text(), media_type="text/plain; version=0.0.4")


async def problem(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPProblem)
    return exc.response()


async def not_found(request: Request, exc: Exception) -> Response:
    return ORJSONResponse({"error": "not_found", "detail": f"no route for {request.url.path}"}, 404)


async def method_not_allowed(request: Request, exc: Exception) -> Response:
    # Starlette's router raises the 405 with the route's ``Allow`` header; keep it (RFC 9110 §15.5.6).
    headers = exc.headers if isinstance(exc, HTTPException) else None
    allowed = f"; allowed: {headers['Allow']}" if headers and "Allow" in headers else ""
    detail = f"{request.method} is not allowed here{allowed}"
    return ORJSONResponse({"error": "method_not_allowed", "detail": detail}, 405, headers=headers)


async def server_error(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error", exc_info=exc)
    return ORJSONResponse({"error": "internal_error", "detail": "unexpected server error"}, 500)
