"""A user's history over HTTP (issue 25): their conversations (list, rename, delete),
their runs (look one up, list a conversation's) and feedback on a run.

Every route reads with the caller in the query, so another user's id answers exactly
like an id that does not exist (404), never revealing it. Lists are newest first with
an opaque cursor (``next_cursor``: pass it back as ``cursor``; ``null`` on the last
page).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import time
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from app.server import attachment_routes
from app.server.bounds import parse_int
from app.server.chat_request import CONVERSATION_ID, CONVERSATION_ID_RULE
from app.server.history_request import parse_feedback, parse_rename
from app.server.problems import HTTPProblem, ORJSONResponse
from app.server.request_admission import identify, read_json_body, run_id_param, services
from storage.errors import ConversationBusy
from storage.history_records import ConversationSummary, RunView
from storage.records import TERMINAL_STATUSES

log = logging.getLogger("agentchat.http")

DEFAULT_LIMIT = 20
MAX_LIMIT = 100
#: How long a delete waits for the conversation's live runs (on any replica) to end.
DELETE_WAIT_S = 10.0
_SMALL_BODY = 16 * 1024


# --- cursors and paging ---------------------------------------------------------------


def encode_cursor(when: float, ident: str) -> str:
    return base64.urlsafe_b64encode(orjson.dumps([when, ident])).decode().rstrip("=")


def decode_cursor(raw: str | None) -> tuple[float, str] | None:
    """The position a cursor names, or a 400: a cursor is only ever one this server gave."""
    if raw is None or raw == "":
        return None
    try:
        if len(raw) > 512:
            raise ValueError("too long")
        value = orjson.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
        when, ident = value
        if not isinstance(when, int | float) or isinstance(when, bool) or not isinstance(ident, str):
            raise ValueError("wrong shape")
        if not CONVERSATION_ID.match(ident):  # a conversation's or a run's id (the same rule), else no page's
            raise ValueError("not an id")  # a NUL would reach PostgreSQL, whose driver refuses it: a 500
        return float(when), ident
    except (ValueError, TypeError, binascii.Error, orjson.JSONDecodeError):
        raise HTTPProblem(400, "invalid_cursor", "cursor is not one this server returned; start without it") from None


def _limit(request: Request) -> int:
    return parse_int(request.query_params.get("limit"), name="limit", lo=1, hi=MAX_LIMIT, default=DEFAULT_LIMIT)


def _conversation_id(raw: str) -> str:
    if not CONVERSATION_ID.match(raw):
        raise HTTPProblem(400, "invalid_field", f"conversation_id must be {CONVERSATION_ID_RULE}")
    return raw


# --- shapes -----------------------------------------------------------------------------


def conversation_json(c: ConversationSummary) -> dict[str, Any]:
    return {
        "id": c.id,
        "title": c.title,
        "created_at": c.created_at,
        "updated_at": c.updated_at,
        "last_run_status": c.last_run_status,
    }


def run_json(r: RunView) -> dict[str, Any]:
    complete = r.complete or {}
    ending = None
    if r.status in TERMINAL_STATUSES or r.complete is not None:
        ending = {"status": complete.get("status", r.status), "error": r.error}
    return {
        "run_id": r.id,
        "conversation_id": r.conversation_id,
        "context_type": r.context_type,
        "status": r.status,
        "created_at": r.created_at,
        "started_at": r.started_at,
        "finished_at": r.finished_at,
        "turns": complete.get("turns"),
        "usage": complete.get("usage"),
        "tool_call_count": r.tool_call_count,
        "resumes": r.resumes,
        "ending": ending,
        "feedback": (
            {"score": r.feedback.score, "comment": r.feedback.comment, "at": r.feedback.at}
            if r.feedback is not None
            else None
        ),
        "events_compacted": r.events_compacted_at is not None,
    }


# --- conversations ----------------------------------------------------------------------


async def list_conversations(request: Request) -> Response:
    svc = services(request)
    ident = identify(request)
    limit = _limit(request)
    before = decode_cursor(request.query_params.get("cursor"))
    page = await svc.storage.history.list_conversations(ident.user_id, limit=limit + 1, before=before)
    more = len(page) > limit
    page = page[:limit]
    cursor = encode_cursor(page[-1].updated_at, page[-1].id) if more and page else None
    return ORJSONResponse({"conversations": [conversation_json(c) for c in page], "next_cursor": cursor})


async def rename_conversation(request: Request) -> Response:
    svc = services(request)
    ident = identify(request)
    conversation_id = _conversation_id(request.path_params["conversation_id"])
    body = await read_json_body(request, _SMALL_BODY)
    if not isinstance(body, dict):
        raise HTTPProblem(400, "invalid_request", "the body must be a JSON object")
    title = parse_rename(body)
    if not await svc.storage.history.rename(ident.user_id, conversation_id, title):
        raise HTTPProblem(404, "not_found", "no such conversation")
    current = await svc.storage.history.conversation(ident.user_id, conversation_id)
    if current is None:  # deleted in between
        raise HTTPProblem(404, "not_found", "no such conversation")
    return ORJSONResponse(conversation_json(current))


async def delete_conversation(request: Request) -> Response:
    """204 once the conversation and everything of it is gone. Its live runs, wherever
    they execute, are cancelled first and their endings awaited (bounded): a run still
    ending after ``DELETE_WAIT_S`` answers 503 with ``Retry-After`` (the cancels stay
    marked; a retry finishes the job)."""
    svc = services(request)
    ident = identify(request)
    conversation_id = _conversation_id(request.path_params["conversation_id"])
    history = svc.storage.history
    if await history.conversation(ident.user_id, conversation_id) is None:
        raise HTTPProblem(404, "not_found", "no such conversation")
    deadline = time.monotonic() + DELETE_WAIT_S
    while True:
        live = await history.unfinished_runs(ident.user_id, conversation_id)
        if live:
            left = max(0.1, deadline - time.monotonic())
            await asyncio.gather(*(svc.runs.cancel_elsewhere(run_id, wait_s=left) for run_id in live))
        try:
            deleted = await history.delete_conversation(ident.user_id, conversation_id)
            break
        except ConversationBusy:
            if time.monotonic() >= deadline:
                raise HTTPProblem(
                    503,
                    "conversation_busy",
                    "a run of this conversation is still ending; retry the delete shortly",
                    {"Retry-After": "2"},
                ) from None
    if deleted is None:
        raise HTTPProblem(404, "not_found", "no such conversation")
    svc.runs.forget_conversation(ident.user_id, conversation_id)
    attachments = await attachment_routes.delete_all(request, ident.user_id, conversation_id)
    svc.metrics.history.conversations_deleted.labels(reason="user").inc()
    log.info(
        "conversation deleted",
        extra={
            "conversation_id": conversation_id,
            "runs": deleted.runs,
            "events": deleted.events,
            "messages": deleted.messages,
            "attachments": attachments,
        },
    )
    return Response(status_code=204)


# --- runs ---------------------------------------------------------------------------------


async def get_run(request: Request) -> Response:
    svc = services(request)
    ident = identify(request)
    view = await svc.storage.history.run(ident.user_id, run_id_param(request))
    if view is None:
        raise HTTPProblem(404, "not_found", "no such run")
    return ORJSONResponse(run_json(view))


async def list_runs(request: Request) -> Response:
    svc = services(request)
    ident = identify(request)
    raw = request.query_params.get("conversation_id")
    conversation_id = _conversation_id(raw) if raw is not None else None
    limit = _limit(request)
    before = decode_cursor(request.query_params.get("cursor"))
    page = await svc.storage.history.list_runs(
        ident.user_id, conversation_id=conversation_id, limit=limit + 1, before=before
    )
    more = len(page) > limit
    page = page[:limit]
    cursor = encode_cursor(page[-1].created_at, page[-1].id) if more and page else None
    return ORJSONResponse({"runs": [run_json(r) for r in page], "next_cursor": cursor})


async def post_feedback(request: Request) -> Response:
    """The owner's thumbs up or down on a finished run (a second post replaces the first)."""
    svc = services(request)
    ident = identify(request)
    run_id = request.path_params["run_id"]
    body = await read_json_body(request, _SMALL_BODY)
    if not isinstance(body, dict):
        raise HTTPProblem(400, "invalid_request", "the body must be a JSON object")
    score, comment = parse_feedback(body)
    history = svc.storage.history
    run_id = run_id_param(request)
    view = await history.run(ident.user_id, run_id)
    if view is None:
        raise HTTPProblem(404, "not_found", "no such run")
    if view.status not in TERMINAL_STATUSES:
        raise HTTPProblem(409, "run_not_finished", "feedback is for a finished run; wait for its end")
    if not await history.set_feedback(ident.user_id, run_id, score, comment):
        raise HTTPProblem(404, "not_found", "no such run")
    svc.metrics.history.feedback.labels(score=str(score)).inc()
    stored = await history.run(ident.user_id, run_id)
    return ORJSONResponse(run_json(stored) if stored is not None else {"run_id": run_id})


__all__ = [
    "decode_cursor",
    "delete_conversation",
    "encode_cursor",
    "get_run",
    "list_conversations",
    "list_runs",
    "post_feedback",
    "rename_conversation",
]
