"""The Vercel AI SDK UI message stream (``x-vercel-ai-ui-message-stream: v1``): its routes.

``POST /v1/agent/ui-stream`` takes the body ``useChat`` sends through its
``DefaultChatTransport`` (``{id, messages, trigger, messageId}`` plus our ``context_type``
— default ``knowledge`` —, ``context`` and ``multitask``; a ``regenerate()`` or an edited
message first cuts the chat's stored history back to the turn it replaces:
``app/server/history_branch.py``), starts a run of the same run
manager as ``/v1/agent/runs`` in the conversation named by the chat ``id``, and answers
with the run's event log translated into UI message chunks (``app/server/ai_sdk_chunks.py``
has the mapping), then ``data: [DONE]``. ``GET
/v1/agent/ui-stream/{chat_id}/stream`` is what ``useChat({resume: true})`` (and
``chat.resumeStream()``) calls: 204 when the chat has no run that is live or ended within
``AGENT_FINISHED_RUN_MEMORY_S``, else that run replayed from its first event and followed
live (the SDK's transport treats a resumed stream as a replay: the message is rebuilt
from its ``start`` chunk, whose ``messageId`` is the run id). A client that leaves
(``stop()``) cancels the run unless it re-attaches within ``AGENT_CHAT_REATTACH_S``, on
any replica (``app/runs/presence.py``), as a keyless native chat does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import orjson
from starlette.requests import Request
from starlette.responses import Response

import events
from app.runs.follow import Batches
from app.runs.records import could_be_run_id
from app.runs.recovery import unsettled_span
from app.server import request_admission, run_start, run_streams
from app.server.ai_sdk_chunks import UIChunks, frames
from app.server.ai_sdk_files import body_limit, file_parts, stored_for
from app.server.ai_sdk_request import ApprovalReply, parse_body
from app.server.approval_routes import apply_decision
from app.server.chat_request import CONVERSATION_ID, CONVERSATION_ID_RULE
from app.server.compat_runs import active_run, has_conversation, import_history, translated
from app.server.context_scope import check_bucket_scope
from app.server.history_branch import cut_history
from app.server.problems import HTTPProblem
from storage.records import UNFINISHED

if TYPE_CHECKING:
    from app.server.services import Services

HEADERS = {"x-vercel-ai-ui-message-stream": "v1", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
DONE = b"data: [DONE]\n\n"


async def _stream(ui: UIChunks, source: Batches) -> AsyncIterator[bytes]:
    yield frames(ui.start())
    async for part in translated(source, lambda item: (ui.wire(item),)):
        yield part
    if not ui.done and ui.awaiting_approval:  # parked for a decision: the message ends here
        yield frames(ui.paused())
    elif not ui.done and "error_code" not in ui.metadata:  # released at shutdown: the next process carries it on
        yield frames(ui.released())
    # An error and no ending: the follower could not read the run's log (its ``error``
    # already closed the text and the calls, and says to resume); no second error.
    yield DONE


def _response(svc: Services, ui: UIChunks, source: Batches) -> Response:
    return run_streams.sse(_stream(ui, source), svc, HEADERS)


async def ui_stream(request: Request) -> Response:
    """``POST /v1/agent/ui-stream``: start a run of the chat and stream it as UI chunks."""
    settings = request_admission.services(request).settings
    svc, ident, (parsed, files) = await request_admission.admit(
        request,
        lambda body, settings: (
            parse_body(body, max_message_chars=settings.max_message_chars),
            file_parts(body, max_bytes=settings.attachment_max_bytes),  # attachments: ai_sdk_files
        ),
        max_body=body_limit(settings.max_body_bytes, settings.attachment_max_bytes),
    )
    if isinstance(parsed, ApprovalReply):
        return await _approval_reply(svc, ident.user_id, parsed)
    chat, earlier, branch = parsed
    assert chat.conversation_id is not None
    # A chat this user has not started here: its earlier turns become the history.
    # (Without any, the run's creation makes the user's conversation of that id.) A
    # regenerate or an edit replaces a turn of the stored history instead: it is cut.
    known = await has_conversation(svc, chat.conversation_id, ident.user_id) if earlier and not branch else True
    # Refused before any history is imported or cut (a refusal leaves it whole), in
    # start_run's order: the context's buckets, the replica's load; the run cap just before.
    await check_bucket_scope(svc, chat.context)
    run_start.check_load(svc)
    if branch is not None:
        await cut_history(
            svc, ident.user_id, chat.conversation_id, branch.run_id, keep_run=branch.keep_run, named=branch.named
        )
    elif not known:
        await import_history(svc, chat.conversation_id, ident.user_id, earlier)
    async with stored_for(svc, ident.user_id, chat.conversation_id, files):  # removed if refused
        run = await run_start.start_run(svc, ident, chat)
    following = run_streams.follow_started(svc, run, cancel_on_exit=True)
    return _response(svc, UIChunks(run.id, run.conversation_id), following.batches)


async def _approval_reply(svc: Services, user_id: str, reply: ApprovalReply) -> Response:
    """``addToolApprovalResponse`` answered: the decision is applied as
    ``POST /v1/agent/runs/{run_id}/approvals/{tool_use_id}`` applies it (owner only, once:
    409 on a second decision), then the continued run streams into the same assistant
    message. A rejection's ``reason`` is not passed on: the model gets the route's
    rejection result."""
    stored = await svc.run_store.get(reply.run_id) if could_be_run_id(reply.run_id) else None
    if stored is None or stored.user_id != user_id or stored.conversation_id != reply.conversation_id:
        raise HTTPProblem(404, "not_found", "no such run in this chat")
    decision = "approve" if reply.approved else "reject"
    decided = await apply_decision(svc, user_id, reply.run_id, reply.tool_use_id, decision, None)
    following = await run_streams.follow_run(svc, reply.run_id, user_id, decided.last_seq, cancel_on_exit=True)
    if following is None:
        raise HTTPProblem(404, "not_found", "no such run")
    ui = UIChunks(reply.run_id, reply.conversation_id)
    ui.client_has.add(reply.tool_use_id)
    return _response(svc, ui, following.batches)


async def ui_stream_resume(request: Request) -> Response:
    """``GET /v1/agent/ui-stream/{chat_id}/stream``: the chat's active run, or 204."""
    svc = request_admission.services(request)
    ident = request_admission.identify(request)
    chat_id = request.path_params["chat_id"]
    if not CONVERSATION_ID.match(chat_id):  # the POST's 400, not a 204 saying the chat is idle
        raise HTTPProblem(400, "invalid_field", f"the chat id must be {CONVERSATION_ID_RULE}")
    if not await has_conversation(svc, chat_id, ident.user_id):
        return Response(status_code=204)
    run_id = await active_run(svc, ident.user_id, chat_id, within_s=svc.settings.finished_run_memory_s)
    following = await run_streams.follow_run(svc, run_id, ident.user_id, 0, cancel_on_exit=True) if run_id else None
    if run_id is None or following is None:
        return Response(status_code=204)
    await run_streams.refuse_while_draining(svc, following)
    hold = await unsettled_turn(svc, run_id)  # read before the log: a take-over after it is in the log
    ui = UIChunks(run_id, chat_id, await discarded_ranges(svc, run_id), hold)
    return _response(svc, ui, following.batches)


