"""HTTP routes: the chat stream, runs (start, follow, cancel), conversations, health.

Everything before the stream starts fails as ``4xx`` with ``{"error", "detail"}``;
everything after is an ``error`` event followed by ``message_complete``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from app.ops.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from app.runs.admission import ReplicaFull
from app.runs.follow import Batches, Following, follow, follow_here
from app.runs.records import Caller, ChatInput
from app.runs.run import Run
from app.server.auth import LOCAL_USER, AuthError, Identity
from app.server.bounds import MAX_JSON_DEPTH, MAX_SAFE_INTEGER, check_json, parse_int
from app.server.chat_request import parse_chat_input
from app.server.context_scope import check_bucket_scope
from app.server.problems import HTTPProblem, ORJSONResponse
from app.server.sse_response import SSEResponse
from events import Heartbeat
from storage.errors import (
    ConversationBusy,
    IdempotencyKeyUsed,
    StorageUnavailable,
    TooManyRuns,
)
from storage.records import NOT_ENDED

if TYPE_CHECKING:
    from app.config import Settings
    from app.server.services import Services

log = logging.getLogger("agentchat.http")

IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")  # visible ASCII, as HTTP header tokens go
RETRY_MS = 2000
T = TypeVar("T")


def services(request: Request) -> Services:
    return request.app.state.services  # type: ignore[no-any-return]


async def read_json_body(request: Request, limit: int, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """The body as JSON: at most ``limit`` bytes, nested at most ``max_depth`` levels, its
    integers within SQLite's range (``app/server/bounds.py``) — else a ``4xx`` saying which."""
    declared = request.headers.get("content-length")
    if declared and declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise HTTPProblem(413, "payload_too_large", f"the body is larger than {limit} bytes")
    body = await _read_body(request, limit, services(request).settings.body_timeout_s)
    if not body.strip():
        raise HTTPProblem(400, "invalid_json", "the body is empty; send a JSON object")
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise HTTPProblem(400, "invalid_json", f"the body is not valid JSON: {exc}") from None
    check_json(value, max_depth=max_depth)
    return value


async def _read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    """The whole body within ``timeout_s`` (a client that trickles it gets 408 and the
    connection is closed); a client that leaves mid-body is one INFO line, no traceback."""
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise HTTPProblem(
                        413, "payload_too_large", f"the body is larger than {limit} bytes", {"Connection": "close"}
                    )
                chunks.append(chunk)
    except TimeoutError:
        log.info("request body too slow; closing", extra={"path": request.url.path, "client": _peer(request),
                                                          "received": size, "timeout_s": timeout_s})
        raise HTTPProblem(
            408, "body_timeout", f"the body did not arrive within {timeout_s:g} s", {"Connection": "close"}
        ) from None
    except ClientDisconnect:
        log.info("client left before sending its whole body", extra={"path": request.url.path,
                                                                     "client": _peer(request), "received": size})
        raise HTTPProblem(400, "client_disconnected", "the client disconnected", {"Connection": "close"}) from None
    return b"".join(chunks)


