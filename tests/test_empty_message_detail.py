"""The 400 for an empty ``message`` says just that: it said "(it holds only white space or
invisible characters)" of ``""`` too, which holds neither. A message of white space or
invisible characters keeps that reason (``tests/test_invisible_message.py``)."""

from __future__ import annotations

import pytest

from app.server.chat_request import parse_chat_input
from app.server.problems import HTTPProblem


def _refusal(message: str) -> HTTPProblem:
    with pytest.raises(HTTPProblem) as refused:
        parse_chat_input({"message": message, "context_type": "knowledge"}, max_message_chars=100)
    return refused.value


def test_an_empty_message_is_refused_as_empty() -> None:
    said = _refusal("")
    assert (said.status, said.error, said.detail) == (400, "invalid_field", "message must not be empty")


def test_a_message_of_white_space_or_invisible_characters_says_so() -> None:
    for message in (" \t\n", "\u200b"):
        said = _refusal(message)
        assert said.detail == "message must not be empty (it holds only white space or invisible characters)"
