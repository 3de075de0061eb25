"""The OpenAI completion request and the AI SDK body declared once
(``app/server/openai_request.py``, ``app/server/ai_sdk_request.py``): their literal types
say what the settings say, today's lenient members stay accepted, and the first field at
fault in declaration order wins."""

from __future__ import annotations

from typing import Any, get_args

import pytest

from app.server.ai_sdk_request import UIChatRequest, parse_body
from app.server.openai_request import ModelId, OpenAIProblem, model_ids, parse_request
from app.server.problems import HTTPProblem

USER = [{"role": "user", "content": "hi"}]


def test_the_model_type_is_the_model_ids() -> None:
    assert list(get_args(ModelId)) == model_ids()
    assert list(UIChatRequest.__struct_fields__) == [
        "id", "trigger", "messages", "message_id", "context_type", "context", "multitask"]


@pytest.mark.parametrize("extra", [{"stream": 1, "n": True}, {"stream": 0, "n": 1.0}, {"context": ""},
                                   {"context": 0}, {"context": []}])
def test_openai_lenient_members_are_kept(extra: dict[str, Any]) -> None:
    req = parse_request({"model": "agentchat-tables", "messages": USER, **extra}, {}, max_message_chars=10)
    assert (req.stream, req.context) == (extra.get("stream") == 1, {})


def test_the_header_conversation_id_wins() -> None:
    body = {"model": "agentchat-tables", "messages": USER, "conversation_id": 5}
    assert parse_request(body, {"x-conversation-id": "c1"}, max_message_chars=10).conversation_id == "c1"


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({"multitask": None, "messages": 1}, "missing_required_parameter", "model"),
        ({"model": "agentchat-tables", "messages": [{"role": "x", "content": 1}], "n": 2}, "invalid_value",
         "messages[0]"),
        ({"model": "agentchat-tables", "messages": [{"role": "x"}, {"content": 1}]}, "invalid_value", "messages[0]"),
        ({"model": "agentchat-tables", "messages": USER, "stream": "yes", "n": 2}, "unsupported_value", "n"),
        ({"model": "agentchat-tables", "messages": USER, "context": 1, "stream": 2}, "invalid_type", "stream"),
        ({"model": "agentchat-tables", "messages": USER, "conversation_id": "a\n", "context": "x"}, "invalid_type",
         "context"),
    ],
)
def test_openai_first_field_in_declaration_order_wins(body: dict[str, Any], code: str, param: str) -> None:
    with pytest.raises(OpenAIProblem) as caught:
        parse_request(body, {}, max_message_chars=10)
    assert (caught.value.error, caught.value.param) == (code, param)


def test_ai_sdk_body_first_field_wins_and_lenient_members() -> None:
    with pytest.raises(HTTPProblem) as caught:
        parse_body({"multitask": 1, "messages": [], "id": "c1", "trigger": "x"}, max_message_chars=10)
    assert caught.value.detail.startswith("trigger must be one of")
    chat, earlier, _ = parse_body({"id": "c1", "context": [], "messages": [
        {"role": "assistant", "content": "a"}, {"role": "user", "parts": [{"type": "text", "text": "q"}, 3]}]},
        max_message_chars=10)
    assert (chat.message, chat.context, chat.context_type, [m.content for m in earlier]) == ("q", {}, "knowledge",
                                                                                             ["a"])
