"""The server side of bench/sse_overhead.py, run in its own process so its RSS is its own.

It serves the real app (scripted zero-latency or paced provider, no tools) and, on the
same server, ``POST /bare``: a plain sse-starlette endpoint emitting the same events.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import _common  # noqa: F401  (puts the repo root on sys.path)
import orjson
import uvicorn
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.routing import Route

from agenttools.core.registry import ToolRegistry
from app.config import Settings
from app.factory import create_app
from llm.provider import ProviderHealth
from llm.types import ChatRequest, ContentDelta, MessageComplete, MessageStart, StreamEvent, Usage


class PacedProvider:
    """Streams ``chunks`` text deltas, sleeping ``delay_s`` between them (0 = none)."""

    name = "bench"
    model = "bench"

    def __init__(self, chunks: int, delay_s: float) -> None:
        self.chunks, self.delay_s = chunks, delay_s

    async def stream_chat(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        yield MessageStart()
        for i in range(self.chunks):
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            yield ContentDelta(f"token{i} ")
        yield MessageComplete(stop_for_tool_use=False, usage=Usage(10, self.chunks))

    async def health(self) -> ProviderHealth:
        return ProviderHealth(True, "bench")

    async def aclose(self) -> None:
        return None


def bare_events(chunks: int) -> list[tuple[str, dict[str, object]]]:
    out: list[tuple[str, dict[str, object]]] = [
        ("run_started", {"run_id": "run_bare", "conversation_id": "conv_bare"}),
        ("tool_selection", {"context_type": "knowledge", "core": [], "rag": [], "fallback": "bench", "tools": []}),
        ("message_start", {"turn": 0}),
    ]
    out += [("content_chunk", {"chunk": f"token{i} "}) for i in range(chunks)]
    out.append(("message_complete", {"status": "completed", "run_id": "run_bare", "conversation_id": "conv_bare",
                                     "turns": 1, "usage": {"input_tokens": 10, "output_tokens": chunks}}))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--chunks", type=int, default=1000)
    ap.add_argument("--delay-ms", type=float, default=0.0)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="agentchat-bench-"))
    settings = Settings.from_env(
        {
            "AGENT_DB_PATH": str(tmp / "bench.sqlite3"),
            "AGENT_MANDATORY_CONTEXTS": "none",
            "AGENT_INGEST_SAMPLE_KB": "false",
            "AGENT_REQUESTS_PER_MINUTE": "1000000",
            "AGENT_MAX_RUNS_PER_USER": "100000",
        }
    )
    app = create_app(
        settings,
        provider=PacedProvider(args.chunks, args.delay_ms / 1000),
        registry=ToolRegistry(),
        embedder=None,
    )

    async def bare(request: Request) -> EventSourceResponse:
        await request.body()

        async def gen() -> AsyncIterator[ServerSentEvent]:
            for seq, (name, data) in enumerate(bare_events(args.chunks), start=1):
                if args.delay_ms and name == "content_chunk":
                    await asyncio.sleep(args.delay_ms / 1000)
                yield ServerSentEvent(data=orjson.dumps(data).decode(), event=name, id=str(seq))

        return EventSourceResponse(gen())

    app.router.routes.append(Route("/bare", bare, methods=["POST"]))
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False,
                limit_concurrency=None, backlog=4096)


if __name__ == "__main__":
    main()
