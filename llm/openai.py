"""OpenAI-compatible provider: ``/chat/completions`` streaming through the official ``openai`` SDK.

Works with any server speaking the OpenAI chat API (OpenAI, vLLM, llama.cpp's server,
LM Studio, OpenRouter, Ollama's ``/v1``). Wire facts this module is built around
(https://platform.openai.com/docs/api-reference/chat-streaming):

- A stream is ``data: {chat.completion.chunk}`` lines ended by ``data: [DONE]``; with
  ``stream_options.include_usage`` the last chunk has ``choices: []`` and ``usage``.
- Tool calls arrive as ``delta.tool_calls`` pieces keyed by ``index``: the first piece
  of a call carries ``id`` and ``function.name``, later ones only a fragment of
  ``function.arguments`` (a JSON text cut anywhere). Parallel calls use distinct
  indexes. Some servers send every call whole with index 0 and a new ``id``: a new id
  on an index whose call is already named starts another call.
- ``finish_reason`` is ``tool_calls`` when the model called tools, but several servers
  say ``stop``; like the Ollama provider, a turn with calls stops for tool use.
- Reasoning servers (vLLM, DeepSeek, llama.cpp) stream ``delta.reasoning_content`` or
  ``delta.reasoning``: reported as ``ThinkingDelta``, never as content.
- The SDK retries 429/5xx/connection errors by default; the agent has its own error
  handling, so ``max_retries`` defaults to 0 and failures surface at once.
- The streamed answer is read by a lean reader (``sse_chunks``): the SDK still builds
  and sends the request and raises its status errors (``with_streaming_response``), but
  each ``data:`` line is decoded once (orjson) into a plain dict instead of a pydantic
  ``ChatCompletionChunk`` built by ``construct_type``'s per-field type introspection —
  measured (issue 23, ``bench/provider_token_cpu.py``) that construction was ~60 % of
  the client's CPU, ~234 us per token against Ollama's ~25 us.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

import httpx
import openai
import orjson

from llm._toolcalls import ERROR_PREFIX, new_call_id, tools_payload
from llm._transport_errors import transport_error
from llm.error_text import provider_message
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
    ToolUseInput,
    ToolUseStart,
    Usage,
)

log = logging.getLogger(__name__)

#: Sent when no key is configured: local servers ignore it, the SDK insists on one.
NO_KEY = "no-key"
DEFAULT_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20)


def messages_payload(system_prompt: str, messages: list[Message]) -> list[dict[str, Any]]:
    """Provider-neutral messages to OpenAI chat messages.

    An assistant turn's calls become ``tool_calls`` (arguments as JSON text; a call whose
    arguments did not parse is replayed with ``{}`` since servers that render chat
    templates decode them). Tool results become ``role: tool`` messages answering their
    ``tool_call_id``, error results prefixed so the model can tell a failure from data.
    """
    out: list[dict[str, Any]] = []
    if system_prompt:
        out.append({"role": "system", "content": system_prompt})
    for m in messages:
        if m.role == "assistant":
            entry: dict[str, Any] = {"role": "assistant", "content": m.content}
            if m.tool_calls:
                entry["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {
                            "name": c.name,
                            "arguments": "{}" if c.parse_error else orjson.dumps(c.arguments).decode(),
                        },
                    }
                    for c in m.tool_calls
                ]
            out.append(entry)
            continue
        for r in m.tool_results:
            content = f"{ERROR_PREFIX}{r.content}" if r.is_error else r.content
            out.append({"role": "tool", "tool_call_id": r.tool_call_id, "content": content})
        if m.content or not m.tool_results:
            out.append({"role": "user", "content": m.content})
    return out


@dataclass(slots=True)
class _Call:
    """A tool call being assembled from deltas."""

    id: str
    name: str = ""
    started: bool = False
    pending: str = ""  # argument text received before the name


async def sse_chunks(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON objects of a streamed chat answer's ``data:`` fields (an event's data
    lines joined), each decoded once, up to ``data: [DONE]``; comments and other fields
    skipped, as the SDK's own reader does. Lines end with LF, CRLF or a lone CR (a CR
    that ends a network chunk waits for the next: it may be a CRLF's). An event the body
    ends inside (no blank line after it) is not dispatched, as the spec and the SDK say:
    a body cut mid-event is a stream that ended early. ``ValueError`` for data that is
    not JSON."""
    pending = b""
    data: list[bytes] = []
    async for chunk in response.aiter_bytes():
        buffer = pending + chunk if pending else chunk
        held = b""
        if b"\r" in buffer:
            if buffer.endswith(b"\r"):
                buffer, held = buffer[:-1], b"\r"
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *lines, pending = buffer.split(b"\n")
        for line in lines:
            if line.startswith(b"data:"):
                data.append(line[6:] if line[5:6] == b" " else line[5:])
            elif not line and data:
                payload = b"\n".join(data)
                data = []
                if payload.startswith(b"[DONE]"):
                    return
                decoded = orjson.loads(payload)
                if isinstance(decoded, dict):
                    yield decoded
        pending += held


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _stream_error(error: Any) -> StreamError:
    """An ``{"error": …}`` object inside a started stream (the SDK raised ``APIError``
    with this message)."""
    message = error.get("message") if isinstance(error, dict) else None
    if not isinstance(message, str) or not message:
        message = "An error occurred during streaming"
    return StreamError(f"the OpenAI-compatible server reported an error: {message}", "provider_error")


