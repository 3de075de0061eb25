"""Gemini provider on ``google-genai``'s async client (``generate_content_stream``).

Facts this module is built around (google-genai 3.x, Gemini 2.5/3 models):

- Function calls arrive whole, one part each; a turn may hold several (parallel
  calls). The Developer API usually sends no call id; when it does, the function
  response must carry the same id.
- Every part of the model's turn may carry a ``thoughtSignature``. Gemini 3 rejects
  the next request with a 400 unless the model turn is sent back with its parts
  unmodified, so every part is kept (in order, as received) in
  ``MessageComplete.replay["gemini"]["parts"]`` and replayed verbatim.
- Thought parts (``part.thought``) are reasoning summaries, reported as
  ``ThinkingDelta`` and never as content.
- The SDK retries nothing and times out never unless told: ``HttpOptions`` carries an
  explicit timeout and ``HttpRetryOptions`` for 408/429/5xx. Automatic function
  calling and automatic stream continuation are both disabled: the agent loop runs
  tools, and a stream that dies must surface as an error, not be silently resumed.
- The SDK's streamed response sits inside a reference cycle of generators, so
  closing our generator would leave the HTTP response open until the garbage
  collector runs. The provider therefore sends through its own ``httpx.AsyncClient``
  subclass that registers every streamed response with the turn that opened it, and
  closes them when the turn ends for any reason (finished, failed, consumer gone).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import httpx
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from llm._toolcalls import new_call_id, whole_call_events
from llm._transport_errors import transport_error
from llm.error_text import provider_message
from llm.gemini_messages import contents_from_messages, function_declarations, part_record
from llm.provider import Completion, ProviderHealth
from llm.types import (
    ChatRequest,
    ContentDelta,
    MessageComplete,
    MessageStart,
    StreamError,
    StreamEvent,
    ThinkingDelta,
    Usage,
)

log = logging.getLogger(__name__)

RETRY_STATUS_CODES = [408, 429, 500, 502, 503, 504]

_FINISH_REASONS = {
    "STOP": "stop",
    "MAX_TOKENS": "max_tokens",
    "SAFETY": "safety",
    "RECITATION": "recitation",
    "BLOCKLIST": "blocklist",
    "PROHIBITED_CONTENT": "prohibited_content",
    "SPII": "spii",
    "MALFORMED_FUNCTION_CALL": "malformed_function_call",
    "UNEXPECTED_TOOL_CALL": "unexpected_tool_call",
    "TOO_MANY_TOOL_CALLS": "too_many_tool_calls",
    "LANGUAGE": "language",
    "OTHER": "other",
}


class _StreamTrackingClient(httpx.AsyncClient):
    """httpx client that hands every streamed response to the current turn's registry.

    ``registry`` is a context variable owned by one provider; a turn sets it to a list
    before calling the SDK (which sends from the same task), then closes what landed
    in it. With ``delegate`` set, requests go through that shared client's pool.
    """

    def __init__(
        self,
        registry: contextvars.ContextVar[list[httpx.Response] | None],
        delegate: httpx.AsyncClient | None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._registry = registry
        self._delegate = delegate

    async def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:  # type: ignore[override]
        if self._delegate is not None:
            response = await self._delegate.send(request, **kwargs)
        else:
            response = await super().send(request, **kwargs)
        if kwargs.get("stream"):
            open_responses = self._registry.get()
            if open_responses is not None:
                open_responses.append(response)
        return response


class GeminiProvider:
    """``Provider`` on the Gemini Developer API (or any ``base_url`` speaking it).

    ``timeout_s`` bounds each network operation of a request (connect, and every wait
    for the next streamed bytes). ``retry_attempts`` counts the first try (1 = no
    retry); retries apply to 408/429/5xx and connection failures before the stream
    starts. ``include_thoughts`` asks for thought summaries (reported as
    ``ThinkingDelta``). ``http_client`` is the app's shared ``httpx.AsyncClient``;
    without one the provider keeps its own pool. Pass ``client`` to use a prepared
    ``genai.Client`` instead (then closing its streams is the SDK's business).

    ``health()`` reads the model's metadata (``GET models/{model}``): cheap, needs a
    valid key, and says whether the model exists.
    """

    name = "gemini"

    def __init__(
        self,
        api_key: str,
        model: str,
        *,
        base_url: str | None = None,
        timeout_s: float = 120.0,
        retry_attempts: int = 3,
        retry_initial_delay_s: float = 1.0,
        retry_jitter_s: float = 1.0,
        include_thoughts: bool = False,
        api_version: str | None = None,
        client: genai.Client | None = None,
        http_client: httpx.AsyncClient | None = None,
        health_timeout_s: float = 10.0,
    ) -> None:
        self.model = model
        self._include_thoughts = include_thoughts
        self._health_timeout_s = health_timeout_s
        self._open_streams: contextvars.ContextVar[list[httpx.Response] | None] = contextvars.ContextVar(
            f"gemini_open_streams_{id(self)}", default=None
        )
        self._tracking: _StreamTrackingClient | None = None
        self.base_url = base_url or "https://generativelanguage.googleapis.com/"
        if client is not None:
            self._client = client
            self._owns_client = False
            return
        self._tracking = _StreamTrackingClient(self._open_streams, http_client, follow_redirects=True)
        self._client = genai.Client(
            api_key=api_key,
            http_options=types.HttpOptions(
                base_url=base_url,
                api_version=api_version,
                timeout=int(timeout_s * 1000),
                retry_options=types.HttpRetryOptions(
                    attempts=retry_attempts,
                    initial_delay=retry_initial_delay_s,
                    jitter=retry_jitter_s,
                    http_status_codes=RETRY_STATUS_CODES,
                ),
                httpx_async_client=self._tracking,
            ),
        )
        self._owns_client = True

    def config(self, request: ChatRequest) -> types.GenerateContentConfig:
        tools: types.ToolListUnion | None = (
            [types.Tool(function_declarations=function_declarations(request.tools))] if request.tools else None
        )
        return types.GenerateContentConfig(
            system_instruction=request.system_prompt or None,
            tools=tools,
            automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
            automatic_continuation=False,
            max_output_tokens=request.max_tokens,
            temperature=request.temperature,
            thinking_config=types.ThinkingConfig(include_thoughts=True) if self._include_thoughts else None,
        )

    async def stream_chat(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        yield MessageStart()
        opened: list[httpx.Response] = []
        self._open_streams.set(opened)
        stream: AsyncIterator[types.GenerateContentResponse] | None = None
        parts: list[dict[str, Any]] = []
        calls = 0
        usage = Usage()
        finish = ""
        error: StreamError | None = None
        try:
            stream = await self._client.aio.models.generate_content_stream(
                model=self.model, contents=contents_from_messages(request.messages), config=self.config(request)
            )
            async for chunk in stream:
                if chunk.usage_metadata is not None:
                    usage = Usage(
                        chunk.usage_metadata.prompt_token_count or 0,
                        (chunk.usage_metadata.candidates_token_count or 0)
                        + (chunk.usage_metadata.thoughts_token_count or 0),
                    )
                if not chunk.candidates:
                    feedback = chunk.prompt_feedback
                    if feedback is not None and feedback.block_reason is not None:
                        reason = getattr(feedback.block_reason, "value", feedback.block_reason)
                        error = StreamError(message=f"Gemini blocked the prompt: {reason}", code="provider_error")
                        break
                    continue
                candidate = chunk.candidates[0]
                if candidate.finish_reason is not None:
                    finish = str(getattr(candidate.finish_reason, "value", candidate.finish_reason))
                for part in (candidate.content.parts if candidate.content else None) or ():
                    parts.append(part_record(part))
                    if part.function_call is not None:
                        call = part.function_call
                        call_id = call.id or new_call_id()
                        for event in whole_call_events(call_id, call.name or "", calls, call.args or {}):
                            yield event
                        calls += 1
                    elif part.text:
                        yield ThinkingDelta(text=part.text) if part.thought else ContentDelta(text=part.text)
        except Exception as exc:  # the contract: failures are events, never raised
            error = self._failure(exc, "stream")
        finally:
            self._open_streams.set(None)
            if stream is not None:
                with contextlib.suppress(Exception):
                    await stream.aclose()  # type: ignore[attr-defined]
            for response in opened:
                # Deterministic close of the HTTP stream; see the module docstring.
                with contextlib.suppress(Exception):
                    await response.aclose()
        if error is not None:
            yield error
            return
        if not finish:
            yield StreamError(message="Gemini ended the stream without a finish reason", code="provider_error")
            return
        yield MessageComplete(
            stop_for_tool_use=calls > 0,
            usage=usage,
            stop_reason=_FINISH_REASONS.get(finish, finish.lower()),
            replay={"gemini": {"parts": parts}},
        )

    async def complete(self, request: ChatRequest) -> Completion:
        """One non-streamed ``generateContent`` call: the answer is one
        ``GenerateContentResponse``, read whole (``llm.provider.Completer``). No tools: a
        side request (a conversation's title) that wants text only; thoughts are left out."""
        try:
            answer = await self._client.aio.models.generate_content(
                model=self.model,
                contents=contents_from_messages(request.messages),
                config=self.config(replace(request, tools=[])),
            )
            candidate = answer.candidates[0] if answer.candidates else None
            parts = (candidate.content.parts if candidate is not None and candidate.content else None) or []
            text = "".join(p.text for p in parts if p.text and not p.thought)
            meta = answer.usage_metadata
            usage = (
                Usage(
                    meta.prompt_token_count or 0, (meta.candidates_token_count or 0) + (meta.thoughts_token_count or 0)
                )
                if meta is not None
                else Usage()
            )
        except Exception as exc:  # the contract: failures are values, never raised
            return Completion(error=self._failure(exc, "call"))
        return Completion(text=text, usage=usage)

    def _failure(self, exc: Exception, what: str) -> StreamError:
        """A failed call (or a failure while reading its stream) as the error it reports;
        called inside the ``except`` block, so an unexpected one is logged with its trace."""
        if isinstance(exc, genai_errors.APIError):
            return self._api_error(exc)
        if isinstance(exc, httpx.HTTPError):
            return transport_error(exc, "Gemini", self.base_url) or StreamError(f"Gemini request failed: {exc}")
        if isinstance(exc, genai_errors.UnknownApiResponseError):
            return StreamError(message=f"Gemini sent a malformed response: {exc}", code="provider_error")
        error = transport_error(exc, "Gemini", self.base_url)
        if error is None:
            log.exception("unexpected error in a Gemini %s", what)
            error = StreamError(message=f"Gemini {what} failed: {type(exc).__name__}: {exc}", code="provider_error")
        return error

    @staticmethod
    def _api_error(exc: genai_errors.APIError) -> StreamError:
        detail = exc.message or provider_message(exc.details, exc)
        if exc.code == 429:
            return StreamError(message=f"Gemini rate limit: {detail}", code="provider_rate_limited")
        if exc.code in (401, 403) or (exc.code == 400 and "API key" in detail):
            return StreamError(
                message=f"Gemini rejected the API key (HTTP {exc.code}): {detail}", code="provider_error"
            )
        if exc.code in (408, 504):
            return StreamError(message=f"Gemini timed out (HTTP {exc.code}): {detail}", code="provider_timeout")
        status = f" {exc.status}" if exc.status else ""
        return StreamError(message=f"Gemini returned HTTP {exc.code}{status}: {detail}", code="provider_error")

    async def health(self) -> ProviderHealth:
        try:
            info = await self._client.aio.models.get(
                model=self.model,
                config=types.GetModelConfig(
                    http_options=types.HttpOptions(
                        timeout=int(self._health_timeout_s * 1000),
                        retry_options=types.HttpRetryOptions(attempts=1),
                    )
                ),
            )
        except genai_errors.APIError as exc:
            detail = f"Gemini model {self.model}: HTTP {exc.code} {exc.message or ''}".strip()
            return ProviderHealth(ok=False, detail=detail)
        except Exception as exc:
            err = transport_error(exc, "Gemini", self.base_url)
            return ProviderHealth(ok=False, detail=err.message if err else f"Gemini health check failed: {exc}")
        return ProviderHealth(ok=True, detail=f"Gemini serves {info.name or self.model}")

    async def aclose(self) -> None:
        if self._owns_client:
            with contextlib.suppress(Exception):
                await self._client.aio.aclose()
        if self._tracking is not None:
            await self._tracking.aclose()
