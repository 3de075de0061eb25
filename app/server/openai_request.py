"""The OpenAI-compatible request: the models it names, its body parsed into a run's
input, and OpenAI's error shape (``{"error": {"message", "type", "param", "code"}}``).

Parsing is lenient where OpenAI servers are (unknown fields, ``max_tokens``,
``temperature``, client ``tools`` are accepted and ignored; ``system``/``developer``/
``tool`` messages are skipped: the agent has its own prompt and tools) and strict where
the agent needs it: the last message must be the user's question, in text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from starlette.responses import Response

from agenttools.core.catalog import CONTEXT_TYPES
from app.server.chat_request import CONVERSATION_ID
from app.server.problems import HTTPProblem, ORJSONResponse
from storage.records import MULTITASK_POLICIES, MultitaskPolicy

MODEL_PREFIX = "agentchat-"
_SKIPPED_ROLES = frozenset({"system", "developer", "tool", "function"})
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
    return ORJSONResponse(body, exc.status, headers=exc.headers)


def unknown_model(model: str) -> OpenAIProblem:
    return OpenAIProblem(
        404, "model_not_found",
        f"The model {model!r} does not exist; use one of {', '.join(model_ids())}", "model",
    )


# --- the request ----------------------------------------------------------------------------


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


def _text(content: Any, where: str) -> str:
    """A message's text: a string, or the ``text`` parts of a list (images etc. skipped)."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text") or "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    raise OpenAIProblem(400, "invalid_value", f"{where}.content must be a string or an array of parts", where)


def parse_request(body: dict[str, Any], headers: Any, *, max_message_chars: int) -> CompletionRequest:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise OpenAIProblem(400, "missing_required_parameter", "model is required (a string)", "model")
    if model not in model_ids():
        raise unknown_model(model)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise OpenAIProblem(400, "invalid_value", "messages must be a non-empty array", "messages")
    turns: list[tuple[str, str]] = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise OpenAIProblem(400, "invalid_value", f"{where} must be an object with a role", where)
        role = m["role"]
        text = _text(m.get("content"), where)
        if role in ("user", "assistant"):
            if text.strip() or (role == "user" and i == len(messages) - 1):
                turns.append((role, text))
        elif role not in _SKIPPED_ROLES:
            raise OpenAIProblem(400, "invalid_value", f"{where}.role {role!r} is not supported", where)
    last = messages[-1]
    if not (isinstance(last, dict) and last.get("role") == "user") or not turns or not turns[-1][1].strip():
        raise OpenAIProblem(400, "invalid_value", "the last message must be a user message with text", "messages")
    if len(turns[-1][1]) > max_message_chars:
        raise OpenAIProblem(
            400, "invalid_value", f"the last message is longer than {max_message_chars} characters", "messages"
        )
    n = body.get("n", 1)
    if n not in (1, None):
        raise OpenAIProblem(400, "unsupported_value", "only n=1 is supported", "n")
    stream = body.get("stream", False)
    if stream not in (True, False, None):
        raise OpenAIProblem(400, "invalid_type", "stream must be a boolean", "stream")
    options = body.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    context = body.get("context") or {}
    if not isinstance(context, dict):
        raise OpenAIProblem(400, "invalid_type", "context must be a JSON object", "context")
    conversation_id = headers.get("x-conversation-id") or body.get("conversation_id")
    if conversation_id is not None and (
        not isinstance(conversation_id, str) or not CONVERSATION_ID.match(conversation_id)
    ):
        raise OpenAIProblem(
            400, "invalid_value",
            "the conversation id must be 1-128 characters of letters, digits, '_', '-', '.', ':'", "conversation_id",
        )
    multitask = body.get("multitask", "enqueue")
    if multitask not in MULTITASK_POLICIES:
        raise OpenAIProblem(400, "invalid_value", f"multitask must be one of {', '.join(MULTITASK_POLICIES)}")
    return CompletionRequest(
        model=model,
        context_type=model[len(MODEL_PREFIX):],
        turns=turns,
        stream=bool(stream),
        include_usage=include_usage,
        context=context,
        conversation_id=conversation_id,
        multitask=multitask,
    )
