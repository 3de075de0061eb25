"""OpenTelemetry spans: one for each run, and under it one per model call and per tool call.

Off unless configured (``AGENT_OTEL=1``, or ``OTEL_EXPORTER_OTLP_ENDPOINT`` /
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` set) and the optional ``otel`` extra is installed
(``pip install 'agentchat[otel]'``). Off, ``Tracing()`` changes nothing: nothing is
wrapped, the tool hook is a ``nullcontext``, and opentelemetry is never imported — so
an installation without the extra has no import error and no cost.

On, each app owns its ``TracerProvider`` (no global provider: apps in one process keep
their spans apart) exporting over OTLP/HTTP in batches; the exporter reads the standard
``OTEL_EXPORTER_OTLP_*`` variables, and ``OTEL_SERVICE_NAME`` overrides ``agentchat``.

Where the spans come from, so the agent loop stays as it is:

* **run** (``agentchat.run``) — ``wrap_run`` wraps the agent function the run manager
  calls inside each run's task, so it is the current span of the task (new runs,
  runs resumed after a restart and runs taken over from another replica alike);
* **model call** (``chat {model}``) — ``wrap_provider`` wraps the provider: its span
  starts when the stream is first read, in the run's task, so its parent is the run
  span; provider, model, tokens in/out and the error code are attributes;
* **tool call** (``execute_tool {name}``) — ``tool_span`` around the executor in the
  tool step (``app.agent.tool_step``): tool name, outcome, duration.

Attributes never carry message text, arguments, results or credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

from app.ops.close_budget import TRACING_FLUSH_S
from llm.provider import Provider, ProviderHealth
from llm.types import ChatRequest, MessageComplete, StreamError, StreamEvent

log = logging.getLogger("agentchat.tracing")

SERVICE_NAME = "agentchat"
AgentFn = Callable[..., Awaitable[None]]


class ToolSpan:
    """What the tool step tells its span once the call is back."""

    __slots__ = ("_span", "_started")

    def __init__(self, span: Any) -> None:
        self._span, self._started = span, time.perf_counter()

    def finished(self, ok: bool) -> None:
        if self._span is None:
            return
        self._span.set_attribute("agentchat.tool.outcome", "ok" if ok else "error")
        self._span.set_attribute("agentchat.tool.duration_ms", round((time.perf_counter() - self._started) * 1000, 2))
        if not ok:
            from opentelemetry.trace import Status, StatusCode

            self._span.set_status(Status(StatusCode.ERROR, "tool returned an error"))


class Tracing:
    """The app's tracer, or nothing (``Tracing()``)."""

    def __init__(self, tracer: Any = None, provider: Any = None, *, owns_provider: bool = False) -> None:
        self.tracer, self.provider, self._owns = tracer, provider, owns_provider

    @property
    def enabled(self) -> bool:
        return self.tracer is not None

    @classmethod
    def from_settings(cls, enabled: bool, *, provider: Any = None) -> Tracing:
        """A tracer on ``provider`` (a ``TracerProvider`` the caller owns: tests), else,
        when ``enabled``, on a provider of this app's own with the OTLP/HTTP exporter."""
        if provider is not None:
            return cls(provider.get_tracer(SERVICE_NAME), provider)
        if not enabled:
            return cls()
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError:
            log.warning(
                "tracing is configured but the otel extra is not installed "
                "(pip install 'agentchat[otel]'); no spans are exported"
            )
            return cls()
        resource = Resource.create()
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
        own = TracerProvider(resource=resource)
        own.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        log.info("tracing on: spans go to the OTLP/HTTP exporter")
        return cls(own.get_tracer(SERVICE_NAME), own, owns_provider=True)

    async def aclose(self, flush_s: float = TRACING_FLUSH_S) -> None:
        """Flush and stop the app's own provider (never one the caller passed in), waiting
        at most ``flush_s`` (a step of the close budget): the SDK's own shutdown may wait
        30 s and more for an unreachable collector. The flush runs in a daemon thread of
        its own, not the loop's executor, so one past the bound is left behind without
        holding the interpreter's exit; the spans it had not sent are lost, as they would
        be with the collector down."""
        provider = self.provider
        if not self._owns or provider is None:
            return
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def flush() -> None:
            try:
                provider.shutdown()
            except Exception:  # the exporter's failure: logged, the close goes on
                log.exception("flushing the spans failed")
            finally:
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                    loop.call_soon_threadsafe(_settle, done)

        threading.Thread(target=flush, name="agentchat-otel-flush", daemon=True).start()
        try:
            await asyncio.wait_for(done, flush_s)
        except TimeoutError:
            log.warning("the spans' flush did not end within %.0f s; closing without it", flush_s)

    # --- the hooks ---------------------------------------------------------------------

    def wrap_run(self, agent: AgentFn) -> AgentFn:
        """``agent(run, chat, caller, **kw)`` inside a run span (unchanged when off)."""
        tracer = self.tracer
        if tracer is None:
            return agent

        async def traced(run: Any, chat: Any, caller: Any, *args: Any, **kwargs: Any) -> None:
            attributes = {
                "agentchat.run_id": run.id,
                "agentchat.conversation_id": run.conversation_id,
                "agentchat.context_type": chat.context_type,
                "agentchat.resumed": kwargs.get("state") is not None or kwargs.get("resumed") is not None,
            }
            with tracer.start_as_current_span("agentchat.run", attributes=attributes) as span:
                try:
                    await agent(run, chat, caller, *args, **kwargs)
                finally:
                    span.set_attribute("agentchat.status", str(run.status))
                    if run.status == "failed":
                        from opentelemetry.trace import Status, StatusCode

                        span.set_status(Status(StatusCode.ERROR, "run failed"))

        return traced

    def wrap_provider(self, provider: Provider) -> Provider:
        """The provider, its model calls in spans (unchanged when off)."""
        if self.tracer is None:
            return provider
        return TracedProvider(provider, self.tracer)

    @contextlib.contextmanager
    def tool_span(self, name: str) -> Iterator[ToolSpan]:
        """Around one tool execution; the current span while the tool runs."""
        if self.tracer is None:
            yield ToolSpan(None)
            return
        with self.tracer.start_as_current_span(
            f"execute_tool {name}", attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
        ) as span:
            yield ToolSpan(span)


