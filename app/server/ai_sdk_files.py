"""The AI SDK's ``file`` parts: a file a ``useChat`` user sends with a message becomes an
attachment of the chat's conversation, as ``POST /v1/agent/conversations/{id}/attachments``
would store it — the same kinds (PDF, HTML, Markdown, text), the same limit
(``AGENT_ATTACHMENT_MAX_BYTES``), the same errors — before the message's run starts, so
the run's ``knowledge_base_search`` finds it. Before, a ``file`` part was dropped in
silence: 200, and the file neither attached nor refused.

A part is ``{type: "file", mediaType, filename?, url}`` whose ``url`` is a ``data:`` URL
(``convertFileListToFileUIParts`` makes one of every file a user picks). Another URL is a
400 ``unsupported_part``: the service does not fetch a client's URLs. Only the last
message's parts are read: ``useChat`` sends the whole chat with every message, so an
earlier message's files were stored when it was sent; a file sent again (a retry, a
regenerate) is stored once (its digest is kept with it, ``ConversationAttachments.find``).
Everything about a part is checked before the run is admitted; one stored for a run the
admission then refuses is removed again (``stored_for``), so a refusal leaves nothing.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote_to_bytes

from app.server import storage_budget
from app.server.admin_routes import configured_component
from app.server.attachment_routes import file_too_large
from app.server.problems import HTTPProblem
from knowledge.attachment_store import ConversationAttachments
from knowledge.attachments import AttachmentRejected, kind_of, safe_filename
from storage import request_scope

if TYPE_CHECKING:
    from app.server.services import Services

ROUTE = "POST /v1/agent/conversations/{id}/attachments"


@dataclass(frozen=True, slots=True)
class FilePart:
    """A ``file`` part's content, read and checked (its kind, its size)."""

    raw: bytes
    filename: str
    media_type: str

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.raw).hexdigest()


def body_limit(max_body_bytes: int, attachment_max_bytes: int) -> int:
    """The AI SDK POST's body limit: the native one plus one attachment of the largest
    size as a base64 ``data:`` URL (4 bytes per 3, and room for its prefix)."""
    return max_body_bytes + (attachment_max_bytes + 2) // 3 * 4 + 1024


def file_parts(body: dict[str, Any], *, max_bytes: int) -> list[FilePart]:
    """The ``file`` parts of the request's last message (a user's), read; a 4xx for one
    this service cannot attach: not a ``data:`` URL (400 ``unsupported_part``), not base64
    (400 ``invalid_field``), empty (400 ``empty_file``), larger than ``max_bytes`` (413
    ``file_too_large``), of a kind it does not read (415 ``unsupported_media_type``)."""
    messages = body.get("messages")
    last = messages[-1] if isinstance(messages, list) and messages else None
    parts = last.get("parts") if isinstance(last, dict) and last.get("role") == "user" else None
    if not isinstance(parts, list):
        return []
    return [_read(part, max_bytes) for part in parts if isinstance(part, dict) and part.get("type") == "file"]


def _read(part: dict[str, Any], max_bytes: int) -> FilePart:
    url = part.get("url")
    filename = part.get("filename") if isinstance(part.get("filename"), str) else ""
    named = f"the file part {filename!r}" if filename else "a file part"
    if not isinstance(url, str) or not url.startswith("data:") or "," not in url:
        raise HTTPProblem(
            400,
            "unsupported_part",
            f"{named} must carry its content as a data: URL (this service does not fetch URLs); "
            f"or upload the file with {ROUTE}",
        )
    head, data = url[5:].split(",", 1)
    params = head.split(";")
    declared = part.get("mediaType") if isinstance(part.get("mediaType"), str) else params[0]
    if "base64" in params[1:]:
        if len(data) > (max_bytes + 2) // 3 * 4 + 4:  # refused before it is decoded
            raise file_too_large(max_bytes)
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise HTTPProblem(400, "invalid_field", f"{named}: its data: URL is not valid base64") from None
    else:
        raw = unquote_to_bytes(data)
    if len(raw) > max_bytes:
        raise file_too_large(max_bytes)
    if not raw:
        raise HTTPProblem(400, "empty_file", f"{named} is empty")
    name = safe_filename(filename)
    try:
        kind_of(name, declared)  # the route's 415, before anything is stored
    except AttachmentRejected as exc:
        raise HTTPProblem(exc.status, exc.code, str(exc)) from None
    return FilePart(raw, filename or name, str(declared or ""))


@contextlib.asynccontextmanager
async def stored_for(svc: Services, user_id: str, conversation_id: str, files: list[FilePart]) -> AsyncIterator[None]:
    """Store ``files`` as attachments of the user's conversation for the run about to be
    admitted within; if the admission refuses (any exception), the ones stored here are
    removed again. A file the conversation already holds (the same bytes) is not stored
    twice. No ``knowledge`` component: 503, as the attachments route answers."""
    if not files:
        yield
        return
    store = ConversationAttachments(configured_component(svc, "knowledge").kb)
    await svc.storage.conversations.claim(conversation_id, user_id)
    added: list[str] = []
    try:
        for file in files:
            if await store.find(user_id, conversation_id, file.digest) is not None:
                continue
            try:
                # Chunked, embedded and written as the attachments route does it: its time
                # is the ingest's, not a wait for the database, so it is outside the
                # admission's budget (a large file was always 503 on a healthy database).
                with storage_budget.paused(), request_scope.unbounded():
                    entry = await store.add(user_id, conversation_id, file.raw, file.filename, file.media_type)
            except AttachmentRejected as exc:
                raise HTTPProblem(exc.status, exc.code, str(exc)) from None
            added.append(str(entry["id"]))
        yield
    except BaseException:
        for attachment_id in added:
            with contextlib.suppress(Exception):
                await store.delete(user_id, conversation_id, attachment_id)
        raise
