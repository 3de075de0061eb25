"""A conversation's attachments over HTTP (issue 25 item 4).

``POST /v1/agent/conversations/{id}/attachments`` (``multipart/form-data``, one part
named ``file``) reads the file with the ingest loaders (PDF, HTML, Markdown, text;
binary refused with 415, over ``AGENT_ATTACHMENT_MAX_BYTES`` 413) into the
conversation's private bucket, which ``knowledge_base_search`` in that conversation
searches along with the configured buckets. ``GET`` lists them, ``DELETE
.../attachments/{attachment_id}`` removes one; deleting the conversation removes them all.

Conversations are the caller's own (``(user, id)`` is the key), so another user's id is
simply a conversation the caller does not have: ``GET`` and ``DELETE`` answer 404, as for
any unknown id. An upload to an id the caller does not have yet *creates* that
conversation for the caller, as ``POST /v1/agent/runs`` with a new ``conversation_id``
does: a client may attach files before the first question.
"""

from __future__ import annotations

from typing import Any

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message

from app.server.admin_routes import _component
from app.server.chat_request import CONVERSATION_ID, CONVERSATION_ID_RULE
from app.server.problems import HTTPProblem, ORJSONResponse
from app.server.request_admission import identify, services
from app.server.run_start import check_load
from knowledge.attachment_store import ConversationAttachments
from knowledge.attachments import AttachmentRejected
from knowledge.names import is_doc_id

#: Room for the multipart framing and a small field or two beyond the file itself.
_FRAMING = 64 * 1024
#: Text parts an upload may carry beside ``file`` (ignored); past them the body is refused.
MAX_FORM_FIELDS = 8


def _store(request: Request) -> ConversationAttachments:
    return ConversationAttachments(_component(request, "knowledge").kb)


def _conversation_id(request: Request) -> str:
    raw = request.path_params["conversation_id"]
    if not CONVERSATION_ID.match(raw):
        raise HTTPProblem(400, "invalid_field", f"conversation_id must be {CONVERSATION_ID_RULE}")
    return str(raw)


def file_too_large(max_bytes: int) -> HTTPProblem:
    """The 413 of an attachment past ``AGENT_ATTACHMENT_MAX_BYTES``, however it came (this
    route's upload, an AI SDK ``file`` part: ``app.server.ai_sdk_files``)."""
    return HTTPProblem(
        413, "file_too_large", f"an attachment may be at most {max_bytes} bytes (AGENT_ATTACHMENT_MAX_BYTES)"
    )


async def _owned(request: Request) -> tuple[str, str]:
    """``(user_id, conversation_id)`` of a conversation the caller has, else 404."""
    ident = identify(request)
    conversation_id = _conversation_id(request)
    if not await services(request).storage.conversations.exists(conversation_id, ident.user_id):
        raise HTTPProblem(404, "not_found", "no such conversation")
    return ident.user_id, conversation_id


async def _capped_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it passes ``limit`` (never read whole first)."""
    too_big = file_too_large(limit - _FRAMING)
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_big
    parts: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_big
        parts.append(chunk)
    return b"".join(parts)


async def _file_part(request: Request, body: bytes) -> UploadFile:
    """The ``file`` part of a multipart body already read (``request.form`` over it)."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    replay = Request(request.scope, receive)
    try:
        form = await replay.form(max_files=1, max_fields=MAX_FORM_FIELDS)
    except Exception as exc:  # python-multipart's and Starlette's parse errors
        raise HTTPProblem(400, "invalid_multipart", f"the multipart body cannot be read: {str(exc)[:200]}") from None
    part = form.get("file")
    if not isinstance(part, UploadFile):
        raise HTTPProblem(400, "missing_file", "send the file as a multipart/form-data part named 'file'")
    return part


async def upload(request: Request) -> Response:
    svc = services(request)
    ident = identify(request)
    conversation_id = _conversation_id(request)
    content_type = request.headers.get("content-type", "")
    if not content_type.lower().startswith("multipart/form-data"):
        raise HTTPProblem(
            415, "unsupported_media_type", "send multipart/form-data with the file in a part named 'file'"
        )
    # The same admission as a new run: reading, chunking and embedding a file is work a
    # replica whose loop already runs late must not take on (503 replica_busy, Retry-After;
    # refused before the body is read, and counted with the refused runs).
    check_load(svc, new_run=False)  # an upload holds no model connection
    max_bytes = svc.settings.attachment_max_bytes
    body = await _capped_body(request, max_bytes + _FRAMING)
    part = await _file_part(request, body)
    raw = await part.read()
    await part.close()
    if len(raw) > max_bytes:
        raise file_too_large(max_bytes)
    if not raw:
        raise HTTPProblem(400, "empty_file", "the file is empty")
    store = _store(request)
    await svc.storage.conversations.claim(conversation_id, ident.user_id)
    try:
        entry = await store.add(ident.user_id, conversation_id, raw, part.filename or "", part.content_type)
    except AttachmentRejected as exc:
        raise HTTPProblem(exc.status, exc.code, str(exc)) from None
    return ORJSONResponse(entry, status_code=201)


async def list_attachments(request: Request) -> Response:
    user_id, conversation_id = await _owned(request)
    if services(request).rooms.named("knowledge") is None:  # no knowledge base: nothing was attached
        return ORJSONResponse({"attachments": []})
    found: list[dict[str, Any]] = await _store(request).list(user_id, conversation_id)
    return ORJSONResponse({"attachments": found})


async def delete_attachment(request: Request) -> Response:
    user_id, conversation_id = await _owned(request)
    attachment_id = request.path_params["attachment_id"]
    if not is_doc_id(attachment_id) or not await _store(request).delete(user_id, conversation_id, attachment_id):
        raise HTTPProblem(404, "not_found", "no such attachment")
    return Response(status_code=204)


async def delete_all(request: Request, user_id: str, conversation_id: str) -> int:
    """The conversation's attachments, when it is deleted (``history_routes``); 0 when the
    app has no knowledge base."""
    comp = services(request).rooms.named("knowledge")
    if comp is None:
        return 0
    return await ConversationAttachments(comp.kb).delete_all(user_id, conversation_id)


__all__ = ["delete_all", "delete_attachment", "list_attachments", "upload"]
