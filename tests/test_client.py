"""The typed Python client (``client/``) against a real uvicorn server.

- start_run / stream / conversation / cancel / chat on the offline extractive provider:
  typed events, byte for byte the run's log, typed results, problem JSON in errors.
- A connection cut in the middle of a frame — by a loopback TCP proxy that closes the
  first connection part-way through the frame carrying a given chunk, while the run is
  parked at a gate — is resumed with ``Last-Event-ID``: no event lost or repeated, for
  ``GET …/events`` and for ``POST /v1/agent/chat``.
- A server that stays away ends the stream with ``StreamInterrupted`` after the bounded
  retries; a finished run read from its end answers 204 and the stream is simply empty.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

import events
from agenttools.core.registry import ToolRegistry
from app.config import Settings
from app.server.auth import sign_hs256
from client import AgentClient, APIError, StreamInterrupted
from tests.conftest import running_app
from tests.support.deadline import within
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn
from tests.support.server import free_port


def wire(run: Any) -> list[tuple[str, bytes]]:
    """The run's log as (event name, data bytes): what a faithful client must deliver."""
    return [(e.event, e.data.encode()) for e in run.events]


def seen(delivered: list[events.Event]) -> list[tuple[str, bytes]]:
    return [(e.name, e.to_json()) for e in delivered]


def text_of(delivered: list[events.Event]) -> str:
    return "".join(e.chunk for e in delivered if isinstance(e, events.ContentChunk))


async def until(predicate: Callable[[], bool], what: str, timeout: float = 10) -> None:
    """Wait for a condition; the timeout only guards against a hang."""
    try:
        async with asyncio.timeout(timeout):
            while not predicate():
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise TimeoutError(f"timed out waiting for {what}") from None


