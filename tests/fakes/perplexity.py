"""A loopback fake of Perplexity's Chat Completions API (``POST /chat/completions``).

It speaks the documented wire format: Bearer auth, ``{"model", "messages"}`` in,
``{"id", "model", "choices": [{"message": {"role", "content"}}], "search_results": [...],
"usage"}`` out (or the older ``citations: [url]`` list), and ``{"error": {...}}`` bodies
with the HTTP status on failure. Each request consumes the next scripted reply:

* :class:`Answer` - a success with ``search_results`` (or legacy ``citations``)
* :class:`Fail` - an HTTP error (429 with ``Retry-After``, 500, ...)
* :class:`Hang` - never answers, until the client gives up (its disconnect ends it)

A callable script builds the reply from the decoded request body. Running out of script
is answered with HTTP 500 and recorded in ``unexpected`` so a test can assert on it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


@dataclass(frozen=True, slots=True)
class Source:
    url: str
    title: str = ""
    date: str | None = None
    snippet: str | None = None


@dataclass(frozen=True, slots=True)
class Answer:
    text: str
    sources: Sequence[Source] = ()
    legacy_citations: bool = False  # send only the old ``citations: [url]`` field
    model: str = "sonar"


@dataclass(frozen=True, slots=True)
class Fail:
    status: int
    message: str = "fake failure"
    retry_after: str | None = None


@dataclass(frozen=True, slots=True)
class Hang:
    """Hold the request open until the client disconnects."""


Reply: TypeAlias = Answer | Fail | Hang
ReplyFactory: TypeAlias = Callable[[dict[str, Any]], Reply]


@dataclass(slots=True)
class RecordedCall:
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def user_message(self) -> str:
        return next(m["content"] for m in self.body["messages"] if m["role"] == "user")


@dataclass
class FakePerplexity:
    api_key: str = "pplx-test-key"
    script: list[Reply | ReplyFactory] | ReplyFactory = field(default_factory=list)
    calls: list[RecordedCall] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    disconnected: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, *replies: Reply | ReplyFactory) -> None:
        if callable(self.script):
            raise TypeError("this fake answers with a factory; it has no queue")
        self.script.extend(replies)

    @property
    def app(self) -> Starlette:
        return Starlette(routes=[Route("/chat/completions", self._chat, methods=["POST"])])

    def _next(self, body: dict[str, Any]) -> Reply | None:
        if callable(self.script):
            return self.script(body)
        if not self.script:
            return None
        item = self.script.pop(0)
        return item(body) if callable(item) else item

    async def _chat(self, request: Request) -> Response:
        if request.headers.get("authorization") != f"Bearer {self.api_key}":
            return _error(401, "Invalid API key", "authentication_error")
        try:
            body = orjson.loads(await request.body())
            assert isinstance(body["model"], str) and isinstance(body["messages"], list)
        except Exception:
            return _error(400, "Invalid request body", "invalid_request_error")
        self.calls.append(RecordedCall(dict(request.headers), body))
        reply = self._next(body)
        if reply is None:
            self.unexpected.append("script exhausted")
            return _error(500, "fake script exhausted", "server_error")
        if isinstance(reply, Hang):
            while not await request.is_disconnected():
                await asyncio.sleep(0.01)
            self.disconnected.set()
            return Response(status_code=499)
        if isinstance(reply, Fail):
            headers = {"Retry-After": reply.retry_after} if reply.retry_after else None
            return _error(
                reply.status, reply.message, "rate_limit" if reply.status == 429 else "error", headers
            )
        return Response(orjson.dumps(_completion(reply, len(self.calls))), media_type="application/json")


def _completion(answer: Answer, n: int) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": f"fake-{n}",
        "model": answer.model,
        "created": 1_767_225_600 + n,
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": answer.text},
            }
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 40, "total_tokens": 52},
    }
    if answer.legacy_citations:
        data["citations"] = [s.url for s in answer.sources]
    else:
        data["search_results"] = [
            {
                "title": s.title,
                "url": s.url,
                **({"date": s.date} if s.date else {}),
                **({"snippet": s.snippet} if s.snippet else {}),
            }
            for s in answer.sources
        ]
    return data


def _error(status: int, message: str, kind: str, headers: dict[str, str] | None = None) -> Response:
    body = {"error": {"message": message, "type": kind, "code": status}}
    return Response(orjson.dumps(body), status_code=status, media_type="application/json", headers=headers)
