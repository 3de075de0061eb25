"""A provider's failure reads as the provider's own sentence on every face.

The openai SDK's ``exc.message`` is ``Error code: 500 - {'error': {'message': ...}}``, a
Python dict repr, and Ollama's client keeps an OpenAI-shaped ``error`` object as a dict;
users saw that text. Each face is driven over a real server against a loopback fake that
answers HTTP 500 with the provider's error body: the native ``error`` event, the AI SDK's
``errorText`` and the OpenAI face's 502 (and its error chunk) carry the sentence and no repr.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from app.config import Settings
from llm.ollama import OllamaProvider
from llm.openai import OpenAIProvider
from tests.conftest import collect_sse, running_app
from tests.fakes import FakeOllama, HttpError, running_fake
from tests.fakes.openai import FakeOpenAI

SENTENCE = "the fake model broke"
OPENAI_SHAPE = orjson.dumps({"error": {"message": SENTENCE, "type": "server_error", "param": None, "code": None}})
FACES = 4  # one failing model call for each request below


def _settings(tmp_path: Path) -> Settings:
    return Settings.from_env(
        {
            "AGENT_DB_PATH": str(tmp_path / "a.db"),
            "AGENT_MANDATORY_CONTEXTS": "none",
            "AGENT_INGEST_SAMPLE_KB": "false",
            "OLLAMA_HOST": "http://127.0.0.1:9",
        }
    )


def _openai() -> tuple[Any, Callable[[str], Any]]:
    fake = FakeOpenAI()
    for _ in range(FACES):
        fake.add_turn([HttpError(500, SENTENCE)])
    return fake, lambda url: OpenAIProvider(url + "/v1", "gpt-test", api_key="sk-test", timeout_s=10)


def _ollama_behind_an_openai_style_proxy() -> tuple[Any, Callable[[str], Any]]:
    fake = FakeOllama()
    for _ in range(FACES):
        fake.add_turn([HttpError(500, SENTENCE, body=OPENAI_SHAPE)])
    return fake, lambda url: OllamaProvider(url, "llama3.2", timeout=10)


@pytest.fixture(params=[_openai, _ollama_behind_an_openai_style_proxy], ids=["openai", "ollama"])
async def base(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    fake, make = request.param()
    async with running_fake(fake.app) as url, running_app(_settings(tmp_path), provider=make(url)) as (served, _):
        yield served


def _readable(text: str) -> None:
    assert SENTENCE in text, text
    assert "{'" not in text and "Error code" not in text, text


async def test_the_native_error_event(base: str) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        events = await collect_sse(
            client, "POST", f"{base}/v1/agent/chat", json={"message": "hi", "context_type": "workflow"}
        )
    [error] = [orjson.loads(e.data) for e in events if e.event == "error"]
    _readable(error["message"])


async def test_the_ai_sdk_error_text(base: str) -> None:
    message = {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}
    body = {"id": "chat-err", "messages": [message], "trigger": "submit-message", "context_type": "workflow"}
    async with httpx.AsyncClient(timeout=30) as client:
        events = await collect_sse(client, "POST", f"{base}/v1/agent/ui-stream", json=body)
    chunks = [orjson.loads(e.data) for e in events if e.data != "[DONE]"]
    [error] = [c for c in chunks if c["type"] == "error"]
    _readable(error["errorText"])


async def test_the_openai_face(base: str) -> None:
    question = [{"role": "user", "content": "hi"}]
    async with openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="sk-local", max_retries=0) as client:
        with pytest.raises(openai.APIStatusError) as failed:
            await client.chat.completions.create(model="agentchat-workflow", messages=question)  # type: ignore[arg-type]
        stream = await client.chat.completions.create(
            model="agentchat-workflow",
            messages=question,  # type: ignore[arg-type]
            stream=True,
        )
        with pytest.raises(openai.APIError) as mid_stream:
            async for _ in stream:
                pass
    assert failed.value.status_code == 502 and failed.value.code == "provider_error"
    # The SDK formats its own exception text; what the server sent is the body.
    assert isinstance(failed.value.body, dict)
    _readable(failed.value.body["message"])
    _readable(mid_stream.value.message)
