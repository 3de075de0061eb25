"""``/v1/chat/completions`` drops no option in silence, driven by the official ``openai``
SDK against a live server (the offline extractive answerer over a small knowledge base).

An option that changes what the answer must be is honoured (``max_tokens`` /
``max_completion_tokens``: the answer stops there with ``finish_reason: "length"``;
``stop``: before the sequence, ``"stop"``) or refused with OpenAI's error shape naming it
(``unsupported_parameter``); numbers out of OpenAI's ranges are refused with its codes.
Streamed and not: a streamed request is refused before its stream starts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest
import pytest_asyncio

from app.config import Settings
from tests.conftest import offline_settings, running_app

DOCS = [
    {
        "id": "doc-resume",
        "title": "Resuming a run",
        "text": "Runs outlive their connections. To resume a stream after a disconnect, reconnect to "
        "GET /v1/agent/runs/{run_id}/events with the Last-Event-ID header and the server replays "
        "every event you missed, then follows the run live.",
    },
]
QUESTION = [{"role": "user", "content": "How do I resume a stream after a disconnect?"}]
MODEL = "agentchat-knowledge"
FUNCTION = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}


async def _serving(settings: Settings) -> AsyncIterator[str]:
    async with running_app(settings) as (url, _), httpx.AsyncClient(base_url=url, timeout=30) as http:
        assert (await http.post("/v1/kb/documents", json={"documents": DOCS})).status_code == 200
        yield url


@pytest.fixture
async def base(offline: Settings) -> AsyncIterator[str]:
    """A server of the test's own, for the tests whose requests are answered."""
    async for url in _serving(offline):
        yield url


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def refusing(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    """One server for every refusal test: a refused request starts no run and stores
    nothing (it is refused before its stream or run starts), so what one refusal test does
    cannot change another's answer; a server each was ~80 % of this file's time. The 46
    refusals stay within the default 60 requests a minute of one client."""
    async for url in _serving(offline_settings(tmp_path_factory.mktemp("refusing"))):
        yield url


#: The refusal tests run in the loop of the module's ``refusing`` server.
REFUSAL = pytest.mark.asyncio(loop_scope="module")


def sdk(base: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="sk-local", max_retries=0)


REFUSED: list[tuple[str, dict[str, Any], str, str]] = [
    ("json_object", {"response_format": {"type": "json_object"}}, "response_format", "unsupported_parameter"),
    (
        "json_schema",
        {"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}}},
        "response_format",
        "unsupported_parameter",
    ),
    ("tool_required", {"tools": [FUNCTION], "tool_choice": "required"}, "tool_choice", "unsupported_parameter"),
    (
        "tool_named",
        {"tools": [FUNCTION], "tool_choice": {"type": "function", "function": {"name": "lookup"}}},
        "tool_choice",
        "unsupported_parameter",
    ),
    ("logprobs", {"logprobs": True}, "logprobs", "unsupported_parameter"),
    ("top_logprobs", {"top_logprobs": 3}, "top_logprobs", "unsupported_parameter"),
    (
        "function_call_named",
        {"functions": [FUNCTION["function"]], "function_call": {"name": "lookup"}},
        "function_call",
        "unsupported_parameter",
    ),
    ("audio_out", {"modalities": ["text", "audio"]}, "modalities", "unsupported_parameter"),
    ("audio", {"audio": {"voice": "alloy", "format": "wav"}}, "audio", "unsupported_parameter"),
    ("logit_bias", {"logit_bias": {"50256": -100}}, "logit_bias", "unsupported_parameter"),
    ("temperature_7", {"temperature": 7}, "temperature", "decimal_above_max_value"),
    ("temperature_neg", {"temperature": -0.5}, "temperature", "decimal_below_min_value"),
    ("top_p", {"top_p": 1.5}, "top_p", "decimal_above_max_value"),
    ("presence_penalty", {"presence_penalty": -3}, "presence_penalty", "decimal_below_min_value"),
    ("max_tokens_neg", {"max_tokens": -5}, "max_tokens", "integer_below_min_value"),
    ("max_completion_tokens_0", {"max_completion_tokens": 0}, "max_completion_tokens", "integer_below_min_value"),
    ("max_tokens_float", {"max_tokens": 2.5}, "max_tokens", "invalid_type"),
    ("stop_5", {"stop": ["a", "b", "c", "d", "e"]}, "stop", "invalid_value"),
]
PARTS: list[tuple[str, dict[str, Any]]] = [
    ("image", {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}),
    ("audio", {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}),
]


@REFUSAL
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(("extra", "param", "code"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
async def test_an_option_the_answer_cannot_honour_is_refused_by_name(
    refusing: str, stream: bool, extra: dict[str, Any], param: str, code: str
) -> None:
    async with sdk(refusing) as client:
        with pytest.raises(openai.BadRequestError) as refused:
            await client.chat.completions.create(model=MODEL, messages=QUESTION, stream=stream, **extra)  # type: ignore[call-overload]
    assert refused.value.status_code == 400
    assert (refused.value.param, refused.value.code, refused.value.type) == (param, code, "invalid_request_error")
    assert isinstance(refused.value.body, dict) and param in refused.value.body["message"]


@REFUSAL
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("part", [p[1] for p in PARTS], ids=[p[0] for p in PARTS])
async def test_a_content_part_the_agent_cannot_read_is_refused(
    refusing: str, stream: bool, part: dict[str, Any]
) -> None:
    message = {"role": "user", "content": [{"type": "text", "text": "What does this show?"}, part]}
    async with sdk(refusing) as client:
        with pytest.raises(openai.BadRequestError) as refused:
            await client.chat.completions.create(model=MODEL, messages=[message], stream=stream)  # type: ignore[call-overload]
    assert (refused.value.param, refused.value.code) == ("messages[0].content[1]", "unsupported_parameter")
    assert isinstance(refused.value.body, dict) and part["type"] in refused.value.body["message"]


@REFUSAL
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("text", [5, ["What is a bucket?"], {"text": "hi"}], ids=["number", "array", "object"])
async def test_a_text_part_whose_text_is_not_a_string_is_refused(refusing: str, stream: bool, text: Any) -> None:
    """A text part's ``text`` of another type was turned into its Python repr (``5``,
    ``['What is a bucket?']``) and answered, the conversation titled with it; OpenAI's API
    refuses it as a type error, and so does this face."""
    message = {"role": "user", "content": [{"type": "text", "text": text}]}
    async with sdk(refusing) as client:
        with pytest.raises(openai.BadRequestError) as refused:
            await client.chat.completions.create(model=MODEL, messages=[message], stream=stream)  # type: ignore[call-overload]
    assert (refused.value.param, refused.value.code) == ("messages[0].content[0].text", "invalid_type")
    assert isinstance(refused.value.body, dict) and "must be a string" in refused.value.body["message"]


async def _whole(client: openai.AsyncOpenAI, **extra: Any) -> tuple[str, str]:
    done = await client.chat.completions.create(model=MODEL, messages=QUESTION, **extra)  # type: ignore[call-overload]
    [choice] = done.choices
    return choice.message.content or "", choice.finish_reason


async def _streamed(client: openai.AsyncOpenAI, **extra: Any) -> tuple[str, str]:
    stream = await client.chat.completions.create(model=MODEL, messages=QUESTION, stream=True, **extra)  # type: ignore[call-overload]
    text, reasons = "", []
    async for chunk in stream:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            if choice.finish_reason is not None:
                reasons.append(choice.finish_reason)
    assert len(reasons) == 1, reasons
    return text, reasons[0]


@pytest.mark.parametrize("read", [_whole, _streamed], ids=["whole", "stream"])
async def test_max_tokens_and_stop_cut_the_answer(base: str, read: Any) -> None:
    async with sdk(base) as client:
        full, reason = await read(client, temperature=0.2, top_p=1, seed=7, user="u1", tools=[FUNCTION])
        assert reason == "stop" and "Last-Event-ID" in full and len(full) > 40
        short, short_reason = await read(client, max_tokens=5)
        smaller, _ = await read(client, max_tokens=50, max_completion_tokens=5)
        before, stop_reason = await read(client, stop=["Last-Event-ID", "never in the answer"])
        single, _ = await read(client, stop="Last-Event-ID")
    # 5 tokens: 20 characters at most, the start of the same answer.
    assert short_reason == "length" and 0 < len(short) <= 20 and full.startswith(short), short
    assert smaller == short
    assert stop_reason == "stop" and before == full[: full.index("Last-Event-ID")] == single
