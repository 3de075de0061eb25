"""The offline answer when nothing was searched says who named the missing buckets.

A search whose buckets do not exist (``missing_buckets``) answers "I could not search
the knowledge base", not "could not find". The buckets come from the setting
``AGENT_KB_DEFAULT_BUCKETS`` or from the chat's own ``context.buckets``
(``agenttools.rag.kb_search`` says which in its warning); the answer points at that one,
and at neither when the result does not say (review 39: it always blamed the setting).
The warnings are made by the search tool's own function, so a change of its wording
shows here.
"""

from __future__ import annotations

import asyncio

import orjson
import pytest

from agenttools.rag.kb_search import BY_CONTEXT, BY_SETTING, _missing_warning
from llm.extractive import ExtractiveProvider
from llm.types import ChatRequest, ContentDelta, Message, ToolDefinition, ToolResult


def _answer(result: dict[str, object]) -> str:
    """The provider's answer to a question whose knowledge search came back ``result``."""
    tools = [ToolDefinition(n, "", {}) for n in ("knowledge_base_search", "generate_response")]
    messages = [
        Message("user", "How do I resume a stream?"),
        Message("user", "", tool_results=[ToolResult("c1", "knowledge_base_search", orjson.dumps(result).decode())]),
    ]

    async def run() -> str:
        events = [ev async for ev in ExtractiveProvider().stream_chat(ChatRequest("", messages, tools))]
        return "".join(ev.text for ev in events if isinstance(ev, ContentDelta))

    return asyncio.run(run())


def _nothing(named_by: str | None) -> dict[str, object]:
    missing = ["nosuchbucket"]
    warnings = [] if named_by is None else [_missing_warning(missing, named_by)]
    return {"query_id": "q1", "kb_id": "default", "missing_buckets": missing, "warnings": warnings, "chunks": []}


def test_buckets_named_by_the_setting_point_at_the_setting() -> None:
    answer = _answer(_nothing(BY_SETTING))
    assert answer.startswith("I could not search the knowledge base: the bucket(s) 'nosuchbucket' do not exist.")
    assert "AGENT_KB_DEFAULT_BUCKETS" in answer and "context.buckets" not in answer, answer


def test_buckets_named_by_the_request_point_at_the_request() -> None:
    answer = _answer(_nothing(BY_CONTEXT))
    assert answer.startswith("I could not search the knowledge base: the bucket(s) 'nosuchbucket' do not exist.")
    assert "context.buckets" in answer and "AGENT_KB_DEFAULT_BUCKETS" not in answer, answer


@pytest.mark.parametrize("named_by", [None, ""])
def test_buckets_named_by_no_one_said_blame_nothing(named_by: str | None) -> None:
    answer = _answer(_nothing(named_by))
    assert answer.startswith("I could not search the knowledge base: the bucket(s) 'nosuchbucket' do not exist.")
    assert "AGENT_KB_DEFAULT_BUCKETS" not in answer and "context.buckets" not in answer, answer
    assert "agentchat buckets" in answer
