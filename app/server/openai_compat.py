"""The OpenAI-compatible face: ``GET /v1/models`` and ``POST /v1/chat/completions``.

Open WebUI and any OpenAI SDK can use the agent as a "model": one model per agent
context (``agentchat-knowledge``, ``agentchat-workflow``, ``agentchat-tables``, from the
catalog's contexts). A completion is a run of the same run manager as
``/v1/agent/runs`` (auth from ``Authorization: Bearer``, limits, durability); its answer
is the run's event log translated (``app/server/compat_runs.py``), never a second agent path.

What a client gets (documented in docs/compatible-faces.md "OpenAI-compatible endpoints"):

* ``delta.content`` / ``message.content``: the streamed answer text; a final answer
  that reached us only through ``generate_response`` (or a clarification) is appended
  unless it was already streamed. Its citation markers are numbered ``[1]``, ``[2]`` and
  it ends with a "Sources:" list (``app/server/openai_citations.py``): the ids mean
  nothing to a person reading an OpenAI client.
* ``agentchat``, an extra top-level field on chunks with an empty ``delta``: every other
  native event as ``{"event", "data"}`` (tool calls and results, previews, the
  ``response`` with its sources, ``message_complete`` on the final chunk). Empty deltas
  and extra top-level fields are what other OpenAI-compatible servers send too
  (llama.cpp's ``timings``, Perplexity's ``citations``), so text-only clients skip them;
  the OpenAI SDKs keep them (``chunk.model_extra``).
* Errors before the stream: OpenAI's ``{"error": {"message", "type", "param", "code"}}``
  with a 4xx/5xx status; after it started: one such error chunk, then ``[DONE]``.

History: OpenAI clients resend the whole transcript each time. With an explicit
conversation (``X-Conversation-Id`` header or body ``conversation_id``) the server-side
conversation is continued and the earlier messages are imported only when it is new.
Otherwise every request gets a fresh conversation: when its earlier turns are exactly a
transcript this server answered (that run is found by a hash of the transcript, stored
as its idempotency key, and the answer the client holds is what it sent), that
conversation's stored messages are copied, tool calls and results included; else the
earlier turns are imported as text.
Either way nothing the client shows is lost, and edits, branches and regenerations
behave as they do on OpenAI's own stateless API.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

import events
from app.runs.follow import Batches
from app.runs.records import ChatInput
from app.server import request_admission, run_start, run_streams, storage_budget
from app.server.compat_runs import (
    copy_history,
    has_conversation,
    import_history,
    logged_events,
    normalized,
    translated,
)
from app.server.context_scope import check_bucket_scope
from app.server.identity import Identity
from app.server.openai_chunks import DONE, Translator, frame
from app.server.openai_cut import AnswerCut
from app.server.openai_errors import error_body, error_response
from app.server.openai_request import CompletionRequest, model_ids, parse_request, unknown_model
from app.server.openai_unstreamed import AWAY_HEADERS, DatabaseAway, away_message, collect
from app.server.problems import HTTPProblem, ORJSONResponse
from llm.types import Message
from storage.errors import IdempotencyKeyUsed

if TYPE_CHECKING:
    from app.server.services import Services

CHAIN_KEY_PREFIX = "oai-chain:"
#: On a non-streamed 409 whose run parked for an approval or ended cancelled: the
#: ``openai`` SDKs (Python and JS) retry a 409 by themselves, twice, and the same
#: transcript sent again is another run (parked for the same approval: three of them for
#: one ``create()``; a cancelled question asked again). They obey this header first.
NOT_RETRIED: Mapping[str, str] = MappingProxyType({"x-should-retry": "false"})


# --- GET /v1/models -----------------------------------------------------------------------


def _model(model_id: str) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": 0, "owned_by": "agentchat"}


async def list_models(request: Request) -> Response:
    try:
        request_admission.identify(request)
    except HTTPProblem as exc:
        return error_response(exc)
    return ORJSONResponse({"object": "list", "data": [_model(m) for m in model_ids()]})


async def get_model(request: Request) -> Response:
    try:
        request_admission.identify(request)
        model = request.path_params["model"]
        if model not in model_ids():
            raise unknown_model(model)
    except HTTPProblem as exc:
        return error_response(exc)
    return ORJSONResponse(_model(model))


# --- the conversation the transcript continues ---------------------------------------------------


def chain_key(turns: list[tuple[str, str]]) -> str:
    """The idempotency key a run is stored under: a hash of the transcript it answered."""
    canonical = orjson.dumps([[role, normalized(text)] for role, text in turns])
    return CHAIN_KEY_PREFIX + hashlib.sha256(canonical).hexdigest()


async def _answered_by_us(svc: Services, user_id: str, earlier: list[tuple[str, str]]) -> str | None:
    """The conversation of the run that answered ``earlier`` up to its last user turn, when
    the assistant text after it is what that run sent; else None."""
    last_user = max((i for i, (role, _) in enumerate(earlier) if role == "user"), default=None)
    if last_user is None or last_user == len(earlier) - 1:
        return None
    held = normalized(" ".join(text for _, text in earlier[last_user + 1:]))
    parent = await svc.run_store.find_by_idempotency_key(user_id, chain_key(earlier[: last_user + 1]))
    if parent is None or parent.status != "completed":
        return None
    tr = Translator("", "", 0, include_usage=False)
    for item in await logged_events(svc, parent.id, user_id):
        tr.feed(item)
    return parent.conversation_id if normalized(tr.text) == held else None


async def conversation_for(svc: Services, ident: Identity, req: CompletionRequest) -> tuple[str, str | None]:
    """(conversation id, idempotency key) of the run that answers ``req`` — see the module doc."""
    user = ident.user_id
    earlier = [Message(role, text) for role, text in req.turns[:-1]]  # type: ignore[arg-type]
    if req.conversation_id is not None:
        if not await has_conversation(svc, req.conversation_id, user):
            await import_history(svc, req.conversation_id, user, earlier)
        return req.conversation_id, None
    conversation_id = f"oai_{uuid.uuid4().hex}"
    # Reads before the run is acknowledged: within the request's storage budget.
    source = await storage_budget.bounded(
        "the service cannot read runs right now",
        _answered_by_us(svc, user, req.turns[:-1]),
        refused=svc.metrics.admission.storage_refused("answered_turns"),
    )
    if source is not None:
        await copy_history(svc, source, conversation_id, user)
    else:
        await import_history(svc, conversation_id, user, earlier)
    return conversation_id, chain_key(req.turns)


def _failure_status(code: str) -> int:
    if code == "storage_unavailable":
        return 503
    if code.startswith("provider_"):
        return 502
    # approval_pending: queued behind a run that then parked for an approval (docs/approvals.md)
    return 409 if code in ("cancelled", "approval_pending") else 500


# --- POST /v1/chat/completions ------------------------------------------------------------------


async def chat_completions(request: Request) -> Response:
    try:
        return await _chat_completions(request)
    except HTTPProblem as exc:
        return error_response(exc)


async def _chat_completions(request: Request) -> Response:
    sent = request.headers
    svc, ident, req = await request_admission.admit(
        request, lambda body, settings: parse_request(body, sent, max_message_chars=settings.max_message_chars)
    )
    # Refused before any history is imported (a refusal leaves nothing), in start_run's
    # order: the context's buckets, the replica's load; the run cap just before an import.
    await check_bucket_scope(svc, req.context)
    run_start.check_load(svc)
    conversation_id, key = await conversation_for(svc, ident, req)
    chat = ChatInput(req.question, req.context_type, req.context, conversation_id, req.multitask)
    try:
        run = await run_start.start_run(svc, ident, chat, key=key)
    except IdempotencyKeyUsed:  # the same transcript again (regenerate): it runs again, the first keeps the key
        run = await run_start.start_run(svc, ident, chat)
    cut = AnswerCut(req.max_tokens, req.stop) if req.max_tokens is not None or req.stop else None
    tr = Translator(f"chatcmpl-{run.id}", req.model, int(time.time()), include_usage=req.include_usage, cut=cut)
    headers = {"X-Run-Id": run.id, "X-Conversation-Id": run.conversation_id}
    if req.stream:
        following = run_streams.follow_started(svc, run, cancel_on_exit=True)
        return run_streams.sse(_stream(following.batches, tr), svc, headers)
    try:
        await collect(svc, run, tr)
    except DatabaseAway:
        body = error_body(away_message(run.id), "storage_unavailable", 503)
        return ORJSONResponse(body, 503, headers={**headers, **AWAY_HEADERS})
    if tr.status == "completed" and tr.error is None:
        return ORJSONResponse(tr.completion(), headers=headers)
    if tr.status is None and tr.awaiting is not None:
        return ORJSONResponse(_awaiting_body(run.id, tr.awaiting), 409, headers={**headers, **NOT_RETRIED})
    err = tr.error or {"message": released_message(run.id), "code": "interrupted"}
    status = _failure_status(err["code"]) if tr.status is not None else 503
    if status == 409:  # cancelled (sent again, it runs again), or behind a parked run (ends so again)
        headers.update(NOT_RETRIED)
    if status == 503:  # the database away, or the server restarting: as every 503 of the service
        # ... and the run goes on elsewhere (carried on by the next process or a replica):
        # the SDKs' own retry would ask the question a second time.
        headers.update(AWAY_HEADERS)
    return ORJSONResponse(error_body(err["message"], err["code"], status), status, headers=headers)


def released_message(run_id: str) -> str:
    """What a completion whose run this server released as it stopped is told: the run is
    carried on (by the next process, or another replica) and its answer stored, so asking
    again - what "retry" said before, and what the SDKs did by themselves - ran the
    question twice, tools included."""
    return (
        "the server restarted before the run ended; the run is carried on and its answer stored: read it at "
        f"GET /v1/agent/runs/{run_id}/events (a retry starts another run)"
    )


def _awaiting_body(run_id: str, wait: events.ApprovalRequired) -> dict[str, Any]:
    """The answer of a run that waits for an approval: an OpenAI client cannot decide, so
    it is told where the decision goes (the run stays stored, waiting)."""
    return error_body(
        f"the run waits for an approval of {wait.tool_name}: "
        f"POST /v1/agent/runs/{run_id}/approvals/{wait.tool_use_id}, then read /v1/agent/runs/{run_id}/events",
        "approval_required",
        409,
    )


async def _stream(source: Batches, tr: Translator) -> AsyncIterator[bytes]:
    yield frame(tr.chunk({"role": "assistant", "content": ""}))
    async for part in translated(source, tr.feed):
        yield part
    if tr.status is None:  # no ending stored: what was held back goes out before the error that ends it
        for part in tr.held():
            yield part
    if tr.status is None and tr.awaiting is not None:  # parked: the decision goes to its own route
        yield frame(_awaiting_body(tr.id.removeprefix("chatcmpl-"), tr.awaiting))  # the id names the run
    elif tr.status is None and tr.error is not None:  # no ending stored (the database away): this error is the end
        yield frame(error_body(tr.error["message"], tr.error["code"], _failure_status(tr.error["code"])))
    elif tr.status is None:  # released at shutdown: an OpenAI client cannot resume a stream
        yield frame(error_body(released_message(tr.id.removeprefix("chatcmpl-")), "interrupted", 503))
    yield DONE
