"""Outbound pools have a stated size, and a request that waits for a connection says so."""

from __future__ import annotations

import asyncio
import logging

import httpx
import pytest

from app.config import Settings
from app.metrics import AppMetrics
from llm.pool import PooledTransport, PoolWaits


class Chunks(httpx.AsyncByteStream):
    async def __aiter__(self):  # type: ignore[no-untyped-def]
        yield b"o"
        yield b"k"


class SlowTransport(httpx.AsyncBaseTransport):
    def __init__(self) -> None:
        self.in_flight = 0
        self.peak = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(0.05)
        finally:
            self.in_flight -= 1
        return httpx.Response(200, stream=Chunks())


async def test_a_full_pool_makes_requests_wait_and_records_the_wait(caplog: pytest.LogCaptureFixture) -> None:
    metrics = AppMetrics()
    waits = PoolWaits()
    waits.attach(metrics.pool_waited)
    inner = SlowTransport()
    transport = PooledTransport("llm", 2, inner, waits)
    with caplog.at_level(logging.WARNING, logger="agentchat.pool"):
        async with httpx.AsyncClient(transport=transport, base_url="http://model") as client:
            codes = await asyncio.gather(*(client.get("/x") for _ in range(5)))
    assert [r.status_code for r in codes] == [200] * 5
    assert inner.peak <= 2 and transport.in_flight == 0
    assert transport.waits == 3
    assert any("waited for an outbound connection" in r.message for r in caplog.records)
    body = metrics.exposition().decode()
    assert 'agentchat_pool_wait_seconds_count{pool="llm"} 3.0' in body


async def test_a_streamed_response_holds_its_connection_until_closed() -> None:
    transport = PooledTransport("llm", 1, SlowTransport())
    async with httpx.AsyncClient(transport=transport, base_url="http://model") as client:
        async with client.stream("GET", "/x") as response:
            async for _chunk in response.aiter_raw():
                assert transport.in_flight == 1  # mid-stream: the connection is held
                break
        assert transport.in_flight == 0  # closed early: released


def test_pool_sizes_are_settings() -> None:
    s = Settings.from_env({"AGENT_LLM_MAX_CONNECTIONS": "500", "AGENT_BACKEND_MAX_CONNECTIONS": "64"})
    assert (s.llm_max_connections, s.backend_max_connections) == (500, 64)
    assert Settings.from_env({}).llm_max_connections == 256
