"""The native chat body declared once (``app/server/chat_request.py``): its literal types
say what the settings say, and the first field at fault in declaration order wins,
whatever order the client wrote the members in."""

from __future__ import annotations

from typing import Any, get_args

import pytest

from app.config import CONTEXT_TYPES
from app.server.chat_request import ChatRequest, ContextType, chat_request_schema, parse_chat_input
from app.server.problems import HTTPProblem
from storage.records import MULTITASK_POLICIES


def test_the_literal_types_are_the_settings_tuples() -> None:
    assert get_args(ContextType) == CONTEXT_TYPES
    assert set(chat_request_schema(100)["properties"]["multitask"]["enum"]) == set(MULTITASK_POLICIES)
    assert chat_request_schema(100)["properties"]["message"]["maxLength"] == 100
    fields = ["message", "context_type", "context", "conversation_id", "multitask", "title"]
    assert list(ChatRequest.__struct_fields__) == fields


@pytest.mark.parametrize(
    ("body", "error", "detail"),
    [
        ({"multitask": "x", "context_type": "bad", "message": None}, "invalid_field", "message is required"),
        ({"context_type": "bad", "message": "x" * 11}, "invalid_field", "message is longer than 10 characters"),
        ({"conversation_id": "a\n", "context_type": "bad", "message": "hi"}, "unknown_context_type",
         "context_type must be one of workflow, tables, knowledge; got 'bad'"),
        ({"message": "hi"}, "unknown_context_type",
         "context_type is required: one of workflow, tables, knowledge"),
        ({"multitask": None, "conversation_id": "a\n", "context_type": "tables", "message": "hi"}, "invalid_field",
         "conversation_id must be 1-128 characters of letters, digits, '_', '-', '.', ':'"),
        ({"multitask": None, "context_type": "tables", "message": "hi"}, "invalid_field",
         "multitask must be one of enqueue, reject, interrupt"),
    ],
)
def test_the_first_field_in_declaration_order_wins(body: dict[str, Any], error: str, detail: str) -> None:
    with pytest.raises(HTTPProblem) as caught:
        parse_chat_input(body, max_message_chars=10)
    assert (caught.value.status, caught.value.error, caught.value.detail) == (400, error, detail)


def test_a_valid_body_becomes_the_run_input() -> None:
    chat = parse_chat_input({"message": "hi", "context_type": "tables", "context": None}, max_message_chars=10)
    assert (chat.message, chat.context_type, chat.context, chat.conversation_id, chat.multitask) == (
        "hi", "tables", {}, None, "enqueue")


def test_an_unknown_member_is_refused_before_any_field() -> None:
    """Before "message is required": the misspelt field is the fault the client must see."""
    with pytest.raises(HTTPProblem) as caught:
        parse_chat_input({"mesage": "hi", "context_type": "bad", "extra": 1}, max_message_chars=10)
    problem = caught.value
    assert (problem.status, problem.error) == (400, "unknown_field")
    assert problem.detail.startswith("unknown fields: 'mesage' (did you mean message?), 'extra'; the known fields are")
    assert problem.fields == {"unknown_fields": ["mesage", "extra"], "did_you_mean": {"mesage": "message"}}