class _CallAssembler:
    """Turns ``delta.tool_calls`` pieces into ``ToolUseStart`` / ``ToolUseInput`` events."""

    def __init__(self) -> None:
        self._by_index: dict[int, _Call] = {}
        self._ids: set[str] = set()
        self.count = 0

    def _unique(self, call_id: str | None) -> str:
        if not call_id or call_id in self._ids:
            call_id = new_call_id()
        self._ids.add(call_id)
        return call_id

    def feed(self, piece: Any) -> list[StreamEvent]:
        """One ``delta.tool_calls`` piece, as decoded JSON."""
        if not isinstance(piece, dict):
            return []
        index = piece.get("index")
        index = index if isinstance(index, int) else 0
        function = piece.get("function")
        function = function if isinstance(function, dict) else {}
        name = _text(function.get("name"))
        arguments = _text(function.get("arguments"))
        piece_id = piece.get("id") if isinstance(piece.get("id"), str) else None
        call = self._by_index.get(index)
        if call is None or (piece_id and call.name and piece_id != call.id):
            call = _Call(id=self._unique(piece_id))
            self._by_index[index] = call
        events: list[StreamEvent] = []
        if name and not call.started:
            call.name = name
            call.started = True
            events.append(ToolUseStart(id=call.id, name=name, index=self.count))
            self.count += 1
            if call.pending:
                events.append(ToolUseInput(id=call.id, partial_json=call.pending))
                call.pending = ""
        if arguments:
            if call.started:
                events.append(ToolUseInput(id=call.id, partial_json=arguments))
            else:
                call.pending += arguments
        return events