async def unsettled_turn(svc: Services, run_id: str) -> tuple[int, int] | None:
    """The events of ``run_id`` a take-over would discard, when another process runs it:
    its stored log ends inside a model turn after its checkpoint (``UIChunks.hold``).
    Its owner may be dead with its lease not yet expired — the window between a kill
    and the take-over, which a ``useChat`` resume on reload lands in. A run of this
    process needs no hold: its owner is this process, which the stream dies with."""
    if svc.runs.get(run_id) is not None:
        return None
    stored = await svc.run_store.get(run_id)
    if stored is None or stored.status not in UNFINISHED:
        return None
    return unsettled_span(stored)


async def discarded_ranges(svc: Services, run_id: str) -> list[tuple[int, int]]:
    """The event ids of ``run_id`` that restarts discarded so far: every ``run_resumed``'s
    ``discarded`` in its log, and the one a recovery here has decided on but not yet
    written (its ``run_resumed`` is the resumed agent's first step)."""
    run = svc.runs.get(run_id)
    logged = run.events if run is not None else await svc.run_store.events_after(run_id, 0, limit=svc.runs.max_events)
    out = [r for r in (svc.runs.discarded_at_recovery(run_id),) if r is not None]
    for ev in logged:
        if ev.event != events.RunResumed.name:
            continue
        discarded = orjson.loads(ev.data).get("discarded")
        if isinstance(discarded, dict):
            out.append((int(discarded["from_seq"]), int(discarded["to_seq"])))
    return out
