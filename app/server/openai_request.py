"""The OpenAI-compatible request: the models it names, its body parsed into a run's
input, and OpenAI's error shape (``{"error": {"message", "type", "param", "code"}}``).

Parsing is lenient where OpenAI servers are (unknown fields, ``max_tokens``,
``temperature``, client ``tools`` are accepted and ignored; ``system``/``developer``/
``tool`` messages are skipped: the agent has its own prompt and tools) and strict where
the agent needs it: the last message must be the user's question, in text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta
from starlette.responses import Response

from agenttools.core.catalog import CONTEXT_TYPES
from app.server.body_structs import body_schema, decode_fields
from app.server.chat_request import CONVERSATION_ID, CONVERSATION_ID_RULE, ConversationId
from app.server.problems import HTTPProblem, ORJSONResponse
from storage.records import MULTITASK_POLICIES, MultitaskPolicy

MODEL_PREFIX = "agentchat-"
_SKIPPED_ROLES = frozenset({"system", "developer", "tool", "function"})
#: The roles a message may have, in the order the OpenAPI description lists them.
ROLES = ("system", "developer", "user", "assistant", "tool", "function")
#: The models as a type (``model_ids()``, in its order; a test keeps them equal).
ModelId = Literal["agentchat-workflow", "agentchat-tables", "agentchat-knowledge"]
_STATUS_TYPES = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error"}


def model_ids() -> list[str]:
    return [MODEL_PREFIX + c for c in CONTEXT_TYPES]


class OpenAIProblem(HTTPProblem):
    """An ``HTTPProblem`` that also names the request field at fault (OpenAI's ``param``)."""

    def __init__(self, status: int, error: str, detail: str, param: str | None = None) -> None:
        super().__init__(status, error, detail)
        self.param = param


def error_body(message: str, code: str, status: int, param: str | None = None) -> dict[str, Any]:
    kind = _STATUS_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_response(exc: HTTPProblem) -> Response:
    body = error_body(exc.detail, exc.error, exc.status, getattr(exc, "param", None))
    body["error"] = {**exc.fields, **body["error"]}  # e.g. approval_pending's run and call
    return ORJSONResponse(body, exc.status, headers=exc.headers)


def unknown_model(model: str) -> OpenAIProblem:
    return OpenAIProblem(
        404, "model_not_found",
        f"The model {model!r} does not exist; use one of {', '.join(model_ids())}", "model",
    )


# --- the request ----------------------------------------------------------------------------


class ChatMessage(msgspec.Struct, kw_only=True):
    """A chat message; other members are ignored."""

    role: Annotated[str, Meta(
        description="`user`/`assistant`: a turn (the last: the question); `system`, `developer`, `tool`, "
        "`function`: skipped (the agent has its own prompt and tools).",
    )]
    content: Annotated[str | list[Any] | None, Meta(
        description="The text, or parts whose `text` parts are read (images and the like are skipped).",
    )] = None


class ChatCompletionRequest(msgspec.Struct, kw_only=True):
    """Unknown members are ignored; `max_tokens`, `temperature`, `tools` and the like are too."""

    model: Annotated[ModelId, Meta(description="The agent context, as a model of `GET /v1/models`.")]
    messages: Annotated[list[ChatMessage], Meta(
        min_length=1, description="The conversation; the last is the question.",
    )]
    n: Annotated[bool | int | float | None, Meta(description="Only 1.")] = 1
    stream: Annotated[bool | int | float | None, Meta(
        description="Answer `chat.completion.chunk`s, then `[DONE]`.",
    )] = False
    stream_options: Annotated[Any, Meta(description="`include_usage: true`: a last chunk with the usage.")] = None
    context: Annotated[Any, Meta(description="agentchat: the run's UI context (a JSON object).")] = None
    conversation_id: Annotated[ConversationId | None, Meta(
        description="agentchat: continue this conversation (the `X-Conversation-Id` header wins).",
    )] = None
    multitask: Annotated[MultitaskPolicy, Meta(
        description="agentchat: when a run of the conversation is in progress: run after it, refuse (409), "
        "or cancel it.",
    )] = "enqueue"


def completion_request_schema() -> dict[str, Any]:
    """``ChatCompletionRequest`` for the OpenAPI description."""
    schema = body_schema(ChatCompletionRequest, {
        "stream": {"anyOf": [{"type": "boolean"}, {"enum": [0, 1]}, {"type": "null"}]},
        "stream_options": {"type": ["object", "null"], "properties": {"include_usage": {"type": "boolean"}}},
        "n": {"anyOf": [{"const": True}, {"const": 1}, {"type": "null"}]},
        "context": {"type": ["object", "null"]},
    })
    schema["properties"]["messages"]["items"]["properties"]["role"]["enum"] = list(ROLES)
    return schema


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    model: str
    context_type: str
    #: The client's user/assistant turns as ``(role, text)``; the last is the question.
    turns: list[tuple[str, str]]
    stream: bool
    include_usage: bool
    context: dict[str, Any] = field(default_factory=dict)
    conversation_id: str | None = None
    multitask: MultitaskPolicy = "enqueue"

    @property
    def question(self) -> str:
        return self.turns[-1][1]


def _text(content: str | list[Any] | None) -> str:
    """A message's text: a string, or the ``text`` parts of a list (images etc. skipped)."""
    if content is None or isinstance(content, str):
        return content or ""
    return "\n".join(str(p.get("text") or "") for p in content if isinstance(p, dict) and p.get("type") == "text")


def _turns(messages: list[Any]) -> list[tuple[str, str]]:
    """The user/assistant turns of the messages as sent, or the 400 of the first message at
    fault (each decoded field by field: a bad content is reported before an unsupported role)."""
    turns: list[tuple[str, str]] = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"

        def refuse(name: str, raw: Any, where: str = where) -> OpenAIProblem:
            if name == "role":
                return OpenAIProblem(400, "invalid_value", f"{where} must be an object with a role", where)
            return OpenAIProblem(400, "invalid_value", f"{where}.content must be a string or an array of parts", where)

        if not isinstance(m, dict):
            raise refuse("role", m)
        message = decode_fields(m, ChatMessage, refuse)
        role, text = message.role, _text(message.content)
        if role in ("user", "assistant"):
            if text.strip() or (role == "user" and i == len(messages) - 1):
                turns.append((role, text))
        elif role not in _SKIPPED_ROLES:
            raise OpenAIProblem(400, "invalid_value", f"{where}.role {role!r} is not supported", where)
    return turns


def parse_request(body: dict[str, Any], headers: Any, *, max_message_chars: int) -> CompletionRequest:
    """The run's request, or the error of the first field (in ``ChatCompletionRequest``'s
    order) at fault. The ``X-Conversation-Id`` header, when sent, stands for ``conversation_id``."""
    header_id = headers.get("x-conversation-id")
    if header_id:
        body = {**body, "conversation_id": header_id}
    turns: list[tuple[str, str]] = []

    def refuse(name: str, raw: Any) -> OpenAIProblem:
        if name == "model":
            if isinstance(raw, str) and raw:
                return unknown_model(raw)
            return OpenAIProblem(400, "missing_required_parameter", "model is required (a string)", "model")
        if name == "messages":
            if isinstance(raw, list) and raw:
                _turns(raw)  # raises the first message's error
            return OpenAIProblem(400, "invalid_value", "messages must be a non-empty array", "messages")
        if name == "n":
            return OpenAIProblem(400, "unsupported_value", "only n=1 is supported", "n")
        if name == "stream":
            return OpenAIProblem(400, "invalid_type", "stream must be a boolean", "stream")
        if name == "conversation_id":
            return OpenAIProblem(
                400, "invalid_value", f"the conversation id must be {CONVERSATION_ID_RULE}", "conversation_id"
            )
        return OpenAIProblem(400, "invalid_value", f"multitask must be one of {', '.join(MULTITASK_POLICIES)}")

    def check(name: str, value: Any) -> None:
        if name == "messages":
            turns.extend(_turns(body["messages"]))
            last = body["messages"][-1]
            if not (isinstance(last, dict) and last.get("role") == "user") or not turns or not turns[-1][1].strip():
                raise OpenAIProblem(
                    400, "invalid_value", "the last message must be a user message with text", "messages"
                )
            if len(turns[-1][1]) > max_message_chars:
                raise OpenAIProblem(
                    400, "invalid_value", f"the last message is longer than {max_message_chars} characters", "messages"
                )
        elif (name == "n" and value not in (1, None)) or (name == "stream" and value not in (True, False, None)):
            raise refuse(name, value)
        elif name == "context" and not isinstance(value or {}, dict):
            raise OpenAIProblem(400, "invalid_type", "context must be a JSON object", "context")
        elif name == "conversation_id" and value is not None and not CONVERSATION_ID.match(value):
            raise refuse(name, value)

    request = decode_fields(body, ChatCompletionRequest, refuse, check)
    options = request.stream_options
    return CompletionRequest(
        model=request.model,
        context_type=request.model[len(MODEL_PREFIX):],
        turns=turns,
        stream=bool(request.stream),
        include_usage=isinstance(options, dict) and options.get("include_usage") is True,
        context=request.context or {},
        conversation_id=request.conversation_id,
        multitask=request.multitask,
    )