class OpenAIProvider:
    """``Provider`` on any OpenAI-compatible chat server.

    ``base_url`` includes the API prefix (``https://api.openai.com/v1``,
    ``http://localhost:8000/v1``). ``timeout_s`` bounds each network operation (connect,
    and the wait for every next streamed chunk). Pass ``http_client`` to share the app's
    ``httpx.AsyncClient`` (it is then never closed here); otherwise the provider owns
    one with explicit connection limits and ``aclose`` closes it.
    """

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        http_client: httpx.AsyncClient | None = None,
        max_retries: int = 0,
        health_timeout: float = 5.0,
        parallel_tool_calls: bool = True,
    ) -> None:
        self.model = model
        self.base_url = base_url.rstrip("/")
        self._health_timeout = health_timeout
        self._parallel = parallel_tool_calls
        self._owns_http = http_client is None
        self._http = http_client or httpx.AsyncClient(limits=DEFAULT_LIMITS, follow_redirects=False)
        self._client = openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=api_key or NO_KEY,
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
            max_retries=max_retries,
            http_client=self._http,
        )

    def request_kwargs(self, request: ChatRequest) -> dict[str, Any]:
        """The keyword arguments of ``chat.completions.create`` for this turn."""
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages_payload(request.system_prompt, request.messages),
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": request.max_tokens,
        }
        if request.temperature is not None:
            kwargs["temperature"] = request.temperature
        if request.tools:
            kwargs["tools"] = tools_payload(request.tools)
            # Only valid with tools: OpenAI rejects it on a request without any.
            kwargs["parallel_tool_calls"] = self._parallel
        return kwargs

    async def stream_chat(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        yield MessageStart()
        stream: Any = None
        calls = _CallAssembler()
        usage = Usage()
        finish = ""
        error: StreamError | None = None
        try:
            raw = self._client.chat.completions.with_streaming_response.create(**self.request_kwargs(request))
            stream = await raw.__aenter__()  # the SDK's status errors raise here
            async for chunk in sse_chunks(stream.http_response):
                if chunk.get("error"):
                    error = _stream_error(chunk["error"])
                    break
                counted = chunk.get("usage")
                if isinstance(counted, dict):
                    usage = Usage(_count(counted.get("prompt_tokens")), _count(counted.get("completion_tokens")))
                choices = chunk.get("choices")
                if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
                    continue
                choice = choices[0]
                delta = choice.get("delta")
                if isinstance(delta, dict):
                    thinking = delta.get("reasoning_content") or delta.get("reasoning")
                    if isinstance(thinking, str) and thinking:
                        yield ThinkingDelta(text=thinking)
                    content = delta.get("content")
                    if isinstance(content, str) and content:
                        yield ContentDelta(text=content)
                    pieces = delta.get("tool_calls")
                    if isinstance(pieces, list):
                        for piece in pieces:
                            for event in calls.feed(piece):
                                yield event
                reason = choice.get("finish_reason")
                if isinstance(reason, str) and reason:
                    finish = reason
            if not finish and error is None:
                error = StreamError(
                    message="the OpenAI-compatible server ended the stream early", code="provider_error"
                )
        except Exception as exc:  # the contract: failures are events, never raised
            error = self._failure(exc)
        finally:
            if stream is not None:
                with contextlib.suppress(Exception):
                    await stream.http_response.aclose()
        if error is not None:
            yield error
            return
        yield MessageComplete(stop_for_tool_use=calls.count > 0, usage=usage, stop_reason=finish)

    async def complete(self, request: ChatRequest) -> Completion:
        """One non-streamed ``chat.completions`` call (no ``stream``): the answer is one
        ``chat.completion`` object, read whole (``llm.provider.Completer``). No tools: a
        side request (a conversation's title) that wants text only."""
        kwargs = self.request_kwargs(replace(request, tools=[]))
        del kwargs["stream"], kwargs["stream_options"]
        try:
            answer = await self._client.chat.completions.create(**kwargs)
            choice = answer.choices[0] if answer.choices else None
            text = (choice.message.content or "") if choice is not None else ""
            usage = (
                Usage(answer.usage.prompt_tokens or 0, answer.usage.completion_tokens or 0)
                if answer.usage is not None
                else Usage()
            )
        except Exception as exc:  # the contract: failures are values, never raised
            return Completion(error=self._failure(exc))
        return Completion(text=text, usage=usage)

    def _failure(self, exc: Exception) -> StreamError:
        """A failed call (or a failure while reading its stream) as the error it reports."""
        if isinstance(exc, openai.APIStatusError):
            return self._status_error(exc)
        if isinstance(exc, openai.APITimeoutError):
            return StreamError(f"OpenAI-compatible server timed out ({self.base_url}): {exc}", "provider_timeout")
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__
            return (transport_error(cause, "the OpenAI-compatible server", self.base_url) if cause else None) or (
                StreamError(
                    f"cannot reach the OpenAI-compatible server at {self.base_url}: {exc}", "provider_unreachable"
                )
            )
        if isinstance(exc, openai.APIError):  # an error event inside an started stream
            detail = provider_message(exc.body, exc.message)
            return StreamError(f"the OpenAI-compatible server reported an error: {detail}", "provider_error")
        if isinstance(exc, httpx.HTTPError):  # transport failures while reading the stream
            return transport_error(exc, "the OpenAI-compatible server", self.base_url) or StreamError(
                f"OpenAI-compatible request failed: {exc}"
            )
        log.exception("unexpected error in an OpenAI-compatible call")
        return StreamError(f"OpenAI-compatible stream failed: {type(exc).__name__}: {exc}", "provider_error")

    def _status_error(self, exc: openai.APIStatusError) -> StreamError:
        status = exc.status_code
        detail = provider_message(exc.body, exc.message)
        if status == 429:
            return StreamError(f"the OpenAI-compatible server is rate limiting: {detail}", "provider_rate_limited")
        if status in (408, 504):
            return StreamError(f"the OpenAI-compatible server timed out (HTTP {status}): {detail}", "provider_timeout")
        return StreamError(f"the OpenAI-compatible server returned HTTP {status}: {detail}", "provider_error")

    async def health(self) -> ProviderHealth:
        """Ok when ``GET /models`` answers and lists the model (or lists exactly one: a
        single-model server such as llama.cpp ignores the requested name)."""
        try:
            page = await self._client.models.list(timeout=self._health_timeout)
        except openai.APIStatusError as exc:
            return ProviderHealth(False, f"OpenAI-compatible server at {self.base_url} answered HTTP {exc.status_code}")
        except (openai.APIError, httpx.HTTPError) as exc:
            return ProviderHealth(False, f"OpenAI-compatible server at {self.base_url} unreachable: {exc}")
        ids = [m.id for m in page.data]
        if self.model in ids or len(ids) == 1:
            return ProviderHealth(True, f"OpenAI-compatible server at {self.base_url} serves {self.model}")
        return ProviderHealth(False, f"OpenAI-compatible server at {self.base_url} does not list {self.model}")

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()
