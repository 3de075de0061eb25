"""A retried chat resumes its run instead of starting another: found by its
``Idempotency-Key``, or by ``Last-Event-ID`` and the very body it sent first. A key
reused for a different request is refused (422 ``idempotency_key_reused``) on every
native route that takes one (``same_request``).

Its own module because the matching rules (which run a retry means) are a job apart from
starting and streaming.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from app.runs.records import ChatInput, request_fingerprint
from app.runs.run import Run
from app.server.identity import Identity
from app.server.problems import HTTPProblem
from app.server.request_admission import events_after, idempotency_key
from app.server.run_streams import follow_run, native_frames, refuse_while_draining, sse
from storage.records import StoredRun

if TYPE_CHECKING:
    from app.server.services import Services

log = logging.getLogger("agentchat.http")


def same_request(stored: StoredRun, chat: ChatInput) -> None:
    """Refuse (422 ``idempotency_key_reused``) a request whose ``Idempotency-Key`` names
    ``stored`` but which asks for something else: another conversation, or another
    message, context type or context than the request the key was first used for (the
    fingerprint stored with the key, ``app.runs.records.request_fingerprint``). As the
    IETF Idempotency-Key draft and Stripe answer: a reused key with another payload is
    a client's bug, and replaying the first run's answer would hide it. A run stored
    before the fingerprint was (no fingerprint) is checked for its conversation only."""
    if chat.conversation_id is not None and chat.conversation_id != stored.conversation_id:
        raise HTTPProblem(
            422, "idempotency_key_reused", "this Idempotency-Key was used for a request to another conversation"
        )
    if stored.request_fingerprint is not None and stored.request_fingerprint != request_fingerprint(chat):
        raise HTTPProblem(422, "idempotency_key_reused", "this Idempotency-Key was used for a different request")


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
    await refuse_while_draining(svc, following)
    return sse(native_frames(following.batches), svc)


async def resume_chat(request: Request, svc: Services, ident: Identity, chat: ChatInput) -> Response | None:
    """A retried chat (``Idempotency-Key`` the user used before, or ``Last-Event-ID``
    matching a recent run): that run's stream after ``Last-Event-ID``; else ``None``."""
    key = idempotency_key(request)
    after = events_after(request)
    if key is not None:
        stored = await svc.run_store.find_by_idempotency_key(ident.user_id, key)
        if stored is None:
            return None
        same_request(stored, chat)
        log.info("chat retried with its Idempotency-Key; resuming its run", extra={"run_id": stored.id, "after": after})
        return await resume_stream(svc, stored.id, ident.user_id, after, cancel_on_exit=False)
    if "last-event-id" not in request.headers:
        return None
    run = retried_run(svc, ident, chat, after)
    if run is None:
        return None
    log.info("chat retried with Last-Event-ID; resuming its run", extra={"run_id": run.id, "after": after})
    return await resume_stream(svc, run.id, ident.user_id, after, cancel_on_exit=True)
