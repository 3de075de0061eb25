"""The native chat body (``POST /v1/agent/chat``, ``POST /v1/agent/runs``), declared once:
``ChatRequest`` both decodes the body (``parse_chat_input``) and is the ``ChatRequest``
schema of the OpenAPI description (``chat_request_schema``).

The conversation id types live here too: the OpenAI-compatible and AI SDK bodies name a
conversation with the same rule.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from app.config import CONTEXT_TYPES
from app.runs.records import ChatInput
from app.server.body_structs import ABSENT, body_schema, decode_fields
from app.server.history_request import MAX_TITLE_CHARS, title_problem
from app.server.problems import HTTPProblem
from app.server.visible_text import has_visible_text
from storage.records import MULTITASK_POLICIES, MultitaskPolicy

#: The contexts as a type (``app.config.CONTEXT_TYPES``, in its order; a test keeps them equal).
ContextType = Literal["workflow", "tables", "knowledge"]
#: The conversation id as OpenAPI (ECMAScript) reads it; Python's ``$`` also matches before a
#: final newline, so the server checks ``CONVERSATION_ID`` (``\Z``) after decoding as well.
CONVERSATION_ID_PATTERN = r"^[A-Za-z0-9_.:\-]{1,128}$"
CONVERSATION_ID = re.compile(r"^[A-Za-z0-9_.:\-]{1,128}\Z")
ConversationId = Annotated[str, Meta(pattern=CONVERSATION_ID_PATTERN)]
CONVERSATION_ID_RULE = "1-128 characters of letters, digits, '_', '-', '.', ':'"


class ChatRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Any other member is a 400 `unknown_field` (a typo such as `conversationId` would otherwise
    change what the run does in silence). Nested at most 64 levels; integers within 64 bits."""

    message: Annotated[str, Meta(
        min_length=1, pattern=r"\S",
        description="The question: at most `AGENT_MAX_MESSAGE_CHARS` characters (32000 unless configured), "
        "not only white space or invisible characters (zero-width spaces, control characters).",
    )]
    context_type: Annotated[ContextType, Meta(description="Which tools and prompt the run uses.")]
    context: Annotated[dict[str, Any] | None, Meta(
        description="The UI context (`workflow_id`, `table_id`, …); its IDs are injected into tool calls. "
        "`buckets` (an array of bucket names, or `bucket`: one name; `*`: every bucket) scopes the "
        "knowledge-base search instead of `AGENT_KB_DEFAULT_BUCKETS`; an unknown name is a 400.",
    )] = None
    conversation_id: Annotated[ConversationId | None, Meta(
        description="Continue this conversation (yours); omitted: a new one.",
    )] = None
    multitask: Annotated[MultitaskPolicy, Meta(
        description="When a run of the conversation is in progress: run after it, refuse (409), or cancel it.",
    )] = "enqueue"
    title: Annotated[
        Annotated[str, Meta(min_length=1, max_length=MAX_TITLE_CHARS, pattern=r"\S")] | None,
        Meta(
            description="The conversation's title, as your client names it (trimmed; 1-200 characters, not only "
            "white space). Taken when the conversation has no title yet — its first run, or one created by an "
            "attachment — and then no model call writes one. A conversation that already has a title keeps it "
            "(an earlier title, or your rename): rename with `PATCH /v1/agent/conversations/{id}`.",
        ),
    ] = None


def chat_request_schema(max_message_chars: int) -> dict[str, Any]:
    """``ChatRequest`` for the OpenAPI description, with this server's message bound."""
    return body_schema(ChatRequest, {"message": {"maxLength": max_message_chars}})


def context_type_problem(raw: Any) -> HTTPProblem:
    """The 400 for a missing or unknown ``context_type``, naming the choices, on every face
    that takes one (a missing one is "required", not "got None")."""
    choices = ", ".join(CONTEXT_TYPES)
    if raw is None or raw is ABSENT:
        return HTTPProblem(400, "unknown_context_type", f"context_type is required: one of {choices}")
    return HTTPProblem(400, "unknown_context_type", f"context_type must be one of {choices}; got {raw!r}")


def parse_chat_input(body: dict[str, Any], *, max_message_chars: int) -> ChatInput:
    """The run's input, or the 400 of the first field (in ``ChatRequest``'s order) at fault."""

    def refuse(name: str, raw: Any) -> HTTPProblem:
        if name == "message":
            if raw is None or raw is ABSENT:
                return HTTPProblem(400, "invalid_field", "message is required")
            if not isinstance(raw, str):
                return HTTPProblem(400, "invalid_field", "message must be a string")
            if raw == "":  # "it holds only white space ..." read wrong for a message of nothing
                return HTTPProblem(400, "invalid_field", "message must not be empty")
            return HTTPProblem(
                400, "invalid_field", "message must not be empty (it holds only white space or invisible characters)"
            )
        if name == "context_type":
            return context_type_problem(raw)
        if name == "context":
            return HTTPProblem(400, "invalid_field", "context must be a JSON object")
        if name == "conversation_id":
            return HTTPProblem(400, "invalid_field", f"conversation_id must be {CONVERSATION_ID_RULE}")
        if name == "title":
            return title_problem(raw)
        return HTTPProblem(400, "invalid_field", f"multitask must be one of {', '.join(MULTITASK_POLICIES)}")

    def check(name: str, value: Any) -> None:
        if name == "message" and not has_visible_text(value):
            raise refuse(name, value)
        if name == "message" and len(value) > max_message_chars:
            raise HTTPProblem(400, "invalid_field", f"message is longer than {max_message_chars} characters")
        if name == "conversation_id" and value is not None and not CONVERSATION_ID.match(value):
            raise refuse(name, value)

    request = decode_fields(body, ChatRequest, refuse, check)
    return ChatInput(
        message=request.message,
        context_type=request.context_type,
        context=request.context if request.context is not None else {},
        conversation_id=request.conversation_id,
        multitask=request.multitask,
        title=request.title.strip() if request.title is not None else None,
    )
