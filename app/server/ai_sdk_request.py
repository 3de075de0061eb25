"""The AI SDK chat body (``POST /v1/agent/ui-stream``), declared once: ``UIChatRequest``
both decodes the body (``parse_body``) and is its schema in the OpenAPI description
(``ui_chat_request_schema``).

Decoded as the native body is (``app/server/body_structs.py``: field by field in
declaration order, the first field at fault answers), and as leniently as before: any
object is a UI message (its text: its ``text`` parts, each a string, else a ``content``
string), and a ``context`` of ``null``, ``""``, ``0``, ``[]`` or ``false`` is no context.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args

import msgspec
from msgspec import Meta

from app.runs.records import ChatInput
from app.server.body_structs import body_schema, decode_fields
from app.server.chat_request import (
    CONVERSATION_ID,
    CONVERSATION_ID_RULE,
    ContextType,
    ConversationId,
    context_type_problem,
)
from app.server.problems import HTTPProblem
from app.server.visible_text import has_visible_text
from llm.types import Message
from storage.records import MULTITASK_POLICIES, MultitaskPolicy

Trigger = Literal["submit-message", "regenerate-message"]
TRIGGERS: tuple[str, ...] = get_args(Trigger)


class UIMessage(msgspec.Struct, kw_only=True):
    """A UI message (any object: what it lacks reads as no text); other members are ignored."""

    id: Annotated[
        Any,
        Meta(
            description="The message id: an assistant message's is its run id (this face's `start` chunk sets it), "
            "which `regenerate` and an edit cut the chat's history at.",
        ),
    ] = None
    role: Annotated[
        Any,
        Meta(
            description="`user`/`assistant`: a turn (the last: the question); others are skipped.",
        ),
    ] = None
    parts: Annotated[
        Any,
        Meta(
            description="Its parts (AI SDK 5+); the `text` parts are its text. On an assistant message, a tool "
            "part in state `approval-responded` (`addToolApprovalResponse`) is the user's decision on the call its "
            "run waits on.",
        ),
    ] = None
    metadata: Annotated[Any, Meta(description="Its metadata (an assistant message's `run_id` is read).")] = None
    content: Annotated[Any, Meta(description="Its text when it has no `parts` (earlier AI SDKs).")] = None


class UIChatRequest(msgspec.Struct, kw_only=True):
    """The body `useChat`'s `DefaultChatTransport` sends, plus `context_type`, `context` and `multitask`.
    Other members are ignored."""

    id: Annotated[ConversationId, Meta(description="The chat id: the conversation.")]
    trigger: Trigger = "submit-message"
    messages: Annotated[list[UIMessage], Meta(min_length=1, description="The chat; the last is the question.")]
    message_id: Annotated[
        Any,
        Meta(
            description="`regenerate-message`: the assistant message replaced (its run), or the last message; "
            "`submit-message`: the user message an edit replaces (the last one sent). The chat's stored history is "
            "cut back to before the replaced turn first: the model sees the remaining history and the last message.",
        ),
    ] = msgspec.field(default=None, name="messageId")
    context_type: Annotated[ContextType, Meta(description="Which tools and prompt the run uses.")] = "knowledge"
    context: Annotated[Any, Meta(description="The UI context, as the native body's.")] = None
    multitask: Annotated[
        MultitaskPolicy,
        Meta(
            description="When a run of the chat is in progress: run after it, refuse (409), or cancel it.",
        ),
    ] = "enqueue"


def ui_chat_request_schema() -> dict[str, Any]:
    """``UIChatRequest`` for the OpenAPI description (the lenient members as clients send them)."""
    schema = body_schema(
        UIChatRequest,
        {
            "messageId": {"type": ["string", "null"]},
            "context": {"type": ["object", "null"]},
        },
    )
    message = schema["properties"]["messages"]["items"]
    for name, keywords in {
        "id": {"type": "string"},
        "role": {"enum": ["system", "user", "assistant"]},
        "parts": {"type": "array", "items": {"type": "object"}},
        "content": {"type": "string"},
    }.items():
        message["properties"][name].update(keywords)
    return schema


@dataclass(frozen=True, slots=True)
class HistoryBranch:
    """A ``regenerate()`` or an edited message (``sendMessage({text, messageId})``): the
    chat's stored history is cut back before the run starts, so the model sees the branch
    the client shows. ``run_id``: the run whose turn is replaced (``keep_run=False``) or
    the last one kept (``keep_run=True``); ``None``: the whole history goes. ``named``:
    the message id a 400 names when ``run_id`` is no run of the chat."""

    run_id: str | None
    keep_run: bool
    named: str


def _run_of(message: UIMessage) -> str | None:
    """An assistant message's run: its ``metadata.run_id``, else its id (the same run id)."""
    meta = message.metadata if isinstance(message.metadata, dict) else {}
    run_id = meta.get("run_id") if isinstance(meta.get("run_id"), str) else message.id
    return run_id if isinstance(run_id, str) and run_id else None


