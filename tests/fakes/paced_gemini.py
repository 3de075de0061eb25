"""A paced, stateless Gemini fake for capacity and scale-out benchmarks.

The Ollama twin is :mod:`tests.fakes.paced_ollama`; this one speaks the Gemini
Developer API's streaming wire format as :mod:`tests.fakes.gemini` does (so the real
``google-genai`` client reads it): ``POST /v1beta/models/{model}:streamGenerateContent
?alt=sse`` answers Server-Sent Events, one ``data: <GenerateContentResponse JSON>``
per chunk, CRLF-separated, the last chunk carrying ``finishReason`` and the full
``usageMetadata``. ``:generateContent`` answers the merged response and
``GET /v1beta/models/{model}`` describes the model; other methods get Google's 404.

It holds no script: every request is answered with ``tokens`` text parts ``pause_s``
apart (the pause comes before each part), then the finish. Nothing is remembered
between requests, so one fake serves any number of agent processes and thousands of
concurrent streams with no bookkeeping beyond three counters.

``word(i)`` makes the text of part ``i`` (``"w<i> "`` by default); :func:`stamped`
writes ``"<i>@<CLOCK_MONOTONIC ns>;"`` instead, the time the part was produced, so a
client on the same machine can measure how long the server under test took to pass
that token on (CLOCK_MONOTONIC is shared by every process of one machine).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

MODEL = "gemini-2.5-flash"
STAMP_RE = re.compile(r"(\d+)@(\d+);")

Word = Callable[[int], str]


def plain(i: int) -> str:
    return f"w{i} "


def stamped(i: int) -> str:
    """Token ``i`` carrying the monotonic time (ns) at which it was produced."""
    return f"{i}@{time.monotonic_ns()};"


def stamps(text: str) -> list[tuple[int, int]]:
    """(index, produced_at_ns) of every stamped token in ``text`` (a chunk may hold several)."""
    return [(int(m.group(1)), int(m.group(2))) for m in STAMP_RE.finditer(text)]


def _error(code: int, status: str, message: str) -> Response:
    body = {"error": {"code": code, "message": message, "status": status}}
    return Response(orjson.dumps(body), status_code=code, media_type="application/json")


class PacedGemini:
    """Serve ``fake.app`` on loopback (``tests.support.server.serve_app``).

    Counters: ``chats`` (generate requests answered), ``streams_finished`` and
    ``streams_cut`` (the client left before the finish).
    """

    def __init__(
        self, *, model: str = MODEL, tokens: int = 60, pause_s: float = 0.1, word: Word = plain
    ) -> None:
        self.model = model
        self.tokens = tokens
        self.pause_s = pause_s
        self.word = word
        self.chats = 0
        self.streams_finished = 0
        self.streams_cut = 0
        self._responses = 0
        self.app = Starlette(routes=[Route("/{version}/models/{target}", self._dispatch, methods=["GET", "POST"])])

    async def _dispatch(self, request: Request) -> Response:
        model, _, method = request.path_params["target"].partition(":")
        if request.method == "GET" and not method:
            return Response(
                orjson.dumps(
                    {
                        "name": f"models/{model}",
                        "version": "001",
                        "displayName": model,
                        "inputTokenLimit": 1_048_576,
                        "outputTokenLimit": 65_536,
                        "supportedGenerationMethods": ["generateContent", "countTokens"],
                    }
                ),
                media_type="application/json",
            )
        if method not in ("streamGenerateContent", "generateContent"):
            return _error(404, "NOT_FOUND", f"unknown method {method!r}")
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            return _error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.")
        if not isinstance(body, dict) or not body.get("contents"):
            return _error(400, "INVALID_ARGUMENT", "* GenerateContentRequest.contents: contents is not specified")
        self.chats += 1
        self._responses += 1
        response_id = f"paced-{self._responses}"
        if method == "generateContent":
            await asyncio.sleep(self.pause_s * self.tokens)
            text = "".join(self.word(i) for i in range(self.tokens))
            return Response(orjson.dumps(self._chunk(text, response_id, final=True)), media_type="application/json")
        return StreamingResponse(self._events(response_id), media_type="text/event-stream")

    def _chunk(self, text: str, response_id: str, *, final: bool) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"parts": [{"text": text}], "role": "model"}, "index": 0}
        usage: dict[str, Any] = {"promptTokenCount": 11, "totalTokenCount": 11}
        if final:
            candidate["finishReason"] = "STOP"
            usage = {
                "promptTokenCount": 11,
                "candidatesTokenCount": self.tokens,
                "totalTokenCount": 11 + self.tokens,
                "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 11}],
            }
        return {
            "candidates": [candidate], "usageMetadata": usage, "modelVersion": self.model, "responseId": response_id,
        }

    async def _events(self, response_id: str) -> AsyncIterator[bytes]:
        finished = False
        try:
            # The finish reason and usage ride on the last text chunk, as the real API does.
            for i in range(self.tokens):
                await asyncio.sleep(self.pause_s)
                chunk = self._chunk(self.word(i), response_id, final=i == self.tokens - 1)
                yield b"data: " + orjson.dumps(chunk) + b"\r\n\r\n"
            if self.tokens <= 0:
                yield b"data: " + orjson.dumps(self._chunk("", response_id, final=True)) + b"\r\n\r\n"
            finished = True
        finally:
            if finished:
                self.streams_finished += 1
            else:
                self.streams_cut += 1
