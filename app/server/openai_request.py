"""The OpenAI-compatible request: the models it names, its body parsed into a run's
input, and OpenAI's error shape (``{"error": {"message", "type", "param", "code"}}``).

Parsing is lenient where OpenAI servers are (unknown fields are ignored; ``system``/
``developer``/``tool`` messages are skipped: the agent has its own prompt and tools) and
strict where the agent needs it: the last message must be the user's question, in text.
No option that changes what the answer must be is dropped in silence: OpenAI's own ranges
are checked (400 with OpenAI's codes), ``max_tokens``/``max_completion_tokens`` and
``stop`` are honoured (``app/server/openai_cut.py``), and what the agent cannot honour
(a JSON ``response_format``, a required or named ``tool_choice``, ``logprobs``, audio
output, a ``logit_bias``, image/audio/file content parts) is a 400
``unsupported_parameter`` naming it. Sampling knobs within range (``temperature``,
``top_p``, the penalties, ``seed``, ``user``) and client ``tools`` the model may leave
unused (``tool_choice`` ``auto``/``none``) are accepted and ignored: the agent's model
and tools are the agent's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from agenttools.core.catalog import CONTEXT_TYPES
from app.server.body_structs import body_schema, decode_fields
from app.server.chat_request import CONVERSATION_ID, CONVERSATION_ID_RULE, ConversationId
from app.server.openai_errors import OpenAIProblem
from app.server.openai_options import CONTRACTS, RANGES, out_of_range
from app.server.visible_text import has_visible_text
from storage.records import MULTITASK_POLICIES, MultitaskPolicy

MODEL_PREFIX = "agentchat-"
_SKIPPED_ROLES = frozenset({"system", "developer", "tool", "function"})
#: The roles a message may have, in the order the OpenAPI description lists them.
ROLES = ("system", "developer", "user", "assistant", "tool", "function")
#: The models as a type (``model_ids()``, in its order; a test keeps them equal).
ModelId = Literal["agentchat-workflow", "agentchat-tables", "agentchat-knowledge"]


def model_ids() -> list[str]:
    return [MODEL_PREFIX + c for c in CONTEXT_TYPES]


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
        description="The text, or `text` parts (`refusal` parts of an assistant message are read as text); "
        "image, audio and file parts are refused (400 `unsupported_parameter`).",
    )] = None


class ChatCompletionRequest(msgspec.Struct, kw_only=True):
    """Unknown members are ignored. Out-of-range options are refused as OpenAI refuses them;
    options the agent cannot honour are 400 `unsupported_parameter`."""

    model: Annotated[ModelId, Meta(description="The agent context, as a model of `GET /v1/models`.")]
    messages: Annotated[list[ChatMessage], Meta(
        min_length=1, description="The conversation; the last is the question.",
    )]
    n: Annotated[bool | int | float | None, Meta(description="Only 1.")] = 1
    max_tokens: Annotated[Annotated[int, Meta(ge=1)] | None, Meta(
        description="The answer stops there (`finish_reason: length`); tokens are estimated as 4 characters.",
    )] = None
    max_completion_tokens: Annotated[Annotated[int, Meta(ge=1)] | None, Meta(
        description="As `max_tokens` (with both, the smaller).",
    )] = None
    stop: Annotated[str | Annotated[list[str], Meta(max_length=4)] | None, Meta(
        description="Up to 4 sequences: the answer stops before the first (`finish_reason: stop`).",
    )] = None
    temperature: Annotated[Annotated[float, Meta(ge=0, le=2)] | None, Meta(
        description="Checked (0..2), then ignored: the agent's model samples as configured.",
    )] = None
    top_p: Annotated[Annotated[float, Meta(ge=0, le=1)] | None, Meta(
        description="Checked (0..1), then ignored.",
    )] = None
    presence_penalty: Annotated[Annotated[float, Meta(ge=-2, le=2)] | None, Meta(
        description="Checked (-2..2), then ignored.",
    )] = None
    frequency_penalty: Annotated[Annotated[float, Meta(ge=-2, le=2)] | None, Meta(
        description="Checked (-2..2), then ignored.",
    )] = None
    seed: Annotated[int | None, Meta(description="Checked (an integer), then ignored.")] = None
    logprobs: Annotated[bool | None, Meta(description="Only false: log probabilities are not available.")] = None
    top_logprobs: Annotated[Annotated[int, Meta(ge=0, le=20)] | None, Meta(description="Only 0.")] = None
    response_format: Annotated[Any, Meta(description="Only `{\"type\": \"text\"}`: JSON output is refused.")] = None
    tool_choice: Annotated[Any, Meta(
        description="`auto` or `none` (client `tools` are then accepted and left unused); `required` or a named "
        "function is refused: the agent calls only its own tools.",
    )] = None
    function_call: Annotated[Any, Meta(
        description="As `tool_choice` (the legacy form): a named function is refused.",
    )] = None
    modalities: Annotated[list[str] | None, Meta(description="Only `text`.")] = None
    audio: Annotated[Any, Meta(description="Refused: the answer is text.")] = None
    logit_bias: Annotated[dict[str, Any] | None, Meta(description="Only empty: token biases are not available.")] = None
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
    #: ``max_tokens`` / ``max_completion_tokens`` (the smaller), ``stop``: the face cuts the answer there.
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()

    @property
    def question(self) -> str:
        return self.turns[-1][1]


_TEXT_PARTS = {"user": frozenset({"text"}), "assistant": frozenset({"text", "refusal"})}


def _text(content: str | list[Any] | None, role: str, where: str) -> str:
    """A message's text: a string, or its text parts. A part the agent cannot read (an
    image, audio, a file) is refused rather than dropped: the answer would ignore it."""
    if content is None or isinstance(content, str):
        return content or ""
    allowed = _TEXT_PARTS.get(role, frozenset({"text"}))
    texts: list[str] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str):
            raise OpenAIProblem(
                400, "invalid_value", f"{where}.content[{j}] must be an object with a type", f"{where}.content[{j}]"
            )
        if kind not in allowed:
            raise OpenAIProblem(
                400, "unsupported_parameter",
                f"{kind} content parts are not supported: the agent reads text only ({where}.content[{j}])",
                f"{where}.content[{j}]",
            )
        text = part.get(kind)
        if text is not None and not isinstance(text, str):
            # OpenAI refuses it too; str() made its repr the question (``['a']``).
            raise OpenAIProblem(
                400, "invalid_type", f"{where}.content[{j}].{kind} must be a string", f"{where}.content[{j}].{kind}"
            )
        texts.append(text or "")
    return "\n".join(texts)


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
        role = message.role
        if role not in ("user", "assistant"):
            if role not in _SKIPPED_ROLES:
                raise OpenAIProblem(400, "invalid_value", f"{where}.role {role!r} is not supported", where)
            continue
        text = _text(message.content, role, where)
        if text.strip() or (role == "user" and i == len(messages) - 1):
            turns.append((role, text))
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
        if name in RANGES:
            return out_of_range(name, raw)
        if name == "stop":
            return OpenAIProblem(400, "invalid_value", "stop must be a string or an array of up to 4 strings", "stop")
        if name in ("logprobs", "modalities", "logit_bias"):
            shape = {"logprobs": "a boolean", "modalities": "an array of strings", "logit_bias": "an object"}[name]
            return OpenAIProblem(400, "invalid_type", f"{name} must be {shape}", name)
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
            asked = isinstance(last, dict) and last.get("role") == "user" and turns
            if not asked or not has_visible_text(turns[-1][1]):
                raise OpenAIProblem(
                    400, "invalid_value", "the last message must be a user message with text", "messages"
                )
            if len(turns[-1][1]) > max_message_chars:
                # OpenAI's own words for a string past its limit (code and param), which a
                # client written for it tells apart from other invalid values.
                where = f"messages[{len(body['messages']) - 1}].content"
                raise OpenAIProblem(
                    400,
                    "string_above_max_length",
                    f"Invalid '{where}': string too long: the last message is longer than {max_message_chars} "
                    "characters",
                    where,
                )
        elif (name == "n" and value not in (1, None)) or (name == "stream" and value not in (True, False, None)):
            raise refuse(name, value)
        elif name in CONTRACTS:
            CONTRACTS[name](value)
        elif name == "context" and not isinstance(value or {}, dict):
            raise OpenAIProblem(400, "invalid_type", "context must be a JSON object", "context")
        elif name == "conversation_id" and value is not None and not CONVERSATION_ID.match(value):
            raise refuse(name, value)

    request = decode_fields(body, ChatCompletionRequest, refuse, check)
    options = request.stream_options
    limits = [n for n in (request.max_tokens, request.max_completion_tokens) if n is not None]
    stops = (request.stop,) if isinstance(request.stop, str) else tuple(request.stop or ())
    return CompletionRequest(
        model=request.model,
        context_type=request.model[len(MODEL_PREFIX):],
        turns=turns,
        stream=bool(request.stream),
        include_usage=isinstance(options, dict) and options.get("include_usage") is True,
        context=request.context or {},
        conversation_id=request.conversation_id,
        multitask=request.multitask,
        max_tokens=min(limits) if limits else None,
        stop=stops,
    )