def history_branch(request: UIChatRequest) -> HistoryBranch | None:
    """What the request replaces, from the wire contract of the ``ai`` package's
    ``AbstractChat``: ``regenerate()`` drops the answer from ``messages`` and sends
    ``trigger: "regenerate-message"`` (``messageId``: the answer's id when named);
    ``sendMessage({text, messageId})`` replaces that user message, drops what followed it,
    and sends the rest with it last (``trigger: "submit-message"``). A plain message has
    no ``messageId``, an automatic continuation names an earlier (assistant) message:
    nothing is replaced; a ``messageId`` naming no message sent is a 400. Without a named
    answer, the cut keeps the turn of the last answer before the question (none: the
    question is the chat's first, and the whole stored history goes), so a retry after a
    refusal cuts nothing more."""
    message_id = request.message_id
    if message_id is not None and (not isinstance(message_id, str) or not message_id):
        raise HTTPProblem(400, "invalid_field", "messageId must be a message id (a string) or null")
    last = request.messages[-1]
    if request.trigger == "submit-message":
        if message_id is None:
            return None
        if message_id != last.id:  # a continuation the SDK names by its assistant message: nothing replaced
            if any(m.id == message_id for m in request.messages):
                return None
            raise HTTPProblem(400, "invalid_field", f"messageId {message_id!r} names no message of this chat")
    elif message_id is not None and message_id != last.id:  # regenerate a named answer: it is its run
        return HistoryBranch(message_id, keep_run=False, named=message_id)
    before = next((m for m in reversed(request.messages[:-1]) if m.role == "assistant"), None)
    if before is None:
        return HistoryBranch(None, keep_run=False, named=str(last.id))
    run_id = _run_of(before)
    if run_id is None:
        raise HTTPProblem(400, "invalid_field", "the answer before the last message has no id (its run)")
    return HistoryBranch(run_id, keep_run=True, named=run_id)


@dataclass(frozen=True, slots=True)
class ApprovalReply:
    """The decision ``useChat``'s ``addToolApprovalResponse({id, approved, reason})`` sends:
    the last message is the assistant's, one of its tool parts in ``approval-responded``
    with ``approval: {id, approved, reason?}``; ``id`` is the ``approvalId`` this face
    sent, the ``tool_use_id`` the run waits on."""

    conversation_id: str
    run_id: str
    tool_use_id: str
    approved: bool
    reason: str | None


def approval_reply(conversation_id: str, message: UIMessage) -> ApprovalReply | None:
    """The approval response an assistant message carries (its last one), or ``None``.
    Its run: the message's ``metadata.run_id`` (this face's ``start`` chunk sets it), else
    its id (the same run id, the ``start`` chunk's ``messageId``)."""
    if message.role != "assistant" or not isinstance(message.parts, list):
        return None
    for part in reversed(message.parts):
        approval = part.get("approval") if isinstance(part, dict) else None
        if part_state(part) != "approval-responded" or not isinstance(approval, dict):
            continue
        if not isinstance(approval.get("id"), str) or not isinstance(approval.get("approved"), bool):
            raise HTTPProblem(400, "invalid_field", "an approval response needs approval.id and approval.approved")
        run_id = _run_of(message)
        if run_id is None:
            raise HTTPProblem(400, "invalid_field", "the assistant message names no run (metadata.run_id or id)")
        reason = approval.get("reason")
        return ApprovalReply(
            conversation_id, run_id, approval["id"], approval["approved"], reason if isinstance(reason, str) else None
        )
    return None


