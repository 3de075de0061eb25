"""Per-token client CPU of a streamed model turn: the OpenAI-compatible provider
(``llm/openai.py``, through the ``openai`` SDK) beside Ollama's (``llm/ollama.py`` with
its lean reader ``llm/lean_http.py``), issue 23.

Both fakes (``tests/fakes/openai.py``, ``tests/fakes/ollama.py``: their documented wire
formats, no pause between tokens) run in a child process, so this process's CPU
(``time.process_time``) is the provider's alone: building the request, reading the
stream, parsing each line or SSE event into ``StreamEvent``s. Each provider streams
``--streams`` turns of ``--tokens`` (60) tokens and of one token, in alternated batches;
per token = (CPU of a long turn - CPU of a one-token turn) / (tokens - 1), per turn =
the one-token turn's CPU.

``--variants`` picks what is measured, alternated in the same run: ``ollama`` and
``openai`` (the providers on today's model pool, ``llm.pool.pooled_transport``), and the
Ollama provider over other transports behind the same gate (``llm.pool.PooledTransport``):
``ollama-httpcore`` (the model pool before ``H1Transport``: four httpx transports of 25,
httpcore's HTTP/1.1 and h11 on our asyncio network backend, ``llm.netstream``),
``ollama-aiohttp`` (``httpx_aiohttp.AiohttpTransport``, aiohttp's llhttp parser; only if
``httpx-aiohttp`` is importable), ``ollama-h1``
(``llm.h1transport.H1Transport``, httptools' parser on an asyncio protocol). The event
loop is uvloop's, as the server's (``--loop asyncio`` for the stdlib's). ``--pause-ms``
paces the Ollama fake, so each token reaches the client in a read of its own, as in a
served run. With ``--profile`` one more long batch per provider runs under ``cProfile``
and its time is split by the package the frames belong to.

Run from the repository root:  .venv/bin/python bench/provider_token_cpu.py
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from llm.netstream import lean_transport  # noqa: E402
from llm.ollama import OllamaProvider  # noqa: E402
from llm.openai import OpenAIProvider  # noqa: E402
from llm.pool import PooledTransport, pooled_transport  # noqa: E402
from llm.types import ChatRequest, ContentDelta, Message, StreamError  # noqa: E402

KEY = "sk-bench"
MODEL = "bench-model"


def _paced_ollama(tokens: int, pause_s: float) -> Any:
    """An ``/api/chat`` that streams pre-encoded NDJSON lines ``pause_s`` apart (each token
    its own write, as a model writes them), ``1`` line for a body whose last message says
    ``one``: the fake's CPU is never what is measured, and each token reaches the client
    in a read of its own, as in a served run."""
    import orjson
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    def line(i: int) -> bytes:
        return orjson.dumps(
            {"model": MODEL, "created_at": "2026-01-01T00:00:00Z",
             "message": {"role": "assistant", "content": f"tok{i} "}, "done": False}
        ) + b"\n"

    lines = [line(i) for i in range(tokens)]
    final = orjson.dumps(
        {"model": MODEL, "created_at": "2026-01-01T00:00:00Z", "message": {"role": "assistant", "content": ""},
         "done": True, "done_reason": "stop", "prompt_eval_count": 11, "eval_count": tokens}
    ) + b"\n"

    async def chat(request: Request) -> StreamingResponse:
        body = orjson.loads(await request.body())
        n = 1 if str(body["messages"][-1].get("content", "")) == "one" else tokens

        async def stream() -> Any:
            for i in range(n):
                await asyncio.sleep(pause_s)
                yield lines[i]
            yield final

        return StreamingResponse(stream(), media_type="application/x-ndjson")

    return Starlette(routes=[Route("/api/chat", chat, methods=["POST"])])


def _serve(tokens: int, pause_ms: float) -> None:
    """The child: both fakes on loopback; prints their URLs, serves until stdin closes.
    A body whose last message says ``one`` is answered with one token. With a pause, the
    Ollama fake is :func:`_paced_ollama`."""
    from tests.fakes import FakeOllama, Text, running_fake
    from tests.fakes.openai import FakeOpenAI

    def script(body: Any) -> list[Any]:
        last = str(body.get("messages", [{}])[-1].get("content", ""))
        n = 1 if last == "one" else tokens
        return [Text(f"tok{i} ") for i in range(n)]

    async def main() -> None:
        ollama_app = _paced_ollama(tokens, pause_ms / 1e3) if pause_ms > 0 else FakeOllama(script).app
        openai = FakeOpenAI(script, api_key=KEY)
        async with running_fake(ollama_app) as o_url, running_fake(openai.app) as a_url:
            print(o_url, a_url, flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

    asyncio.run(main())


async def _turn(provider: Any, words: str) -> int:
    tokens = 0
    async for event in provider.stream_chat(ChatRequest("You answer.", [Message("user", words)], max_tokens=256)):
        if isinstance(event, ContentDelta):
            tokens += 1
        elif isinstance(event, StreamError):
            raise RuntimeError(f"the fake failed a turn: {event}")
    return tokens


async def _batch(provider: Any, words: str, streams: int, concurrency: int) -> tuple[float, int]:
    """CPU seconds of ``streams`` turns (``concurrency`` at a time) and the tokens read."""
    sem = asyncio.Semaphore(concurrency)

    async def one() -> int:
        async with sem:
            return await _turn(provider, words)

    cpu0 = time.process_time()
    counts = await asyncio.wait_for(asyncio.gather(*(one() for _ in range(streams))), timeout=300)
    return time.process_time() - cpu0, sum(counts)


def _by_package(stats: pstats.Stats) -> dict[str, float]:
    """Own (tottime) seconds per package of the profiled frames."""
    out: dict[str, float] = defaultdict(float)
    for (filename, _line, _name), (_cc, _nc, tottime, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        path = filename.replace("\\", "/")
        if "site-packages/" in path:
            package = path.split("site-packages/", 1)[1].split("/", 1)[0]
        elif path.startswith(str(ROOT)):
            package = "ours: " + path[len(str(ROOT)) + 1 :].split("/", 1)[0]
        elif "asyncio" in path:
            package = "asyncio"
        elif path.startswith("<") or path == "~":
            package = "builtins"
        else:
            package = "stdlib"
        out[package] += tottime
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


async def measure(args: argparse.Namespace, o_url: str, a_url: str) -> dict[str, Any]:
    http = httpx.AsyncClient(timeout=httpx.Timeout(60, connect=10), transport=pooled_transport("llm", 100))
    providers: dict[str, Any] = {}
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
    for name in args.variants.split(","):
        if name == "ollama":
            providers[name] = OllamaProvider(o_url, MODEL, timeout=60, transport=pooled_transport("llm", 100))
        elif name == "openai":
            providers[name] = OpenAIProvider(a_url + "/v1", MODEL, api_key=KEY, timeout_s=60, http_client=http)
        elif name == "ollama-httpcore":
            # The model pool before H1Transport: four httpx transports of 25 (its shards).
            quarter = httpx.Limits(max_connections=25, max_keepalive_connections=25)
            shards: list[httpx.AsyncBaseTransport] = [lean_transport(limits=quarter) for _ in range(4)]
            providers[name] = OllamaProvider(o_url, MODEL, timeout=60, transport=PooledTransport("llm", 100, shards))
        elif name == "ollama-aiohttp":
            from httpx_aiohttp import AiohttpTransport

            inner: httpx.AsyncBaseTransport = AiohttpTransport(limits=limits)
            providers[name] = OllamaProvider(o_url, MODEL, timeout=60, transport=PooledTransport("llm", 100, inner))
        elif name == "ollama-h1":
            from llm.h1transport import H1Transport

            inner = H1Transport(limits=limits)
            providers[name] = OllamaProvider(o_url, MODEL, timeout=60, transport=PooledTransport("llm", 100, inner))
        else:
            raise SystemExit(f"unknown variant {name!r}")
    long_words = "many"
    try:
        for provider in providers.values():  # imports, connections
            await _batch(provider, long_words, 20, args.concurrency)
            await _batch(provider, "one", 20, args.concurrency)
        rows: dict[str, dict[str, list[float]]] = {k: {"long": [], "one": []} for k in providers}
        order = list(providers)
        for r in range(args.rounds):
            for name in order if r % 2 == 0 else order[::-1]:
                cpu, tokens = await _batch(providers[name], long_words, args.streams, args.concurrency)
                assert tokens == args.streams * args.tokens, (name, tokens)
                rows[name]["long"].append(cpu / args.streams)
                cpu, tokens = await _batch(providers[name], "one", args.streams, args.concurrency)
                assert tokens == args.streams, (name, tokens)
                rows[name]["one"].append(cpu / args.streams)
        out: dict[str, Any] = {}
        for name, row in rows.items():
            long_ms, one_ms = statistics.median(row["long"]) * 1e3, statistics.median(row["one"]) * 1e3
            out[name] = {
                "tokens": args.tokens,
                "long_turn_cpu_ms": round(long_ms, 3),
                "turn_of_1_token_cpu_ms": round(one_ms, 3),
                "per_token_cpu_us": round((long_ms - one_ms) * 1e3 / (args.tokens - 1), 1),
                "rounds_long_ms": [round(x * 1e3, 3) for x in row["long"]],
                "rounds_one_ms": [round(x * 1e3, 3) for x in row["one"]],
            }
        if args.profile:
            for name, provider in providers.items():
                profiler = cProfile.Profile()
                profiler.enable()
                await _batch(provider, long_words, args.streams, args.concurrency)
                profiler.disable()
                stats = pstats.Stats(profiler)
                total = sum(_by_package(stats).values())
                out[name]["profile_share_by_package"] = {
                    k: round(v / total, 3) for k, v in list(_by_package(stats).items())[:12]
                }
                print(f"\n--- {name}: top own time, {args.streams} turns of {args.tokens} tokens ---")
                stats.sort_stats("tottime").print_stats(15)
        return out
    finally:
        for provider in providers.values():
            await provider.aclose()
        await http.aclose()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=60)
    p.add_argument("--streams", type=int, default=100, help="turns per batch")
    p.add_argument("--concurrency", type=int, default=10, help="turns in flight at once")
    p.add_argument("--rounds", type=int, default=5, help="batches per provider and length, alternated")
    p.add_argument("--profile", action="store_true", help="one more batch per provider under cProfile")
    p.add_argument(
        "--pause-ms", type=float, default=0.0,
        help="the Ollama fake's pause between tokens (0: none, tokens written back to back)",
    )
    p.add_argument("--variants", default="ollama,openai", help="what to measure, alternated (see the docstring)")
    p.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop", help="this process's event loop")
    p.add_argument("--name", default="", help="also write bench/results/<name>.json")
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        _serve(args.tokens, args.pause_ms)
        return
    child = subprocess.Popen(
        [sys.executable, __file__, "--serve", "--tokens", str(args.tokens), "--pause-ms", str(args.pause_ms)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline().split()  # the child prints as soon as both fakes listen
        if len(line) != 2:
            raise SystemExit("the fakes did not start")
        load = os.getloadavg()
        if args.loop == "uvloop":
            import uvloop

            result = uvloop.run(measure(args, *line))
        else:
            result = asyncio.run(measure(args, *line))
        print()
        for name, row in result.items():
            print(
                f"{name:<15} turn of {args.tokens} tokens {row['long_turn_cpu_ms']:7.3f} ms  "
                f"turn of 1 token {row['turn_of_1_token_cpu_ms']:6.3f} ms  per token {row['per_token_cpu_us']:6.1f} us"
            )
            for package, share in row.get("profile_share_by_package", {}).items():
                print(f"    {package:<28} {share:6.1%}")
        after = os.getloadavg()
        print(f"load average before/after: {load} / {after}")
        if args.name:
            from bench._common import write_results

            settings = {k: getattr(args, k) for k in ("tokens", "streams", "concurrency", "rounds", "pause_ms", "loop")}
            path = write_results(
                args.name,
                {
                    "settings": settings,
                    "load_avg_1_5_15": {"before": [round(x, 2) for x in load], "after": [round(x, 2) for x in after]},
                    "variants": result,
                },
            )
            print(f"results: {path}")
    finally:
        if child.stdin is not None:
            child.stdin.close()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()


if __name__ == "__main__":
    main()
