"""Ollama provider: ``/api/chat`` streaming through the official ``ollama`` client.

Wire facts this module is built around (ollama 0.6.x, Ollama server >= 0.9):

- The client has no default timeout; we always pass one (an httpx timeout: it bounds
  each connect/read, i.e. the gap between streamed lines, not the whole answer).
- ``AsyncClient.chat`` validates ``tools`` through its pydantic ``Tool`` model, which
  silently drops nested ``properties``, ``format``, ``default`` and ``anyOf``. We
  therefore build the JSON body ourselves (schemas reach the server untouched).
- The streamed answer is read by a lean reader (``ndjson_parts``) over the client's own
  shared ``httpx`` client, the same request ``AsyncClient._request`` sends: bytes split
  into lines, each decoded once (orjson) into a plain dict. The library builds a
  pydantic ``ChatResponse`` per line and decodes each line through three generator
  layers (bytes, text, lines) — a third of the serving process's CPU per streamed
  token. Errors stay the library's: ``ResponseError`` with the HTTP status at the
  start, with ``-1`` for an ``{"error": …}`` line mid-stream; the wire fields read
  (``message.content``, ``thinking``, ``tool_calls[].function``, ``done``,
  ``done_reason``, the eval counts) are ``ollama.ChatResponse``'s, and a line that is
  not one is a malformed answer, as it is to the library.
- Tool calls arrive whole, without ids; several may arrive in one turn, in one line or
  spread over several. ``done_reason`` never says "tool_calls".
- ``thinking`` arrives in ``message.thinking`` and is reported as ``ThinkingDelta``.
- In streaming calls a refused connection surfaces as raw ``httpx.ConnectError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from dataclasses import replace
from typing import Any

import httpx
import ollama
import orjson

from llm._toolcalls import ERROR_PREFIX, new_call_id, tools_payload, whole_call_events
from llm._transport_errors import transport_error
from llm.error_text import provider_message
from llm.lean_http import endpoint, post_stream
from llm.provider import Completion, ProviderHealth
from llm.types import (
    ChatRequest,
    ContentDelta,
    Message,
    MessageComplete,
    MessageStart,
    StreamError,
    StreamEvent,
    ThinkingDelta,
    Usage,
)

log = logging.getLogger(__name__)

def messages_payload(system_prompt: str, messages: list[Message]) -> list[dict[str, Any]]:
    """Provider-neutral messages to Ollama chat messages.

    Tool results become ``role: tool`` messages carrying ``tool_name`` (Ollama matches
    results to calls by name and order; it has no call ids). Error results are
    prefixed so the model can tell a failure from data. ``content`` is always sent,
    even empty, because strict servers reject a message without it.
    """
    out: list[dict[str, Any]] = []
    if system_prompt:
        out.append({"role": "system", "content": system_prompt})
    for m in messages:
        if m.role == "assistant":
            entry: dict[str, Any] = {"role": "assistant", "content": m.content}
            if m.tool_calls:
                entry["tool_calls"] = [
                    {"function": {"name": c.name, "arguments": c.arguments if c.parse_error is None else {}}}
                    for c in m.tool_calls
                ]
            out.append(entry)
            continue
        for r in m.tool_results:
            content = f"{ERROR_PREFIX}{r.content}" if r.is_error else r.content
            out.append({"role": "tool", "tool_name": r.name, "content": content})
        if m.content:
            out.append({"role": "user", "content": m.content})
    return out


async def ndjson_parts(
    http: httpx.AsyncClient, path: str | httpx.URL, body: bytes
) -> AsyncGenerator[dict[str, Any], None]:
    """``POST path`` with a JSON ``body`` on ``http``; each NDJSON line of the answer,
    decoded once. ``ollama.ResponseError`` as the library raises it: the status and body
    of a non-2xx answer, ``-1`` for an ``{"error": …}`` line; ``ValueError`` for a line
    that is not a JSON object. Closing the generator closes the response. The request
    goes out through ``llm.lean_http`` (the client's base URL, headers, timeout and
    transport, without its per-request cookie, auth and redirect layers)."""
    response = await post_stream(http, path, body)
    try:
        if not response.is_success:
            await response.aread()
            raise ollama.ResponseError(response.text, response.status_code)
        pending = b""
        # The transport's byte stream itself when the answer is not content-encoded:
        # ``aiter_bytes`` would add two generator layers (decoding, re-chunking) per chunk.
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        chunks = response.aiter_bytes() if encoding not in ("", "identity") else _byte_stream(response)
        async for chunk in chunks:
            *lines, pending = (pending + chunk).split(b"\n") if pending else chunk.split(b"\n")
            for line in lines:
                if line.strip():
                    yield _part(line)
        if pending.strip():
            yield _part(pending)
    finally:
        await response.aclose()


def _byte_stream(response: httpx.Response) -> AsyncIterator[bytes]:
    stream = response.stream
    if not isinstance(stream, httpx.AsyncByteStream):
        raise TypeError("an async client's response has an async stream")
    return stream.__aiter__()


def _part(line: bytes) -> dict[str, Any]:
    part = orjson.loads(line)
    if not isinstance(part, dict):
        raise ValueError("a line that is not a JSON object")
    if err := part.get("error"):
        raise ollama.ResponseError(str(err))
    return part


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("message text that is not a string")
    return value


def _count(value: Any) -> int:
    return value if isinstance(value, int) else 0


def _tool_calls(calls: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, arguments) of each ``tool_calls[].function``, shaped as ``ollama.Message.ToolCall``."""
    if not calls:
        return
    if not isinstance(calls, list):
        raise ValueError("tool_calls that is not a list")
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ValueError("a tool call without a function name")
        arguments = function.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise ValueError("tool call arguments that are not an object")
        yield function["name"], arguments