class TracedProvider:
    """A ``Provider`` whose every ``stream_chat`` is one span; everything else is the
    wrapped provider's (attributes the app or tests read are passed through)."""

    def __init__(self, inner: Provider, tracer: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.model = inner.model
        self._tracer = tracer

    def __getattr__(self, attr: str) -> Any:
        if attr == "complete":  # a non-streamed call (``llm.provider.Completer``) is a span too
            call = getattr(self.inner, attr)
            return lambda request: self._complete(call, request)
        return getattr(self.inner, attr)

    def _attributes(self, request: ChatRequest) -> dict[str, Any]:
        """The GenAI semantic-convention attributes every model-call span carries."""
        return {
            "gen_ai.operation.name": "chat",
            "gen_ai.system": self.name,
            "gen_ai.request.model": self.model,
            "agentchat.tools_offered": len(request.tools),
        }

    async def _complete(self, call: Any, request: ChatRequest) -> Any:
        with self._tracer.start_as_current_span(
            f"chat {self.model}", attributes={**self._attributes(request), "agentchat.streamed": False}
        ) as span:
            done = await call(request)
            error = getattr(done, "error", None)
            span.set_attribute("agentchat.outcome", "error" if error is not None else "complete")
            if error is not None:
                from opentelemetry.trace import Status, StatusCode

                span.set_attribute("error.type", error.code)
                span.set_status(Status(StatusCode.ERROR, "model call failed"))
            return done

    async def stream_chat(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        # Started on the first read, in the consumer's task: the run span is the parent.
        span = self._tracer.start_span(f"chat {self.model}", attributes=self._attributes(request))
        stream = self.inner.stream_chat(request)
        outcome = "incomplete"
        try:
            async for event in stream:
                if isinstance(event, MessageComplete):
                    outcome = "complete"
                    span.set_attribute("gen_ai.usage.input_tokens", event.usage.input_tokens)
                    span.set_attribute("gen_ai.usage.output_tokens", event.usage.output_tokens)
                    span.set_attribute("agentchat.stop_for_tool_use", event.stop_for_tool_use)
                elif isinstance(event, StreamError):
                    outcome = "error"
                    span.set_attribute("error.type", event.code)
                yield event
        except BaseException:
            outcome = "cancelled" if outcome == "incomplete" else outcome
            raise
        finally:
            with contextlib.suppress(Exception):
                await stream.aclose()  # type: ignore[attr-defined]
            span.set_attribute("agentchat.outcome", outcome)
            if outcome == "error":
                from opentelemetry.trace import Status, StatusCode

                span.set_status(Status(StatusCode.ERROR, "model call failed"))
            span.end()

    async def health(self) -> ProviderHealth:
        return await self.inner.health()

    async def aclose(self) -> None:
        await self.inner.aclose()


def _settle(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)
