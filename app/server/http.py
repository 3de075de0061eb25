"""HTTP routes: the chat stream, runs (start, follow, cancel), conversations, health.

Everything before the stream starts fails as ``4xx`` with ``{"error", "detail"}``;
everything after is an ``error`` event followed by ``message_complete``. The steps the routes
share with the other faces live beside them: ``request_admission`` (the request's checks),
``run_start`` (starting or refusing a run), ``run_streams`` (following a run as SSE),
``chat_resume`` (a retried chat) and ``error_handlers``.
"""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import Response

from app.ops.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from app.server.chat_request import CONVERSATION_ID
from app.server.chat_resume import resume_chat, resume_stream, same_request
from app.server.identity import LOCAL_USER, AuthError
from app.server.problems import HTTPProblem, ORJSONResponse
from app.server.request_admission import (
    admit_request,
    events_after,
    idempotency_key,
    identify,
    run_id_param,
    services,
)
from app.server.run_start import start_run
from app.server.run_streams import follow_run, follow_started, native_frames, refuse_while_draining, sse
from storage.errors import IdempotencyKeyUsed, StorageUnavailable
from storage.records import NOT_ENDED


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
        first = await svc.run_store.get(exc.run_id)
        if first is None:
            raise HTTPProblem(409, "idempotency_conflict", "retry this request") from None
        same_request(first, chat_input)
        resumed = await resume_stream(svc, exc.run_id, ident.user_id, events_after(request), cancel_on_exit=False)
        if resumed is None:
            raise HTTPProblem(409, "idempotency_conflict", "retry this request") from None
        return resumed
    # With a key the client has said it will come back: the run outlives this connection.
    return sse(native_frames(follow_started(svc, run, cancel_on_exit=key is None).batches), svc)


async def create_run(request: Request) -> Response:
    """Start a run (201); a repeat with the same ``Idempotency-Key`` answers 200 with the
    run the key started — when it is the same request: another one is refused (422
    ``idempotency_key_reused``, ``same_request``)."""
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
        same_request(existing, chat_input)
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
            raise HTTPProblem(401, "unauthenticated", str(exc), {"WWW-Authenticate": "Bearer"}) from None
    return identify(request).user_id


async def run_events(request: Request) -> Response:
    svc = services(request)
    run_id = request.path_params["run_id"]
    user_id = _reader(request, run_id)
    run_id = run_id_param(request)
    following = await follow_run(svc, run_id, user_id, events_after(request), cancel_on_exit=False)
    if following is None:
        raise HTTPProblem(404, "not_found", "no such run")
    if following.ended:
        return Response(status_code=204)
    await refuse_while_draining(svc, following)
    return sse(native_frames(following.batches), svc)


async def cancel_run(request: Request) -> Response:
    svc = services(request)
    ident = identify(request)
    run_id = run_id_param(request)
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
    if not CONVERSATION_ID.match(conversation_id):  # no conversation's id: never sent to the store
        raise HTTPProblem(404, "not_found", "no such conversation")
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