def _peer(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def identify(request: Request) -> Identity:
    try:
        return services(request).auth.identify(request.headers.get("authorization"))
    except AuthError as exc:
        raise HTTPProblem(exc.status, "unauthenticated", str(exc), {"WWW-Authenticate": "Bearer"}) from None


def rate_limit_key(request: Request, ident: Identity) -> str:
    """Whose budget a request spends: the authenticated user; with ``AGENT_AUTH=none``
    (one shared local user) the client's address, so one client cannot lock out the rest."""
    if services(request).auth.mode == "none":
        return f"addr:{_peer(request)}"
    return f"user:{ident.user_id}"


def idempotency_key(request: Request) -> str | None:
    raw = request.headers.get("idempotency-key")
    if raw is None:
        return None
    key = raw.strip()
    if not IDEMPOTENCY_KEY.match(key):
        raise HTTPProblem(400, "invalid_header", "Idempotency-Key must be 1-255 visible ASCII characters")
    return key


async def admit(request: Request, parse: Callable[[dict[str, Any], Settings], T]) -> tuple[Services, Identity, T]:
    """Every chat request of every face (native, OpenAI-compatible, AI SDK) passes the same
    checks in one fixed order: shutting down → 503, credentials → 401, rate → 429, the
    body (size, arrival time, JSON, nesting, integers) → 4xx, not a JSON object → 400,
    then the face's own fields (``parse``) → 400. The run limit is not checked here: a
    retry that resumes its run does not start another (``check_run_limit``)."""
    svc = services(request)
    if svc.runs.closing:
        raise HTTPProblem(503, "shutting_down", "the server is restarting; retry shortly", {"Retry-After": "2"})
    ident = identify(request)
    wait = await svc.limits.check_rate(rate_limit_key(request, ident))
    if wait is not None:
        raise HTTPProblem(429, "rate_limited", "too many requests; slow down", {"Retry-After": str(int(wait))})
    body = await read_json_body(request, svc.settings.max_body_bytes)
    if not isinstance(body, dict):
        raise HTTPProblem(400, "invalid_request", "the body must be a JSON object")
    return svc, ident, parse(body, svc.settings)


async def admit_request(request: Request) -> tuple[Identity, ChatInput]:
    """A native chat request admitted (``admit``). Its ``conversation_id`` names the
    caller's own conversation: ids are a namespace per user, nothing to check here."""
    _, ident, chat = await admit(
        request, lambda body, settings: parse_chat_input(body, max_message_chars=settings.max_message_chars)
    )
    return ident, chat


def replica_busy(why: str) -> HTTPProblem:
    """503 for a new run this replica cannot serve well now (``app/ops/load.py``): the
    client retries, and a load balancer sends the retry where there is room."""
    return HTTPProblem(503, "replica_busy", f"{why}; retry shortly (another replica may have room)",
                       {"Retry-After": "2"})


def check_load(svc: Services) -> None:
    """Refuse a new run (503 ``replica_busy``) while this replica is overloaded. Every
    face's ``start_run`` asks; a face with work to do before it (the OpenAI face imports
    a transcript) asks first, so a refusal leaves nothing behind."""
    load = svc.load
    if load is not None and (reason := load.refusal()) is not None:
        load.refused_for(reason)
        raise replica_busy("this replica is overloaded (its event loop runs late)")


def too_many_runs() -> HTTPProblem:
    return HTTPProblem(429, "too_many_runs", "too many runs in progress for this user", {"Retry-After": "5"})


async def check_run_limit(svc: Services, user_id: str) -> None:
    """Counts the user's unfinished runs in the store: refuses early when the user is at
    the cap. The cap itself is held by ``start_run``, which counts again in the
    transaction that stores the run (concurrent requests on any replica all pass this
    read at once), so only ``compat_runs.import_history`` calls this, just before it
    writes a client's earlier turns ahead of that transaction: a refusal must not leave
    them behind. It is called after the request's own checks, so every face answers in
    the one order of ``docs/http-api.md`` (the request's own 4xx first, then 429
    ``too_many_runs``). The native faces go straight to ``start_run``: one read less per
    run (a hop to a reader thread on SQLite, a round trip on PostgreSQL)."""
    cap = svc.settings.max_runs_per_user
    if await svc.limits.active_runs(user_id, svc.runs.registry, cap) >= cap:
        raise too_many_runs()


async def start_run(svc: Services, ident: Identity, chat: ChatInput, *, key: str | None = None) -> Run:
    """Store the run and its message, claim the conversation, start the agent — or
    refuse with a 4xx/503 before anything streams. ``IdempotencyKeyUsed`` passes
    through: a concurrent request with the same key started the run first. Every face
    (native, OpenAI-compatible, AI SDK) starts its runs here, so the context's
    knowledge-base scope is checked here once (``app/server/context_scope.py``).

    The refusals come in the order ``docs/http-api.md`` documents for every face: the
    unknown bucket (400), the replica's load (503 ``replica_busy``), then the admission
    transaction's own — the busy conversation (409, ``reject``) before the user's run
    cap (429 ``too_many_runs``)."""
    await check_bucket_scope(svc, chat.context)
    check_load(svc)
    try:
        return await svc.runs.submit(
            chat, Caller(ident.user_id, ident.authorization), idempotency_key=key,
            run_cap=svc.settings.max_runs_per_user,
        )
    except TooManyRuns:
        raise too_many_runs() from None
    except ReplicaFull as exc:
        if svc.load is not None:
            svc.load.refused_for("live_runs")
        raise replica_busy(str(exc)) from None
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


RETRY_FIELD = b"retry: %d\n" % RETRY_MS


def heartbeat_frame() -> bytes:
    """The keep-alive: a comment line for proxies and a named event for stall detection,
    in one frame. A comment in a frame of its own would reach clients that dispatch on
    every blank line (``@microsoft/fetch-event-source``) as an empty message."""
    beat = Heartbeat(ts=int(time.time()))
    return b": ping\nevent: %s\ndata: %s\n\n" % (beat.name.encode(), beat.to_json())


def follow_run(
    svc: Services, run_id: str, user_id: str, after: int, *, cancel_on_exit: bool
) -> Awaitable[Following | None]:
    """``app.runs.follow.follow`` with this app's parts: the user's run after ``after``,
    wherever it is (``None``: no such run)."""
    return follow(
        svc.runs, svc.run_store, svc.remote, run_id, user_id, after,
        idle=svc.settings.heartbeat_s, on_leave=_on_leave(svc, cancel_on_exit),
    )


def follow_started(svc: Services, run: Run, *, cancel_on_exit: bool) -> Following:
    """A run this request just started, from its first event."""
    return follow_here(run, 0, idle=svc.settings.heartbeat_s, on_leave=_on_leave(svc, cancel_on_exit))


def _on_leave(svc: Services, cancel_on_exit: bool) -> Callable[[Run], None] | None:
    """When ``cancel_on_exit`` (a chat without an ``Idempotency-Key``) and the last client
    leaves, the agent is cancelled unless a client re-attaches within
    ``AGENT_CHAT_REATTACH_S`` (a retried POST with ``Last-Event-ID``) — scheduled
    synchronously, because the follower is being cancelled and must not await."""
    if not cancel_on_exit:
        return None

    def left(run: Run) -> None:
        # A stream closed because the server is stopping leaves its run alone: the run
        # finishes (up to the shutdown deadline) into the durable log, and the client
        # resumes it from the next process with Last-Event-ID.
        # A run parked for an approval is no longer this process's: nothing to cancel.
        if not run.finished and not run.parked and run.task is not None and not svc.streams.stopping:
            _cancel_unless_reattached(run, svc.settings.chat_reattach_s)

    return left


def _cancel_unless_reattached(run: Run, within_s: float) -> None:
    if run.followers > 0:
        return
    detached_at = run.last_detached_at

    def cancel() -> None:
        # Still alone since this detach (a client that came back and left again set a
        # newer time and its own timer), still running: the client is gone for good.
        if run.followers == 0 and run.last_detached_at == detached_at and not run.finished and run.task is not None:
            log.info("chat client left; cancelling its run", extra={"run_id": run.id})
            run.task.cancel()

    if within_s <= 0:
        cancel()
    else:
        asyncio.get_running_loop().call_later(within_s, cancel)


async def native_frames(batches: Batches) -> AsyncIterator[bytes]:
    """The native SSE of a run: each event's stored frame (encoded once when the run
    emitted it, the same bytes for every follower), everything committed at once in one
    write, a heartbeat frame on an idle tick; the first write carries ``retry:``."""
    first = True
    async with contextlib.aclosing(batches):  # the follower's ``finally`` runs as the client leaves
        async for batch in batches:
            frame = heartbeat_frame() if batch is None else b"".join(ev.wire for ev in batch)
            if first:
                frame, first = RETRY_FIELD + frame, False
            yield frame


def sse(content: AsyncIterator[bytes], svc: Services, headers: Mapping[str, str] | None = None) -> SSEResponse:
    """Every SSE response of the app (native, OpenAI-compatible, AI SDK): unbuffered through
    proxies, and counted in ``agentchat_open_streams`` while it is being written."""
    return SSEResponse(_frames(content), svc.streams, headers, open_streams=svc.metrics.open_streams)


def _frames(content: AsyncIterator[bytes]) -> AsyncGenerator[bytes, None]:
    if isinstance(content, AsyncGenerator):
        return content  # every face's frames are a generator: no layer of ours per frame
    return _generator(content)


async def _generator(content: AsyncIterator[bytes]) -> AsyncGenerator[bytes, None]:
    async for chunk in content:
        yield chunk


# --- retried chats: resume the run instead of starting another ------------------------------


def retried_run(svc: Services, ident: Identity, chat: ChatInput, after: int) -> Run | None:
    """The run a ``POST /v1/agent/chat`` carrying ``Last-Event-ID`` (and no key) retries:
    the newest of the user's runs that is live, or ended less than
    ``AGENT_FINISHED_RUN_MEMORY_S`` ago, with the same message and context type (and
    conversation, when the body names one) and at least ``after`` events. Clients such
    as fetch-event-source re-POST the very body they sent first, so that is the match."""
    now = time.time()
    for run in svc.runs.recent(ident.user_id):
        if run.finished_at is not None and now - run.finished_at > svc.settings.finished_run_memory_s:
            continue
        if (
            run.question == chat.message
            and run.context_type == chat.context_type
            and (chat.conversation_id is None or chat.conversation_id == run.conversation_id)
            and after <= run.last_seq
        ):
            return run
    return None


async def resume_stream(
    svc: Services, run_id: str, user_id: str, after: int, *, cancel_on_exit: bool
) -> Response | None:
    """The stream of an existing run from after ``after``: live from memory, else replayed
    from the store; ``None`` when the user has no such run. A run with nothing newer
    answers with an empty event stream (fetch-event-source retries on a 204)."""
    following = await follow_run(svc, run_id, user_id, after, cancel_on_exit=cancel_on_exit)
    if following is None:
        return None
    return sse(native_frames(following.batches), svc)


async def resume_chat(request: Request, svc: Services, ident: Identity, chat: ChatInput) -> Response | None:
    """A retried chat (``Idempotency-Key`` the user used before, or ``Last-Event-ID``
    matching a recent run): that run's stream after ``Last-Event-ID``; else ``None``."""
    key = idempotency_key(request)
    after = _after(request)
    if key is not None:
        stored = await svc.run_store.find_by_idempotency_key(ident.user_id, key)
        if stored is None:
            return None
        if chat.conversation_id is not None and chat.conversation_id != stored.conversation_id:
            raise HTTPProblem(
                422, "idempotency_key_reused", "this Idempotency-Key was used for a request to another conversation"
            )
        log.info("chat retried with its Idempotency-Key; resuming its run", extra={"run_id": stored.id, "after": after})
        return await resume_stream(svc, stored.id, ident.user_id, after, cancel_on_exit=False)
    if "last-event-id" not in request.headers:
        return None
    run = retried_run(svc, ident, chat, after)
    if run is None:
        return None
    log.info("chat retried with Last-Event-ID; resuming its run", extra={"run_id": run.id, "after": after})
    return await resume_stream(svc, run.id, ident.user_id, after, cancel_on_exit=True)


# --- routes -------------------------------------------------------------------------------


async def chat(request: Request) -> Response:
    """Start a run and stream it — or, for a retry of a chat (same ``Idempotency-Key``, or
    ``Last-Event-ID`` and the same body), resume that run's stream after the last id."""
    svc = services(request)
    ident, chat_input = await admit_request(request)
    resumed = await resume_chat(request, svc, ident, chat_input)
    if resumed is not None:
        return resumed
    key = idempotency_key(request)
    try:
        run = await start_run(svc, ident, chat_input, key=key)
    except IdempotencyKeyUsed as exc:  # a concurrent retry with this key started it first
        resumed = await resume_stream(svc, exc.run_id, ident.user_id, _after(request), cancel_on_exit=False)
        if resumed is None:
            raise HTTPProblem(409, "idempotency_conflict", "retry this request") from None
        return resumed
    # With a key the client has said it will come back: the run outlives this connection.
    return sse(native_frames(follow_started(svc, run, cancel_on_exit=key is None).batches), svc)


async def create_run(request: Request) -> Response:
    """Start a run (201); a repeat with the same ``Idempotency-Key`` answers 200 with the
    run the key started."""
    svc = services(request)
    ident, chat_input = await admit_request(request)
    key = idempotency_key(request)
    existing = await svc.run_store.find_by_idempotency_key(ident.user_id, key) if key is not None else None
    if existing is None:
        try:
            run = await start_run(svc, ident, chat_input, key=key)
            run_id, conversation_id, status = run.id, run.conversation_id, 201
        except IdempotencyKeyUsed as exc:
            existing = await svc.run_store.get(exc.run_id)
            if existing is None:
                raise HTTPProblem(409, "idempotency_conflict", "retry this request") from None
    if existing is not None:
        run_id, conversation_id, status = existing.id, existing.conversation_id, 200
    token = svc.auth.stream_token(run_id, ident.user_id)
    return ORJSONResponse(
        {
            "run_id": run_id,
            "conversation_id": conversation_id,
            "stream_url": f"/v1/agent/runs/{run_id}/events?token={token}",
        },
        status_code=status,
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
        svc.auth.identify(None)  # notes the local user for the log lines
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
    following = await follow_run(svc, run_id, user_id, _after(request), cancel_on_exit=False)
    if following is None:
        raise HTTPProblem(404, "not_found", "no such run")
    if following.ended:
        return Response(status_code=204)
    return sse(native_frames(following.batches), svc)


async def cancel_run(request: Request) -> Response:
    svc = services(request)
    run_id = request.path_params["run_id"]
    ident = identify(request)
    run = svc.runs.get(run_id)
    if run is None or run.user_id != ident.user_id:
        stored = await svc.run_store.get(run_id)
        if stored is None or stored.user_id != ident.user_id:
            raise HTTPProblem(404, "not_found", "no such run")
        if stored.status not in NOT_ENDED:
            return ORJSONResponse({"run_id": run_id, "status": stored.status})
        # Executing on another replica (or between hand-overs, or parked for an approval):
        # the store carries the cancel to whichever process runs it.
        try:
            status = await svc.runs.cancel_elsewhere(run_id)
        except StorageUnavailable:
            raise HTTPProblem(
                503, "storage_unavailable", "the cancel could not be stored; retry shortly", {"Retry-After": "2"}
            ) from None
        return _cancel_answer(run_id, status)
    if not run.finished:
        await svc.runs.cancel(run)
    return _cancel_answer(run_id, run.status if run.finished else "cancelling")


def _cancel_answer(run_id: str, status: str) -> Response:
    """200 with the status the run ended with; 202 ``cancelling`` while it has not ended."""
    return ORJSONResponse({"run_id": run_id, "status": status}, status_code=202 if status == "cancelling" else 200)


async def get_conversation(request: Request) -> Response:
    svc = services(request)
    conversation_id = request.path_params["conversation_id"]
    ident = identify(request)
    if not await svc.conversations.exists(conversation_id, ident.user_id):  # the caller's own, by (user, id)
        raise HTTPProblem(404, "not_found", "no such conversation")
    messages = []
    for stored in await svc.conversations.messages(conversation_id, ident.user_id):
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
    return Response(await services(request).service_metrics(), media_type=METRICS_CONTENT_TYPE)


async def problem(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPProblem)
    return exc.response()


async def storage_unavailable(request: Request, exc: Exception) -> Response:
    """Any route whose database is away — a write given up, SQLite's file removed or
    replaced, PostgreSQL's pool without a connection — answers 503 with ``Retry-After``,
    never 500."""
    log.warning("database unavailable; answered 503", extra={"path": request.url.path, "error": str(exc)[:300]})
    return ORJSONResponse(
        {"error": "storage_unavailable", "detail": "the service cannot reach its database right now; retry shortly"},
        503,
        headers={"Retry-After": "5"},
    )


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