def part_state(part: Any) -> Any:
    return part.get("state") if isinstance(part, dict) else None


def _message_text(message: UIMessage, where: str) -> str:
    """A UI message's text: its ``text`` parts (AI SDK 5+), else a ``content`` string. A
    text part whose ``text`` is not a string is a 400 naming it (``where``: the message):
    read leniently, its repr became the question (``['a']``) and the chat's title."""
    if isinstance(message.parts, list):
        texts: list[str] = []
        for j, part in enumerate(message.parts):
            if not isinstance(part, dict) or part.get("type") != "text":
                continue
            text = part.get("text")
            if text is not None and not isinstance(text, str):
                raise HTTPProblem(400, "invalid_field", f"{where}.parts[{j}].text must be a string")
            texts.append(text or "")
        return "".join(texts)
    return message.content if isinstance(message.content, str) else ""


def parse_body(
    body: dict[str, Any], *, max_message_chars: int
) -> tuple[ChatInput, list[Message], HistoryBranch | None] | ApprovalReply:
    """The run's input, the chat's earlier turns and what it replaces (a regenerated
    answer, an edited message: ``history_branch``), or the user's approval reply (the
    last message an assistant's with an ``approval-responded`` tool part), or a 400
    naming the first field (in ``UIChatRequest``'s order) at fault."""

    def refuse(name: str, raw: Any) -> HTTPProblem:
        if name == "id":
            return HTTPProblem(400, "invalid_field", f"id (the chat id) must be {CONVERSATION_ID_RULE}")
        if name == "trigger":
            return HTTPProblem(400, "invalid_field", f"trigger must be one of {', '.join(TRIGGERS)}")
        if name == "messages":
            return HTTPProblem(400, "invalid_field", "messages must be a non-empty array of UI messages")
        if name == "context_type":
            return context_type_problem(raw)
        if name == "context":
            return HTTPProblem(400, "invalid_field", "context must be a JSON object")
        return HTTPProblem(400, "invalid_field", f"multitask must be one of {', '.join(MULTITASK_POLICIES)}")

    def check(name: str, value: Any) -> None:
        if name == "id" and not CONVERSATION_ID.match(value):
            raise refuse(name, value)
        if name == "messages":
            if value[-1].role == "assistant" and any(
                part_state(p) == "approval-responded" for p in (value[-1].parts or []) if isinstance(p, dict)
            ):
                return  # an approval reply (read below)
            question = _message_text(value[-1], f"messages[{len(value) - 1}]")
            if value[-1].role != "user" or not has_visible_text(question):
                raise HTTPProblem(400, "invalid_field", "the last message must be a user message with a text part")
            if len(question) > max_message_chars:
                raise HTTPProblem(
                    400, "invalid_field", f"the last message is longer than {max_message_chars} characters"
                )
        if name == "context" and not isinstance(value or {}, dict):
            raise refuse(name, value)

    request = decode_fields(body, UIChatRequest, refuse, check)
    reply = approval_reply(request.id, request.messages[-1])
    if reply is not None:
        return reply
    earlier = [
        Message(m.role, text)
        for i, m in enumerate(request.messages[:-1])
        if m.role in ("user", "assistant") and (text := _message_text(m, f"messages[{i}]")).strip()
    ]
    question = _message_text(request.messages[-1], f"messages[{len(request.messages) - 1}]")
    chat = ChatInput(question, request.context_type, request.context or {}, request.id, request.multitask)
    return chat, earlier, history_branch(request)