class CuttingProxy:
    """A loopback TCP proxy in front of the server. On its first connection it forwards the
    response only up to the middle of ``marker`` (a piece of one SSE frame) and then closes
    both sides — a connection dropped mid-frame; later connections pass through whole.
    ``requests`` keeps what each connection's client sent (its request head and body)."""

    def __init__(self, upstream: str, marker: bytes) -> None:
        host, _, port = upstream.removeprefix("http://").partition(":")
        self.upstream = (host, int(port))
        self.marker = marker
        self.requests: list[bytearray] = []
        self.cut = asyncio.Event()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = not self.requests
        sent = bytearray()
        self.requests.append(sent)
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)

        async def upstream() -> None:
            while data := await reader.read(65536):
                sent.extend(data)
                up_writer.write(data)
                await up_writer.drain()

        async def downstream() -> None:
            body = bytearray()
            while data := await up_reader.read(65536):
                if first:
                    at = (body + data).find(self.marker)
                    if at >= 0:
                        writer.write(data[: at - len(body) + len(self.marker) // 2])
                        await writer.drain()
                        self.cut.set()
                        return
                    body.extend(data)
                writer.write(data)
                await writer.drain()

        tasks = [asyncio.create_task(upstream()), asyncio.create_task(downstream())]
        with contextlib.suppress(ConnectionError):
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for w in (writer, up_writer):
            w.close()
            with contextlib.suppress(ConnectionError):
                await w.wait_closed()

    @asynccontextmanager
    async def serve(self) -> AsyncIterator[str]:
        server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            yield f"http://127.0.0.1:{port}"


def gated_provider() -> tuple[GatedProvider, Gate]:
    gate = Gate()
    return GatedProvider([GatedTurn(["one ", "two ", gate, "three ", "four"])]), gate


async def test_start_stream_conversation_and_cancel(settings: Settings) -> None:
    async with running_app(settings) as (base, app), AgentClient(base) as agent:
        run = await agent.start_run("How do I resume a stream?", "knowledge")
        delivered = [event async for event in agent.stream(run.run_id)]
        logged = app.state.services.runs.get(run.run_id)
        conversation = await agent.conversation(run.conversation_id)
        cancelled = await agent.cancel(run.run_id)
        tail = agent.stream(run.run_id, after=logged.last_seq)
        nothing = [event async for event in tail]
        with pytest.raises(APIError) as bad:
            await agent.start_run("hi", "nonsense")  # type: ignore[arg-type]
        with pytest.raises(APIError) as missing:
            await agent.conversation("conv_nobody")
    assert run.created and run.stream_url.startswith(f"/v1/agent/runs/{run.run_id}/events?token=")
    assert isinstance(delivered[0], events.RunStarted) and delivered[0].run_id == run.run_id
    assert isinstance(delivered[-1], events.MessageComplete) and delivered[-1].status == "completed"
    assert seen(delivered) == wire(logged)
    first = conversation.messages[0]
    assert (first.role, first.content, first.seq) == ("user", "How do I resume a stream?", 1)
    assert cancelled.run_id == run.run_id and cancelled.status == "completed"
    assert nothing == [] and tail.reconnects == 0
    assert bad.value.status == 400 and bad.value.error == "unknown_context_type"
    assert bad.value.problem["detail"].startswith("context_type must be one of")
    assert missing.value.status == 404 and missing.value.error == "not_found"


async def test_stream_takes_the_started_run_as_well_as_its_id(settings: Settings) -> None:
    """``stream(run)`` with what ``start_run`` returned reads the same events as
    ``stream(run.run_id)``; it raised ``TypeError`` inside ``urllib.parse.quote``."""
    async with running_app(settings) as (base, _app), AgentClient(base) as agent:
        run = await agent.start_run("How do I resume a stream?", "knowledge")
        by_run = [event async for event in agent.stream(run)]
        by_id = [event async for event in agent.stream(run.run_id)]
        with pytest.raises(TypeError, match="a run id or a StartedRun"):
            agent.stream(42)  # type: ignore[arg-type]
    assert isinstance(by_run[0], events.RunStarted) and by_run[0].run_id == run.run_id
    assert isinstance(by_run[-1], events.MessageComplete)
    assert by_run == by_id


async def test_chat_streams_typed_events(settings: Settings) -> None:
    async with running_app(settings) as (base, app), AgentClient(base) as agent:
        delivered = [event async for event in agent.chat("What is in the knowledge base?", "knowledge")]
        assert isinstance(delivered[-1], events.MessageComplete)
        logged = app.state.services.runs.get(delivered[-1].run_id)
    assert seen(delivered) == wire(logged)
    assert [e.name for e in delivered].count("message_complete") == 1


async def test_cancel_stops_a_live_run(settings: Settings) -> None:
    provider, gate = gated_provider()
    served = running_app(settings, provider=provider, registry=ToolRegistry(), embedder=None)
    async with served as (base, _app), AgentClient(base) as agent:
        run = await agent.start_run("count", "knowledge")
        await within(gate.reached.wait(), "the model turn to reach its gate")
        state = await agent.cancel(run.run_id)
        delivered = [event async for event in agent.stream(run.run_id)]
    assert state.status == "cancelled"
    assert isinstance(delivered[-1], events.MessageComplete) and delivered[-1].status == "cancelled"
    assert text_of(delivered) == "one two "


@pytest.mark.parametrize("route", ["stream", "chat"])
async def test_a_connection_cut_mid_frame_is_resumed_without_loss_or_repeats(settings: Settings, route: str) -> None:
    provider, gate = gated_provider()
    async with running_app(settings, provider=provider, registry=ToolRegistry(), embedder=None) as (base, app):
        proxy = CuttingProxy(base, marker=b'{"chunk":"two "}')
        async with proxy.serve() as via, AgentClient(via) as agent:
            if route == "stream":
                started = await agent.start_run("count", "workflow")  # a plain answer: no flow owed
                stream = agent.stream(started.run_id)
            else:
                stream = agent.chat("count", "workflow")

            async def read() -> list[events.Event]:
                return [event async for event in stream]

            reader = asyncio.create_task(read())
            await within(proxy.cut.wait(), "the proxy to cut the stream")
            await until(lambda: len(proxy.requests) >= 2, "the client to reconnect")
            gate.open()
            delivered = await asyncio.wait_for(reader, 30)
        assert isinstance(delivered[-1], events.MessageComplete)
        run = app.state.services.runs.get(delivered[-1].run_id)
    assert seen(delivered) == wire(run)  # every event once, in order
    assert text_of(delivered) == "one two three four"
    assert delivered[-1].status == "completed" and stream.last_event_id == run.last_seq
    assert stream.reconnects == 1 and len(proxy.requests) == 2
    two = next(e.seq for e in run.events if e.data == '{"chunk":"two "}')
    assert f"last-event-id: {two - 1}\r\n".encode() in bytes(proxy.requests[1]).lower()
    assert len(provider.requests) == 1  # the chat retry resumed its run, it did not start another


async def test_a_server_that_stays_away_ends_the_stream_after_bounded_retries() -> None:
    port = free_port()  # nothing listens there
    async with AgentClient(f"http://127.0.0.1:{port}", max_retries=3, backoff_s=0.01) as agent:
        stream = agent.stream("run_gone", after=7)
        with pytest.raises(StreamInterrupted) as stopped:
            async for _ in stream:
                pass
    assert stopped.value.attempts == 4 and stopped.value.last_event_id == 7
    assert "ConnectError" in stopped.value.cause and stream.reconnects == 3


async def test_a_shared_http_client_and_bearer_token_are_used(settings: Settings) -> None:
    jwt_settings = settings.with_(auth="jwt", jwt_secret="s" * 32)
    token = sign_hs256({"sub": "alice", "exp": int(time.time()) + 600}, "s" * 32)
    async with running_app(jwt_settings) as (base, _app), httpx.AsyncClient(timeout=30) as http:
        anonymous = AgentClient(base, http=http)
        with pytest.raises(APIError) as refused:
            await anonymous.start_run("hi", "knowledge")
        agent = AgentClient(base, token=token, http=http)
        run = await agent.start_run("hi", "knowledge")
        delivered = [event async for event in agent.stream(run.run_id)]
        await agent.aclose()  # not ours to close: the shared client keeps working
        assert (await http.get(f"{base}/healthz")).status_code == 200
    assert refused.value.status == 401 and refused.value.error == "unauthenticated"
    assert isinstance(delivered[-1], events.MessageComplete)
