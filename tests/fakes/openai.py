"""A loopback fake of an OpenAI-compatible server, faithful enough for the real ``openai`` SDK.

Speaks the documented wire format (https://platform.openai.com/docs/api-reference/chat):
``POST /v1/chat/completions`` with ``stream: true`` answers ``text/event-stream`` lines
``data: {chat.completion.chunk}``, the last chunk of the choice carrying
``finish_reason``, then (with ``stream_options.include_usage``) a chunk with
``choices: []`` and ``usage``, then ``data: [DONE]``. Tool calls stream as
``delta.tool_calls`` pieces: the first piece of a call has ``index``, ``id``, ``type``
and ``function.name`` with empty arguments, later pieces only ``index`` and a fragment
of ``function.arguments`` (cut into ``split_arguments`` pieces). Errors answer
``{"error": {message, type, param, code}}``. ``POST /v1/embeddings`` (``float`` or
``base64`` encoding) and ``GET /v1/models`` too. Without ``stream`` (or with it false)
a chat answers one ``chat.completion`` object: ``choices[0].message`` with ``content``
(``null`` when there is none), ``tool_calls`` (whole, ``id``/``type``/``function``) and
``reasoning_content`` when the turn has them, ``finish_reason``, and ``usage``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import numpy as np
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.fakes._embedding import EmbedFn, HashingEmbedding
from tests.fakes._script import (
    Drop,
    ErrorChunk,
    Hold,
    HttpError,
    RecordedRequest,
    Script,
    Text,
    Thinking,
    ToolCall,
    Turn,
    TurnFactory,
    TurnLike,
    TurnQueue,
    is_title_request,
)
from tests.fakes._streaming import AsgiResponse, DropConnection, ObservedStream

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    429: "rate_limit_error",
}


def _json(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json")


def _error_body(status: int, message: str) -> dict[str, Any]:
    return {
        "error": {"message": message, "type": _ERROR_TYPES.get(status, "server_error"), "param": None, "code": None}
    }


def _pieces(text: str, n: int) -> list[str]:
    if n <= 1 or len(text) <= 1:
        return [text]
    size = max(1, -(-len(text) // n))
    return [text[i : i + size] for i in range(0, len(text), size)]


class FakeOpenAI:
    """Scripted OpenAI-compatible server. Serve ``fake.app``; the SDK's base URL is ``{url}/v1``.

    ``script``: turns as for the other fakes (``Text``, ``Thinking`` → ``reasoning_content``,
    ``ToolCall`` / ``ToolCalls``, ``HttpError``, ``ErrorChunk``, ``Drop``, ``Hold``).
    ``split_arguments``: how many ``function.arguments`` fragments each call is cut into.
    Recorded: ``requests``, ``chat_requests``, ``embed_requests``, ``stream_closed_early``.
    """

    def __init__(
        self,
        script: Script = (),
        *,
        models: Sequence[str] = ("gpt-test", "embed-test"),
        embed_fn: EmbedFn | None = None,
        embed_dim: int = 64,
        split_arguments: int = 3,
        api_key: str | None = None,
        first_embed_delay_s: float = 0.0,
        embeddings: bool = True,
        ascii_arguments: bool = False,
    ) -> None:
        """``first_embed_delay_s``: the first embedding is that slow (a cold start);
        ``embeddings=False``: a chat-only server (``/v1/embeddings`` answers 404, as
        llama.cpp does without ``--embeddings``); ``ascii_arguments``: a call's arguments
        are written with every non-ASCII character as a ``\\uXXXX`` escape (surrogate
        pairs beyond the BMP), as models served through Python's ``json.dumps`` do."""
        self.turns = TurnQueue(script)
        self.first_embed_delay_s = first_embed_delay_s
        self.embeddings = embeddings
        self._embedded_once = False
        self.models = list(models)
        self.embed_fn: EmbedFn = embed_fn or HashingEmbedding()
        self.embed_dim = embed_dim
        self.split_arguments = split_arguments
        self.ascii_arguments = ascii_arguments
        self.api_key = api_key
        self.embed_error: HttpError | None = None
        self.requests: list[RecordedRequest] = []
        self.stream_closed_early = asyncio.Event()
        self._ids = 0
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/embeddings", self._embed, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
            ]
        )

    def add_turn(self, turn: TurnLike | TurnFactory) -> None:
        self.turns.add(turn)

    def _bodies(self, path: str) -> list[Any]:
        return [r.body for r in self.requests if r.path == path]

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        """Bodies of the chat requests but the conversation-title calls (``turns.title_requests``)."""
        return [b for b in self._bodies("/v1/chat/completions") if not is_title_request(b)]

    @property
    def embed_requests(self) -> list[dict[str, Any]]:
        return self._bodies("/v1/embeddings")

    async def _record(self, request: Request) -> tuple[RecordedRequest, Response | None]:
        rec = await RecordedRequest.read(request)
        self.requests.append(rec)
        if self.api_key is not None and rec.headers.get("authorization") != f"Bearer {self.api_key}":
            return rec, _json(_error_body(401, "Incorrect API key provided"), 401)
        return rec, None

    async def _chat(self, request: Request) -> Response:
        rec, refused = await self._record(request)
        if refused is not None:
            return refused
        body = rec.body
        if not isinstance(body, dict) or not body.get("model") or not isinstance(body.get("messages"), list):
            return _json(_error_body(400, "model and messages are required"), 400)
        streamed = body.get("stream") is True
        if "parallel_tool_calls" in body and not body.get("tools"):
            return _json(_error_body(400, "parallel_tool_calls is only allowed when 'tools' are specified"), 400)
        turn = self.turns.next_turn(body)
        if turn is None:
            return _json(_error_body(500, "fake openai: no scripted turn left"), 500)
        if turn.entries and isinstance(turn.entries[0], HttpError):
            err = turn.entries[0]
            raw = err.body if err.body is not None else orjson.dumps(_error_body(err.status, err.message))
            return Response(raw, status_code=err.status, media_type="application/json")
        if not streamed:
            return AsgiResponse(
                ObservedStream(
                    self._whole(str(body["model"]), turn),
                    media_type="application/json",
                    on_closed_early=lambda: self._closed_early(rec),
                )
            )
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return AsgiResponse(
            ObservedStream(
                self._events(str(body["model"]), turn, include_usage),
                media_type="text/event-stream",
                on_closed_early=lambda: self._closed_early(rec),
            )
        )

    def _closed_early(self, rec: RecordedRequest) -> None:
        rec.closed_early = True
        self.stream_closed_early.set()

    def _chunk(self, cid: str, model: str, delta: dict[str, Any] | None, finish: str | None = None) -> bytes:
        choices = [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        payload = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "system_fingerprint": "fp_fake",
            "choices": choices,
        }
        return b"data: " + orjson.dumps(payload) + b"\n\n"

    def _arguments(self, arguments: dict[str, Any]) -> str:
        if self.ascii_arguments:
            return json.dumps(arguments, ensure_ascii=True)
        return orjson.dumps(arguments).decode()

    async def _events(self, model: str, turn: Turn, include_usage: bool) -> AsyncIterator[bytes]:
        self._ids += 1
        cid = f"chatcmpl-fake{self._ids}"
        yield self._chunk(cid, model, {"role": "assistant", "content": ""})
        index = 0
        for entry in turn.entries:
            if isinstance(entry, Hold):
                await (entry.release.wait() if entry.release is not None else asyncio.Future())
                continue
            if isinstance(entry, Drop):
                raise DropConnection
            if isinstance(entry, ErrorChunk):
                yield b"data: " + orjson.dumps(_error_body(entry.code, entry.message)) + b"\n\n"
                return
            if isinstance(entry, HttpError):
                raise ValueError("HttpError must be the first entry of a turn")
            if isinstance(entry, Text):
                yield self._chunk(cid, model, {"content": entry.text})
            elif isinstance(entry, Thinking):
                yield self._chunk(cid, model, {"reasoning_content": entry.text})
            else:
                group = [entry] if isinstance(entry, ToolCall) else list(entry.calls)  # type: ignore[union-attr]
                for call in group:
                    call_id = call.id or f"call_fake{self._ids}_{index}"
                    head = {
                        "index": index,
                        "id": call_id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": ""},
                    }
                    yield self._chunk(cid, model, {"tool_calls": [head]})
                    for piece in _pieces(self._arguments(call.arguments), self.split_arguments):
                        yield self._chunk(
                            cid, model, {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
                        )
                    index += 1
        finish = turn.finish_reason or ("tool_calls" if index else "stop")
        yield self._chunk(cid, model, {}, finish)
        if include_usage:
            usage = {
                "prompt_tokens": turn.input_tokens,
                "completion_tokens": turn.output_tokens,
                "total_tokens": turn.input_tokens + turn.output_tokens,
            }
            payload = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": [],
                "usage": usage,
            }
            yield b"data: " + orjson.dumps(payload) + b"\n\n"
        yield b"data: [DONE]\n\n"

    async def _whole(self, model: str, turn: Turn) -> AsyncIterator[bytes]:
        """A non-streamed answer: the turn's entries gathered into one ``chat.completion``
        (a ``Hold`` still holds it back, a ``Drop`` cuts the connection before any byte)."""
        self._ids += 1
        texts: list[str] = []
        thinking: list[str] = []
        calls: list[dict[str, Any]] = []
        for entry in turn.entries:
            if isinstance(entry, Hold):
                await (entry.release.wait() if entry.release is not None else asyncio.Future())
            elif isinstance(entry, Drop):
                raise DropConnection
            elif isinstance(entry, ErrorChunk):
                yield orjson.dumps(_error_body(entry.code, entry.message))
                return
            elif isinstance(entry, HttpError):
                raise ValueError("HttpError must be the first entry of a turn")
            elif isinstance(entry, Text):
                texts.append(entry.text)
            elif isinstance(entry, Thinking):
                thinking.append(entry.text)
            else:
                for call in [entry] if isinstance(entry, ToolCall) else list(entry.calls):  # type: ignore[union-attr]
                    calls.append(
                        {
                            "id": call.id or f"call_fake{self._ids}_{len(calls)}",
                            "type": "function",
                            "function": {"name": call.name, "arguments": orjson.dumps(call.arguments).decode()},
                        }
                    )
        message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None, "refusal": None}
        if calls:
            message["tool_calls"] = calls
        if thinking:
            message["reasoning_content"] = "".join(thinking)
        payload = {
            "id": f"chatcmpl-fake{self._ids}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "system_fingerprint": "fp_fake",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": turn.finish_reason or ("tool_calls" if calls else "stop"),
                }
            ],
            "usage": {
                "prompt_tokens": turn.input_tokens,
                "completion_tokens": turn.output_tokens,
                "total_tokens": turn.input_tokens + turn.output_tokens,
            },
        }
        yield orjson.dumps(payload)

    async def _embed(self, request: Request) -> Response:
        rec, refused = await self._record(request)
        if refused is not None:
            return refused
        body = rec.body
        if not isinstance(body, dict) or not body.get("model") or "input" not in body:
            return _json(_error_body(400, "model and input are required"), 400)
        if not self.embeddings:
            return _json(_error_body(404, "This server does not serve embeddings"), 404)
        if self.embed_error is not None:
            err = self.embed_error
            return _json(_error_body(err.status, err.message), err.status)
        if not self._embedded_once:
            self._embedded_once = True
            if self.first_embed_delay_s > 0:
                await asyncio.sleep(self.first_embed_delay_s)
        inputs = body["input"]
        texts = [inputs] if isinstance(inputs, str) else list(inputs)
        dim = int(body.get("dimensions") or self.embed_dim)
        as_base64 = body.get("encoding_format") == "base64"
        data = []
        for i, text in enumerate(texts):
            vector = self.embed_fn(str(text), dim)
            value: Any = base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode() if as_base64 else vector
            data.append({"object": "embedding", "index": i, "embedding": value})
        tokens = sum(len(str(t).split()) for t in texts)
        return _json(
            {
                "object": "list",
                "data": data,
                "model": body["model"],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    async def _models(self, request: Request) -> Response:
        _, refused = await self._record(request)
        if refused is not None:
            return refused
        return _json(
            {
                "object": "list",
                "data": [
                    {"id": m, "object": "model", "created": 1_700_000_000, "owned_by": "fake"} for m in self.models
                ],
            }
        )
