"""OpenTelemetry spans through the real agent loop: one span per run, and under it one
per model call (the real Ollama client against the loopback fake) and one per tool call
(the real knowledge-base tools), exported to the SDK's in-memory exporter. Off, nothing
is wrapped; without the ``otel`` extra, turning it on is a logged no-op."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app.config import Settings
from app.ops.tracing import Tracing
from llm.extractive import ExtractiveProvider
from tests.conftest import collect_sse, running_app
from tests.fakes import FakeOllama, running_fake
from tests.support.deadline import within
from tests.test_mandatory_flow import DOCS, QUESTION, answer, search

ANSWER = "Reconnect with Last-Event-ID."


@pytest.fixture
def exporter() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    provider = TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    yield provider, memory
    provider.shutdown()


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


async def test_run_model_and_tool_spans_are_parented_through_the_agent_loop(
    tmp_path: Path, exporter: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, memory = exporter
    fake = FakeOllama([lambda body, s=s: s(body) for s in (search(), answer(ANSWER))])
    async with running_fake(fake.app) as ollama_url:
        settings = Settings.from_env({
            "AGENT_DB_PATH": str(tmp_path / "agent.db"),
            "AGENT_INGEST_SAMPLE_KB": "false",
            "AGENT_ADMIN_OPEN": "true",
            "AGENT_LLM_PROVIDER": "ollama",  # the wiring builds the real provider, then wraps it
            "OLLAMA_HOST": ollama_url,
            "OLLAMA_MODEL": "llama3.2",
        })
        async with (
            running_app(settings, embedder=None, tracer_provider=provider) as (base, app),
            httpx.AsyncClient(timeout=30) as client,
        ):
            assert (await client.post(f"{base}/v1/kb/documents", json={"documents": DOCS})).status_code == 200
            events = await collect_sse(client, "POST", f"{base}/v1/agent/chat",
                                       json={"message": QUESTION, "context_type": "knowledge"})
            assert events[-1].event == "message_complete" and events[-1].json()["status"] == "completed"
            run_id = events[-1].json()["run_id"]
            deadline = time.monotonic() + 10  # the run span ends just after its last event
            while not any(s.name == "agentchat.run" for s in memory.get_finished_spans()):
                assert time.monotonic() < deadline, "the run span never ended"
                await asyncio.sleep(0.02)
            assert app.state.services.provider.name == "ollama"  # the wrapper passes attributes through

    spans = memory.get_finished_spans()
    (run,) = [s for s in spans if s.name == "agentchat.run"]
    assert run.parent is None and run.context is not None
    assert attrs(run) == {
        "agentchat.run_id": run_id,
        "agentchat.conversation_id": events[-1].json()["conversation_id"],
        "agentchat.context_type": "knowledge",
        "agentchat.resumed": False,
        "agentchat.status": "completed",
    }

    # The run's model calls: those of its trace (the conversation's title call, made after
    # the run with a real model configured, is a trace of its own).
    models = [s for s in spans if s.name == "chat llama3.2" and s.context.trace_id == run.context.trace_id]
    tools = [s for s in spans if s.name.startswith("execute_tool ")]
    assert len(models) == 2 and [s.name for s in tools] == [
        "execute_tool knowledge_base_search", "execute_tool generate_response"]
    for child in models + tools:
        assert child.parent is not None and child.parent.span_id == run.context.span_id
        assert child.context is not None and child.context.trace_id == run.context.trace_id
    for model in models:
        a = attrs(model)
        assert a["gen_ai.system"] == "ollama" and a["gen_ai.request.model"] == "llama3.2"
        assert a["agentchat.outcome"] == "complete" and a["agentchat.stop_for_tool_use"] is True
        assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0
        assert "error.type" not in a
    for tool in tools:
        a = attrs(tool)
        assert a["agentchat.tool.outcome"] == "ok" and a["agentchat.tool.duration_ms"] >= 0
        assert a["gen_ai.tool.name"] == tool.name.removeprefix("execute_tool ")
    # No message text, answer or tool argument ever becomes an attribute.
    values = " ".join(str(v) for s in spans for v in attrs(s).values())
    for text in (QUESTION, ANSWER, "resume stream disconnect"):
        assert text not in values


async def test_a_failed_model_call_carries_its_error_code(
    tmp_path: Path, exporter: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, memory = exporter
    settings = Settings.from_env({
        "AGENT_DB_PATH": str(tmp_path / "agent.db"),
        "AGENT_INGEST_SAMPLE_KB": "false",
        "AGENT_EMBEDDER": "none",
        "AGENT_MANDATORY_CONTEXTS": "none",
        "AGENT_LLM_PROVIDER": "ollama",
        "OLLAMA_HOST": "http://127.0.0.1:9",  # nothing listens: the call fails
        "OLLAMA_MODEL": "llama3.2",
    })
    async with running_app(settings, tracer_provider=provider) as (base, _), httpx.AsyncClient(timeout=30) as client:
        events = await collect_sse(client, "POST", f"{base}/v1/agent/chat",
                                   json={"message": "hello", "context_type": "knowledge"})
        assert events[-1].json()["status"] == "failed"
        deadline = time.monotonic() + 10
        while not any(s.name == "agentchat.run" for s in memory.get_finished_spans()):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
    spans = memory.get_finished_spans()
    (run,) = [s for s in spans if s.name == "agentchat.run"]
    assert run.context is not None
    # The run's model call (the title call after it, to the same dead model, is its own trace).
    (model,) = [s for s in spans if s.name == "chat llama3.2" and s.context.trace_id == run.context.trace_id]
    assert attrs(model)["error.type"] == "provider_unreachable" and attrs(model)["agentchat.outcome"] == "error"
    assert not model.status.is_ok and not run.status.is_ok and attrs(run)["agentchat.status"] == "failed"


def test_tracing_is_on_only_when_configured() -> None:
    assert not Settings.from_env({}).otel_enabled
    assert Settings.from_env({"AGENT_OTEL": "1"}).otel_enabled
    assert Settings.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}).otel_enabled
    off = Tracing.from_settings(False)
    provider = ExtractiveProvider()
    agent_fn = test_tracing_is_on_only_when_configured
    assert not off.enabled and off.wrap_provider(provider) is provider and off.wrap_run(agent_fn) is agent_fn  # type: ignore[arg-type]


async def test_configured_tracing_exports_over_otlp_http(monkeypatch: pytest.MonkeyPatch) -> None:
    """``OTEL_EXPORTER_OTLP_ENDPOINT`` set: the app's own provider sends its spans to a
    loopback OTLP/HTTP collector (protobuf, ``POST /v1/traces``) when it is closed."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    received: list[ExportTraceServiceRequest] = []

    async def traces(request: Request) -> Response:
        received.append(ExportTraceServiceRequest.FromString(await request.body()))
        return Response(b"", media_type="application/x-protobuf")

    collector = Starlette(routes=[Route("/v1/traces", traces, methods=["POST"])])
    async with running_fake(collector) as url:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
        monkeypatch.setenv("OTEL_SERVICE_NAME", "agentchat-test")
        settings = Settings.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": url})
        tracing = Tracing.from_settings(settings.otel_enabled)
        assert tracing.enabled
        with tracing.tool_span("knowledge_base_search") as span:
            span.finished(True)
        await tracing.aclose()  # flushes the batch
    sent = [s for r in received for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert [s.name for s in sent] == ["execute_tool knowledge_base_search"]
    resource = {a.key: a.value.string_value for a in received[0].resource_spans[0].resource.attributes}
    assert resource["service.name"] == "agentchat-test"  # OTEL_SERVICE_NAME wins over the default


def test_without_the_otel_extra_tracing_is_a_logged_no_op(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for name in [n for n in sys.modules if n == "opentelemetry" or n.startswith("opentelemetry.")]:
        monkeypatch.setitem(sys.modules, name, None)  # type: ignore[arg-type]
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="agentchat.tracing"):
        tracing = Tracing.from_settings(True)
    assert not tracing.enabled
    assert any("otel extra is not installed" in r.message for r in caplog.records)
    with tracing.tool_span("knowledge_base_search") as span:
        span.finished(True)  # no span, no import


async def test_a_flush_that_does_not_end_is_left_behind_at_its_bound(caplog: pytest.LogCaptureFixture) -> None:
    """The close waits for the spans' flush at most its step of the close budget: a
    collector that never answers (here a ``shutdown`` that blocks until the test lets it
    go) no longer holds the process's close for the SDK's own 30 s and more."""
    release = threading.Event()

    class StuckProvider:
        def shutdown(self) -> None:
            release.wait(60)

    tracing = Tracing(provider=StuckProvider(), owns_provider=True)
    try:
        with caplog.at_level(logging.WARNING, logger="agentchat.tracing"):
            await within(tracing.aclose(flush_s=0.05), "the close past a stuck flush", 30)
        assert any("did not end within" in r.message for r in caplog.records)
    finally:
        release.set()