class OllamaProvider:
    """``Provider`` on a local or remote Ollama server.

    ``timeout`` bounds each network operation of a request (connect, and the wait for
    every next streamed line). ``num_ctx`` sets the context window (Ollama's default
    of 2-4k tokens silently truncates a long system prompt plus tool list).
    ``keep_alive`` keeps the model loaded between turns. ``think`` is sent as-is when
    not ``None`` (thinking models only). Pass ``client`` to share an existing
    ``ollama.AsyncClient``; otherwise the provider owns one and ``aclose`` closes it.
    """

    name = "ollama"

    def __init__(
        self,
        host: str,
        model: str,
        *,
        timeout: float = 120.0,
        num_ctx: int | None = 8192,
        keep_alive: str | float | None = "30m",
        think: bool | None = None,
        client: ollama.AsyncClient | None = None,
        warm_timeout: float = 300.0,
        health_timeout: float = 5.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.model = model
        self.host = host
        self._num_ctx = num_ctx
        self._keep_alive = keep_alive
        self._think = think
        self._warm_timeout = warm_timeout
        self._health_timeout = health_timeout
        self._owns_client = client is None
        # ``transport``: the pool of a stated size (``llm.pool``); httpx's default holds 100.
        self._client = (
            client
            if client is not None
            else ollama.AsyncClient(
                host=host, timeout=httpx.Timeout(timeout), **({"transport": transport} if transport is not None else {})
            )
        )
        #: ``/api/chat`` on the client's base URL, merged once (``llm.lean_http.endpoint``).
        self._chat_url = endpoint(self._client._client, "/api/chat")

    # --- request -----------------------------------------------------------------

    def request_body(self, request: ChatRequest) -> dict[str, Any]:
        """The JSON body of ``POST /api/chat`` for this turn."""
        options: dict[str, Any] = {"num_predict": request.max_tokens}
        if self._num_ctx is not None:
            options["num_ctx"] = self._num_ctx
        if request.temperature is not None:
            options["temperature"] = request.temperature
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages_payload(request.system_prompt, request.messages),
            "stream": True,
            "options": options,
        }
        if request.tools:
            body["tools"] = tools_payload(request.tools)
        if self._think is not None:
            body["think"] = self._think
        if self._keep_alive is not None:
            body["keep_alive"] = self._keep_alive
        return body

    def _open_stream(self, body: dict[str, Any]) -> AsyncGenerator[dict[str, Any], None]:
        # See the module docstring: ``chat()`` would mangle nested tool schemas, and its
        # reader costs a pydantic model per line.
        return ndjson_parts(self._client._client, self._chat_url, orjson.dumps(body))

    # --- Provider ------------------------------------------------------------------

    async def stream_chat(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        yield MessageStart()
        stream: AsyncGenerator[dict[str, Any], None] | None = None
        calls = 0
        usage = Usage()
        done_reason = ""
        error: StreamError | None = None
        try:
            stream = self._open_stream(self.request_body(request))
            async for part in stream:
                message = part.get("message")
                if not isinstance(message, dict):
                    raise ValueError("a line without a message object")
                if thinking := message.get("thinking"):
                    yield ThinkingDelta(text=_text(thinking))
                if content := message.get("content"):
                    yield ContentDelta(text=_text(content))
                for name, arguments in _tool_calls(message.get("tool_calls")):
                    for event in whole_call_events(new_call_id(), name, calls, arguments):
                        yield event
                    calls += 1
                if part.get("done"):
                    usage = Usage(_count(part.get("prompt_eval_count")), _count(part.get("eval_count")))
                    done_reason = str(part.get("done_reason") or "stop")
                    break
            else:
                error = StreamError(message="Ollama ended the stream before its final message", code="provider_error")
        except Exception as exc:  # the contract: failures are events, never raised
            error = self._failure(exc, "stream")
        finally:
            if stream is not None:
                # Close the HTTP response now, whether the turn finished, failed, or
                # the consumer stopped iterating (GeneratorExit or cancellation).
                with contextlib.suppress(Exception):
                    await stream.aclose()
        if error is not None:
            yield error
            return
        yield MessageComplete(stop_for_tool_use=calls > 0, usage=usage, stop_reason=done_reason)

    async def complete(self, request: ChatRequest) -> Completion:
        """One non-streamed ``/api/chat`` (``stream: false``): the answer is one JSON
        object, ``ollama.ChatResponse``'s fields, read whole (``llm.provider.Completer``).
        No tools: a side request (a conversation's title) that wants text only."""
        body = self.request_body(replace(request, tools=[]))
        body["stream"] = False
        try:
            response = await post_stream(self._client._client, self._chat_url, orjson.dumps(body))
            try:
                await response.aread()
            finally:
                await response.aclose()
            if not response.is_success:
                raise ollama.ResponseError(response.text, response.status_code)
            part = _part(response.content)
            message = part.get("message")
            if not isinstance(message, dict):
                raise ValueError("an answer without a message object")
            text = _text(message.get("content") or "")
            usage = Usage(_count(part.get("prompt_eval_count")), _count(part.get("eval_count")))
        except Exception as exc:  # the contract: failures are values, never raised (a closed client, ...)
            return Completion(error=self._failure(exc, "call"))
        return Completion(text=text, usage=usage)

    def _failure(self, exc: Exception, what: str) -> StreamError:
        """A failed call (or a failure while reading its stream) as the error it reports;
        called inside the ``except`` block, so an unexpected one is logged with its trace."""
        if isinstance(exc, ollama.ResponseError):
            return self._response_error(exc)
        if isinstance(exc, httpx.HTTPError):
            return transport_error(exc, "Ollama", self.host) or StreamError(f"Ollama request failed: {exc}")
        if isinstance(exc, ValueError):  # a malformed NDJSON line or JSON body, or not a ChatResponse
            return StreamError(message=f"Ollama sent a malformed response: {exc}", code="provider_error")
        log.exception("unexpected error in an Ollama %s", what)
        return StreamError(message=f"Ollama {what} failed: {type(exc).__name__}: {exc}", code="provider_error")

    def _response_error(self, exc: ollama.ResponseError) -> StreamError:
        status = exc.status_code
        detail = provider_message(exc.error)
        if status == 429:
            return StreamError(message=f"Ollama is rate limiting: {detail}", code="provider_rate_limited")
        if status == -1:
            return StreamError(message=f"Ollama reported an error mid-stream: {detail}", code="provider_error")
        if status == 404:
            return StreamError(
                message=f"Ollama: {detail} (pull it with `ollama pull {self.model}`)", code="provider_error"
            )
        return StreamError(message=f"Ollama returned HTTP {status}: {detail}", code="provider_error")

    async def health(self) -> ProviderHealth:
        """Ok when the server answers ``/api/tags`` and lists the configured model."""
        try:
            async with asyncio.timeout(self._health_timeout):
                listing = await self._client.list()
        except ollama.ResponseError as exc:
            detail = f"Ollama at {self.host} answered HTTP {exc.status_code}: {exc.error}"
            return ProviderHealth(ok=False, detail=detail)
        except (httpx.HTTPError, ConnectionError, TimeoutError) as exc:
            return ProviderHealth(ok=False, detail=f"Ollama at {self.host} unreachable: {exc or type(exc).__name__}")
        names = {m.model for m in listing.models if m.model}
        if self.model in names or f"{self.model}:latest" in names:
            return ProviderHealth(ok=True, detail=f"Ollama at {self.host} serves {self.model}")
        return ProviderHealth(
            ok=False, detail=f"Ollama at {self.host} does not have {self.model}; run `ollama pull {self.model}`"
        )

    async def warm(self) -> bool:
        """Load the model into memory (a chat with no messages), so the first turn is fast.

        Meant to run as a background task at start-up: it never raises, bounds itself
        with its own timeout, and only logs the outcome. Returns whether it worked.
        """
        try:
            async with asyncio.timeout(self._warm_timeout):
                await self._client.chat(model=self.model, messages=[], keep_alive=self._keep_alive)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("warming Ollama model %s at %s failed: %s", self.model, self.host, exc or type(exc).__name__)
            return False
        log.info("Ollama model %s loaded at %s", self.model, self.host)
        return True

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.close()
