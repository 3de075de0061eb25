"""A loopback fake of the Gemini Developer API, faithful enough for ``google-genai``.

Wire format (https://ai.google.dev/api/generate-content, /api/embeddings):
``POST /v1beta/models/{model}:streamGenerateContent?alt=sse`` answers Server-Sent Events,
one ``data: <GenerateContentResponse JSON>`` per chunk, CRLF-separated as Google does;
the last chunk carries ``finishReason`` and the full ``usageMetadata``.
``:generateContent`` answers one merged response. ``:batchEmbedContents`` takes at most
100 requests (400 ``INVALID_ARGUMENT`` beyond, like the real API) and ``:embedContent``
one. ``GET /v1beta/models/{model}`` describes a model. Errors use Google's JSON shape
``{"error": {"code", "message", "status"}}``. Byte fields (``thoughtSignature``) are
standard base64, as proto3 JSON mandates.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Sequence
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

GOOGLE_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    408: "DEADLINE_EXCEEDED",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "NOT_IMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}

MAX_BATCH_EMBED = 100


def google_error(code: int, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": GOOGLE_STATUS.get(code, "UNKNOWN")}}


def _json_response(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _part(entry: Text | Thinking | ToolCall) -> dict[str, Any]:
    part: dict[str, Any]
    if isinstance(entry, Text):
        part = {"text": entry.text}
    elif isinstance(entry, Thinking):
        part = {"text": entry.text, "thought": True}
    else:
        call: dict[str, Any] = {"name": entry.name, "args": entry.arguments}
        if entry.id is not None:
            call["id"] = entry.id
        part = {"functionCall": call}
    if entry.signature is not None:
        part["thoughtSignature"] = _b64(entry.signature)
    return part


def _parts(entry: Entry) -> list[dict[str, Any]]:
    if isinstance(entry, ToolCalls):
        return [_part(c) for c in entry.calls]
    return [_part(entry)]  # type: ignore[arg-type]


class FakeGemini:
    """Scripted Gemini server. Serve ``fake.app`` with ``running_fake(fake.app)``.

    ``script``: a sequence of turns (each a ``Turn``, a list of entries, or a callable
    ``body -> turn``), or one callable answering every generate request.
    ``api_key``: when set, requests without this ``x-goog-api-key`` (or ``key=``) get
    Google's 400 ``API_KEY_INVALID``. ``models``: when set, other models get 404.
    ``embed_fn(text, dim)`` / ``embed_dim``: the embedding model; the full-size vector
    is normalised, and ``outputDimensionality`` truncates it WITHOUT renormalising,
    as the real ``gemini-embedding-001`` does.

    Recorded: ``requests`` (every request), ``generate_requests`` (bodies of streamed and
    unary generate calls), ``embed_requests`` (bodies of embed calls),
    ``stream_closed_early`` / ``stream_started`` events.
    Settable: ``embed_error`` (``HttpError`` for every embed call), ``embed_hold``.
    """

    def __init__(
        self,
        script: Script = (),
        *,
        api_key: str | None = None,
        models: Sequence[str] | None = None,
        embed_fn: EmbedFn | None = None,
        embed_dim: int = 3072,
        model_version: str = "gemini-2.5-flash",
        first_embed_delay_s: float = 0.0,
    ) -> None:
        """``first_embed_delay_s``: the first embed call is that slow (a cold start)."""
        self.turns = TurnQueue(script)
        self.api_key = api_key
        self.models = list(models) if models is not None else None
        self.embed_fn: EmbedFn = embed_fn or HashingEmbedding()
        self.embed_dim = embed_dim
        self.model_version = model_version
        self.first_embed_delay_s = first_embed_delay_s
        self._embedded_once = False
        self.embed_error: HttpError | None = None
        self.embed_hold: asyncio.Event | None = None
        self.requests: list[RecordedRequest] = []
        self.stream_closed_early = asyncio.Event()
        self.stream_started = asyncio.Event()
        self._response_ids = 0
        self.app = Starlette(
            routes=[
                Route("/{version}/models/{target}", self._dispatch, methods=["GET", "POST"]),
            ]
        )

    # --- inspection helpers ---------------------------------------------------------

    def add_turn(self, turn: TurnLike | TurnFactory) -> None:
        self.turns.add(turn)

    def _bodies(self, *methods: str) -> list[Any]:
        return [r.body for r in self.requests if r.path.rsplit(":", 1)[-1] in methods]

    @property
    def generate_requests(self) -> list[dict[str, Any]]:
        """Bodies of ``streamGenerateContent`` and ``generateContent`` calls but the
        conversation-title calls (``turns.title_requests``), in order."""
        return [b for b in self._bodies("streamGenerateContent", "generateContent") if not is_title_request(b)]

    @property
    def embed_requests(self) -> list[dict[str, Any]]:
        return self._bodies("batchEmbedContents", "embedContent")

    # --- dispatch --------------------------------------------------------------------

    async def _dispatch(self, request: Request) -> Response:
        rec = await RecordedRequest.read(request)
        self.requests.append(rec)
        body: Any = rec.body
        target = request.path_params["target"]
        model, _, method = target.partition(":")
        if self.api_key is not None:
            given = rec.headers.get("x-goog-api-key") or rec.query.get("key")
            if given != self.api_key:
                return _json_response(
                    google_error(400, "API key not valid. Please pass a valid API key."), 400
                )
        if self.models is not None and model not in self.models:
            return _json_response(
                google_error(404, f"models/{model} is not found for API version v1beta"), 404
            )
        if request.method == "GET" and not method:
            return self._model_info(model)
        if request.method != "POST" or not isinstance(body, dict):
            return _json_response(google_error(400, "Invalid JSON payload received."), 400)
        if method == "streamGenerateContent":
            return await self._generate(model, body, rec, stream=True)
        if method == "generateContent":
            return await self._generate(model, body, rec, stream=False)
        if method == "batchEmbedContents":
            return await self._batch_embed(body)
        if method == "embedContent":
            return await self._embed_one(body)
        return _json_response(google_error(404, f"unknown method {method!r}"), 404)

    def _model_info(self, model: str) -> Response:
        return _json_response(
            {
                "name": f"models/{model}",
                "version": "001",
                "displayName": model,
                "inputTokenLimit": 1_048_576,
                "outputTokenLimit": 65_536,
                "supportedGenerationMethods": ["generateContent", "countTokens"],
            }
        )

    # --- generate --------------------------------------------------------------------

    async def _generate(self, model: str, body: dict[str, Any], rec: RecordedRequest, *, stream: bool) -> Response:
        if not body.get("contents"):
            return _json_response(google_error(400, "* GenerateContentRequest.contents: contents is not specified"), 400)
        turn = self.turns.next_turn(body)
        if turn is None:
            return _json_response(google_error(500, "fake gemini: no scripted turn left"), 500)
        if turn.entries and isinstance(turn.entries[0], HttpError):
            return self._http_error(turn.entries[0])
        self._response_ids += 1
        response_id = f"fake-response-{self._response_ids}"
        if not stream:
            return await self._whole(turn, response_id)
        return AsgiResponse(
            ObservedStream(
                self._events(turn, response_id),
                media_type="text/event-stream",
                on_closed_early=lambda: self._closed_early(rec),
            )
        )

    def _closed_early(self, rec: RecordedRequest) -> None:
        rec.closed_early = True
        self.stream_closed_early.set()

    @staticmethod
    def _http_error(err: HttpError) -> Response:
        body = err.body if err.body is not None else orjson.dumps(google_error(err.status, err.message))
        return Response(body, status_code=err.status, media_type="application/json")

    def _response(
        self, parts: list[dict[str, Any]], turn: Turn, response_id: str, *, final: bool
    ) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
        usage: dict[str, Any] = {"promptTokenCount": turn.input_tokens, "totalTokenCount": turn.input_tokens}
        if final:
            candidate["finishReason"] = turn.finish_reason or "STOP"
            usage = {
                "promptTokenCount": turn.input_tokens,
                "candidatesTokenCount": turn.output_tokens,
                "totalTokenCount": turn.input_tokens + turn.output_tokens,
                "promptTokensDetails": [{"modality": "TEXT", "tokenCount": turn.input_tokens}],
            }
        return {
            "candidates": [candidate],
            "usageMetadata": usage,
            "modelVersion": self.model_version,
            "responseId": response_id,
        }

    @staticmethod
    def _sse(payload: dict[str, Any]) -> bytes:
        return b"data: " + orjson.dumps(payload) + b"\r\n\r\n"

    async def _events(self, turn: Turn, response_id: str) -> AsyncIterator[bytes]:
        # One chunk is held back so the finish reason and usage ride on the last
        # content chunk, as the real API does.
        pending: list[dict[str, Any]] | None = None
        for entry in turn.entries:
            if isinstance(entry, Hold):
                if pending is not None:
                    self.stream_started.set()
                    yield self._sse(self._response(pending, turn, response_id, final=False))
                    pending = None
                await (entry.release.wait() if entry.release is not None else asyncio.Future())
                continue
            if isinstance(entry, (Drop, ErrorChunk)):
                if pending is not None:
                    self.stream_started.set()
                    yield self._sse(self._response(pending, turn, response_id, final=False))
                    pending = None
                if isinstance(entry, Drop):
                    raise DropConnection
                yield self._sse(google_error(entry.code, entry.message))
                return
            if isinstance(entry, HttpError):
                raise ValueError("HttpError must be the first entry of a turn")
            if pending is not None:
                self.stream_started.set()
                yield self._sse(self._response(pending, turn, response_id, final=False))
            pending = _parts(entry)
        self.stream_started.set()
        yield self._sse(self._response(pending or [{"text": ""}], turn, response_id, final=True))

    async def _whole(self, turn: Turn, response_id: str) -> Response:
        parts: list[dict[str, Any]] = []
        for entry in turn.entries:
            if isinstance(entry, Hold):
                await (entry.release.wait() if entry.release is not None else asyncio.Future())
            elif isinstance(entry, (ErrorChunk, Drop, HttpError)):
                code = getattr(entry, "code", 500)
                return _json_response(google_error(code, getattr(entry, "message", "fake failure")), code)
            else:
                parts.extend(_parts(entry))
        return _json_response(self._response(parts, turn, response_id, final=True))

    # --- embeddings ------------------------------------------------------------------

    async def _embedding(self, request: dict[str, Any]) -> dict[str, Any]:
        parts = (request.get("content") or {}).get("parts") or []
        text = "".join(str(p.get("text", "")) for p in parts)
        full = self.embed_fn(text, self.embed_dim)
        dim = request.get("outputDimensionality")
        return {"values": full[: int(dim)] if dim else full}

    async def _embed_gate(self) -> Response | None:
        if self.embed_hold is not None:
            await self.embed_hold.wait()
        if not self._embedded_once:
            self._embedded_once = True
            if self.first_embed_delay_s > 0:
                await asyncio.sleep(self.first_embed_delay_s)
        if self.embed_error is not None:
            return self._http_error(self.embed_error)
        return None

    async def _batch_embed(self, body: dict[str, Any]) -> Response:
        if (gate := await self._embed_gate()) is not None:
            return gate
        requests = body.get("requests")
        if not isinstance(requests, list) or not requests:
            return _json_response(google_error(400, "* BatchEmbedContentsRequest.requests: requests is not specified"), 400)
        if len(requests) > MAX_BATCH_EMBED:
            return _json_response(
                google_error(
                    400,
                    f"* BatchEmbedContentsRequest.requests: at most {MAX_BATCH_EMBED} requests can be in one batch",
                ),
                400,
            )
        return _json_response({"embeddings": [await self._embedding(r) for r in requests]})

    async def _embed_one(self, body: dict[str, Any]) -> Response:
        if (gate := await self._embed_gate()) is not None:
            return gate
        return _json_response({"embedding": await self._embedding(body)})


def decode_bytes_field(value: str) -> bytes:
    """Decode a proto3-JSON bytes field as Google does: standard or URL-safe base64."""
    normalised = value.replace("-", "+").replace("_", "/")
    return base64.b64decode(normalised + "=" * (-len(normalised) % 4))
