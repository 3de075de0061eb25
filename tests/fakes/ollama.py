"""A loopback fake of the Ollama HTTP API, faithful enough for the real ``ollama`` client.

Speaks the documented wire format (https://github.com/ollama/ollama/blob/main/docs/api.md):
``POST /api/chat`` streams NDJSON (one ``ChatResponse`` object per line, the last with
``done: true``, ``done_reason`` and token counts), or answers one object when
``stream`` is false; ``POST /api/embed``; ``POST /api/show`` (``model_info`` with
``<arch>.embedding_length``, ``capabilities``: ``embedding`` for models named ``*embed*``,
else ``completion``/``tools``); ``GET /api/tags``; ``GET /api/version``. Like the real
server, the first ``/api/embed`` loads the model: with ``first_embed_delay_s`` it is slow.
Like the real server, a chat with an empty ``messages`` list just loads the model
(``done_reason: "load"``) and consumes no scripted turn.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.fakes._embedding import EmbedFn, HashingEmbedding
from tests.fakes._script import (
    Drop,
    Entry,
    ErrorChunk,
    Hold,
    HttpError,
    RecordedRequest,
    Script,
    Text,
    Thinking,
    ToolCall,
    ToolCalls,
    Turn,
    TurnFactory,
    TurnLike,
    TurnQueue,
    is_title_request,
)
from tests.fakes._streaming import AsgiResponse, DropConnection, ObservedStream

_NDJSON = "application/x-ndjson"


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _json_response(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json")


def _tool_call_json(call: ToolCall, index: int) -> dict[str, Any]:
    function: dict[str, Any] = {"index": index, "name": call.name, "arguments": call.arguments}
    out: dict[str, Any] = {"function": function}
    if call.id is not None:
        out["id"] = call.id
    return out


class FakeOllama:
    """Scripted Ollama server. Serve ``fake.app`` with ``running_fake(fake.app)``.

    ``script``: a sequence of turns (each a ``Turn``, a list of entries, or a callable
    ``body -> turn``), or one callable answering every chat request.
    ``models``: names listed by ``/api/tags``.
    ``embed_fn(text, dim)`` / ``embed_dim``: the embedding model.

    Recorded: ``requests`` (every request), ``chat_requests`` / ``embed_requests``
    (decoded bodies; load-only chats with empty ``messages`` included), ``stream_closed_early``
    (set when a client left a chat stream before it finished), ``stream_started``
    (set when a chat stream sent its first line).
    Settable: ``embed_error`` (an ``HttpError`` every embed request answers with),
    ``embed_hold`` (an ``asyncio.Event`` embed requests wait for).
    """

    def __init__(
        self,
        script: Script = (),
        *,
        models: Sequence[str] = ("llama3.2:latest", "nomic-embed-text:latest"),
        embed_fn: EmbedFn | None = None,
        embed_dim: int = 64,
        version: str = "0.12.6",
        first_embed_delay_s: float = 0.0,
        show_model_info: bool = True,
    ) -> None:
        self.turns = TurnQueue(script)
        self.models = list(models)
        self.embed_fn: EmbedFn = embed_fn or HashingEmbedding()
        self.embed_dim = embed_dim
        self.version = version
        self.first_embed_delay_s = first_embed_delay_s
        #: False: ``/api/show`` answers without ``model_info``/``capabilities``, as old servers do.
        self.show_model_info = show_model_info
        self._model_loaded = False
        self.embed_error: HttpError | None = None
        self.embed_hold: asyncio.Event | None = None
        self.requests: list[RecordedRequest] = []
        self.stream_closed_early = asyncio.Event()
        self.stream_started = asyncio.Event()
        self.app = Starlette(
            routes=[
                Route("/api/chat", self._chat, methods=["POST"]),
                Route("/api/embed", self._embed, methods=["POST"]),
                Route("/api/tags", self._tags, methods=["GET"]),
                Route("/api/show", self._show, methods=["POST"]),
                Route("/api/version", self._version, methods=["GET"]),
            ]
        )

    # --- inspection helpers ---------------------------------------------------------

    def add_turn(self, turn: TurnLike | TurnFactory) -> None:
        self.turns.add(turn)

    def _bodies(self, path: str) -> list[Any]:
        return [r.body for r in self.requests if r.path == path]

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        """Bodies of every ``/api/chat`` request but the conversation-title calls
        (``turns.title_requests``), in arrival order."""
        return [b for b in self._bodies("/api/chat") if not is_title_request(b)]

    @property
    def embed_requests(self) -> list[dict[str, Any]]:
        return self._bodies("/api/embed")

    # --- endpoints -------------------------------------------------------------------

    async def _record(self, request: Request) -> RecordedRequest:
        rec = await RecordedRequest.read(request)
        self.requests.append(rec)
        return rec

    async def _chat(self, request: Request) -> Response:
        rec = await self._record(request)
        body = rec.body
        if not isinstance(body, dict) or not body.get("model"):
            return _json_response({"error": "model is required"}, 400)
        model = str(body["model"])
        stream = body.get("stream", True) is not False
        if not body.get("messages"):
            return self._load_response(model, stream)
        turn = self.turns.next_turn(body)
        if turn is None:
            return _json_response({"error": "fake ollama: no scripted turn left"}, 500)
        if turn.entries and isinstance(turn.entries[0], HttpError):
            return self._http_error(turn.entries[0])
        if not stream:
            return await self._whole(model, turn)
        return AsgiResponse(
            ObservedStream(
                self._lines(model, turn),
                media_type=_NDJSON,
                on_closed_early=lambda: self._closed_early(rec),
            )
        )

    def _closed_early(self, rec: RecordedRequest) -> None:
        rec.closed_early = True
        self.stream_closed_early.set()

    def _load_response(self, model: str, stream: bool) -> Response:
        final = {
            "model": model,
            "created_at": _now(),
            "message": {"role": "assistant", "content": ""},
            "done_reason": "load",
            "done": True,
        }
        if stream:
            return Response(orjson.dumps(final) + b"\n", media_type=_NDJSON)
        return _json_response(final)

    @staticmethod
    def _http_error(err: HttpError) -> Response:
        body = err.body if err.body is not None else orjson.dumps({"error": err.message})
        return Response(body, status_code=err.status, media_type="application/json")

    def _chunk(self, model: str, message: dict[str, Any]) -> bytes:
        return orjson.dumps({"model": model, "created_at": _now(), "message": message, "done": False}) + b"\n"

    def _final(self, model: str, turn: Turn, message: dict[str, Any] | None = None) -> dict[str, Any]:
        return {
            "model": model,
            "created_at": _now(),
            "message": message or {"role": "assistant", "content": ""},
            "done": True,
            "done_reason": turn.finish_reason or "stop",
            "total_duration": 1_000_000,
            "load_duration": 10_000,
            "prompt_eval_count": turn.input_tokens,
            "prompt_eval_duration": 100_000,
            "eval_count": turn.output_tokens,
            "eval_duration": 800_000,
        }

    async def _lines(self, model: str, turn: Turn) -> AsyncIterator[bytes]:
        tool_index = 0
        for entry in turn.entries:
            if isinstance(entry, Hold):
                await (entry.release.wait() if entry.release is not None else asyncio.Future())
                continue
            if isinstance(entry, Drop):
                raise DropConnection
            if isinstance(entry, ErrorChunk):
                yield orjson.dumps({"error": entry.message}) + b"\n"
                return
            if isinstance(entry, HttpError):
                raise ValueError("HttpError must be the first entry of a turn")
            line = self._entry_line(model, entry, tool_index)
            tool_index += _tool_count(entry)
            self.stream_started.set()
            yield line
        self.stream_started.set()
        yield orjson.dumps(self._final(model, turn)) + b"\n"

    def _entry_line(self, model: str, entry: Entry, tool_index: int) -> bytes:
        if isinstance(entry, Text):
            return self._chunk(model, {"role": "assistant", "content": entry.text})
        if isinstance(entry, Thinking):
            return self._chunk(model, {"role": "assistant", "content": "", "thinking": entry.text})
        calls = [entry] if isinstance(entry, ToolCall) else list(entry.calls)  # type: ignore[union-attr]
        return self._chunk(
            model,
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [_tool_call_json(c, tool_index + i) for i, c in enumerate(calls)],
            },
        )

    async def _whole(self, model: str, turn: Turn) -> Response:
        content: list[str] = []
        thinking: list[str] = []
        calls: list[dict[str, Any]] = []
        for entry in turn.entries:
            if isinstance(entry, Hold):
                await (entry.release.wait() if entry.release is not None else asyncio.Future())
            elif isinstance(entry, Text):
                content.append(entry.text)
            elif isinstance(entry, Thinking):
                thinking.append(entry.text)
            elif isinstance(entry, (ToolCall, ToolCalls)):
                group = [entry] if isinstance(entry, ToolCall) else list(entry.calls)
                calls.extend(_tool_call_json(c, len(calls) + i) for i, c in enumerate(group))
            elif isinstance(entry, (ErrorChunk, Drop, HttpError)):
                # A whole (non-streamed) answer has no stream to fail inside: any failure
                # entry is the request's own 500, with the entry's message when it has one.
                failure = "fake failure" if isinstance(entry, Drop) else entry.message
                return _json_response({"error": failure}, 500)
        message: dict[str, Any] = {"role": "assistant", "content": "".join(content)}
        if thinking:
            message["thinking"] = "".join(thinking)
        if calls:
            message["tool_calls"] = calls
        return _json_response(self._final(model, turn, message))

    async def _embed(self, request: Request) -> Response:
        rec = await self._record(request)
        body = rec.body
        if not isinstance(body, dict) or not body.get("model"):
            return _json_response({"error": "model is required"}, 400)
        if self.embed_hold is not None:
            await self.embed_hold.wait()
        if self.embed_error is not None:
            return self._http_error(self.embed_error)
        if not self._model_loaded:  # the first embedding loads the model
            self._model_loaded = True
            if self.first_embed_delay_s > 0:
                await asyncio.sleep(self.first_embed_delay_s)
        inputs = body.get("input", [])
        texts = [inputs] if isinstance(inputs, str) else list(inputs)
        dim = int(body.get("dimensions") or self.embed_dim)
        vectors = [self.embed_fn(str(t), dim) for t in texts]
        return _json_response(
            {
                "model": body["model"],
                "embeddings": vectors,
                "total_duration": 1_000_000,
                "load_duration": 10_000,
                "prompt_eval_count": sum(len(str(t).split()) for t in texts),
            }
        )

    async def _tags(self, request: Request) -> Response:
        await self._record(request)
        return _json_response(
            {
                "models": [
                    {
                        "name": name,
                        "model": name,
                        "modified_at": "2025-01-01T00:00:00Z",
                        "size": 1_000_000,
                        "digest": hashlib.sha256(name.encode()).hexdigest(),
                        "details": {
                            "parent_model": "",
                            "format": "gguf",
                            "family": "llama",
                            "families": ["llama"],
                            "parameter_size": "3.2B",
                            "quantization_level": "Q4_K_M",
                        },
                    }
                    for name in self.models
                ]
            }
        )

    def _listed(self, name: str) -> str | None:
        wanted = {name} if ":" in name else {name, f"{name}:latest"}
        return next((m for m in self.models if m in wanted), None)

    async def _show(self, request: Request) -> Response:
        rec = await self._record(request)
        body = rec.body if isinstance(rec.body, dict) else {}
        name = str(body.get("model") or body.get("name") or "")
        listed = self._listed(name)
        if listed is None:
            return _json_response({"error": f"model '{name}' not found"}, 404)
        embeds = "embed" in listed
        arch = "nomic-bert" if embeds else "llama"
        if not self.show_model_info:
            return _json_response({"license": "", "modelfile": f"FROM {listed}\n", "parameters": "",
                                   "template": "{{ .Prompt }}", "details": {"format": "gguf", "family": arch},
                                   "model_info": {}})
        return _json_response(
            {
                "license": "",
                "modelfile": f"FROM {listed}\n",
                "parameters": "",
                "template": "{{ .Prompt }}",
                "details": {"parent_model": "", "format": "gguf", "family": arch, "families": [arch],
                            "parameter_size": "137M" if embeds else "3.2B", "quantization_level": "F16"},
                "model_info": {
                    "general.architecture": arch,
                    "general.parameter_count": 136_727_040 if embeds else 3_212_749_888,
                    f"{arch}.context_length": 2048 if embeds else 131072,
                    f"{arch}.embedding_length": self.embed_dim if embeds else 3072,
                    f"{arch}.block_count": 12 if embeds else 28,
                },
                "capabilities": ["embedding"] if embeds else ["completion", "tools"],
                "modified_at": "2025-01-01T00:00:00Z",
            }
        )

    async def _version(self, request: Request) -> Response:
        await self._record(request)
        return _json_response({"version": self.version})


def _tool_count(entry: Entry) -> int:
    if isinstance(entry, ToolCall):
        return 1
    if isinstance(entry, ToolCalls):
        return len(entry.calls)
    return 0
