"""SSE overhead of /v1/agent/chat vs a bare sse-starlette endpoint, and 500 concurrent streams.

Part 1 (throughput, time to first byte): a zero-latency provider streams N content
chunks; the same server also exposes ``/bare``, an sse-starlette endpoint emitting the
same events. Requests alternate between the two in one run, so both see the same
machine state. Reported: events/s and TTFB for each, and their ratio/difference.

Part 2 (concurrency): a paced provider (a chunk every few ms) and 500 simultaneous
streams on one worker; every stream must complete with a well-formed
``message_complete``. Reported: errors, wall time, and the server process's peak RSS
above its idle baseline, per stream.

Run: ``.venv/bin/python bench/sse_overhead.py`` (figures in bench/results/sse_overhead.json).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import subprocess
import sys
import time

import _common
import httpx

from _common import rss_kb, summary, write_results
from tests.support.server import free_port

BODY = {"message": "benchmark", "context_type": "knowledge", "context": {}}


async def start_server(chunks: int, delay_ms: float) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(_common.ROOT / "bench" / "sse_server.py"), "--port", str(port),
         "--chunks", str(chunks), "--delay-ms", str(delay_ms)],
        cwd=_common.ROOT,
    )
    base = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient() as client:
        for _ in range(300):
            try:
                if (await client.get(f"{base}/healthz")).status_code == 200:
                    return proc, base
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.05)
    proc.kill()
    raise RuntimeError("bench server did not start")


async def one_stream(client: httpx.AsyncClient, url: str) -> tuple[float, float, int, bool]:
    """(ttfb_ms, total_ms, events, completed)"""
    started = time.perf_counter()
    ttfb = None
    events = 0
    completed = False
    async with client.stream("POST", url, json=BODY) as response:
        if response.status_code != 200:
            return float("nan"), float("nan"), 0, False
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                if ttfb is None:
                    ttfb = (time.perf_counter() - started) * 1000
                events += 1
            elif line.startswith("data: ") and '"status":"completed"' in line:
                completed = True
    total = (time.perf_counter() - started) * 1000
    return ttfb or total, total, events, completed


async def throughput(chunks: int, rounds: int) -> dict[str, object]:
    proc, base = await start_server(chunks, 0.0)
    try:
        async with httpx.AsyncClient(timeout=60) as client:
            for _ in range(3):  # warm-up both paths
                await one_stream(client, f"{base}/v1/agent/chat")
                await one_stream(client, f"{base}/bare")
            agent_ttfb, bare_ttfb, agent_rate, bare_rate = [], [], [], []
            for _ in range(rounds):
                for path, ttfbs, rates in (("/v1/agent/chat", agent_ttfb, agent_rate), ("/bare", bare_ttfb, bare_rate)):
                    ttfb, total, events, ok = await one_stream(client, base + path)
                    assert ok, f"{path} did not complete"
                    ttfbs.append(ttfb)
                    rates.append(events / (total / 1000))
    finally:
        proc.terminate()
        proc.wait(10)
    a, b = summary(agent_rate), summary(bare_rate)
    ta, tb = summary(agent_ttfb), summary(bare_ttfb)
    return {
        "chunks_per_stream": chunks,
        "rounds": rounds,
        "agent_events_per_s": a,
        "bare_events_per_s": b,
        "throughput_ratio_p50": round(a["p50"] / b["p50"], 3),
        "agent_ttfb_ms": ta,
        "bare_ttfb_ms": tb,
        "ttfb_added_ms_p50": round(ta["p50"] - tb["p50"], 3),
        "targets": {"throughput_ratio_min": 0.5, "ttfb_added_ms_max": 5.0},
    }


async def concurrency(streams: int, chunks: int, delay_ms: float) -> dict[str, object]:
    proc, base = await start_server(chunks, delay_ms)
    try:
        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=streams + 10)) as client:
            await one_stream(client, f"{base}/v1/agent/chat")
            baseline = rss_kb(proc.pid)
            peak = baseline
            stop = asyncio.Event()

            async def sample() -> None:
                nonlocal peak
                while not stop.is_set():
                    peak = max(peak, rss_kb(proc.pid))
                    await asyncio.sleep(0.02)

            sampler = asyncio.create_task(sample())
            started = time.perf_counter()
            results = await asyncio.gather(
                *(one_stream(client, f"{base}/v1/agent/chat") for _ in range(streams)), return_exceptions=True
            )
            wall = time.perf_counter() - started
            stop.set()
            await sampler
    finally:
        proc.terminate()
        proc.wait(10)
    errors = [r for r in results if isinstance(r, BaseException) or not r[3]]
    total_events = sum(r[2] for r in results if not isinstance(r, BaseException))
    return {
        "streams": streams,
        "chunks_per_stream": chunks,
        "chunk_interval_ms": delay_ms,
        "errors": len(errors),
        "error_samples": [repr(e)[:200] for e in errors[:3]],
        "wall_s": round(wall, 3),
        "events_per_s": round(total_events / wall, 1),
        "rss_baseline_kb": baseline,
        "rss_peak_kb": peak,
        "rss_per_stream_kb": round((peak - baseline) / streams, 1),
    }


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--streams", type=int, default=500)
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))
    tp = await throughput(args.chunks, args.rounds)
    print(f"throughput: agent {tp['agent_events_per_s']['p50']:.0f} ev/s vs bare "
          f"{tp['bare_events_per_s']['p50']:.0f} ev/s -> ratio {tp['throughput_ratio_p50']} (target >= 0.5)")
    print(f"ttfb p50: agent {tp['agent_ttfb_ms']['p50']:.2f} ms vs bare {tp['bare_ttfb_ms']['p50']:.2f} ms "
          f"-> added {tp['ttfb_added_ms_p50']} ms (target <= 5)")
    cc = await concurrency(args.streams, 40, 5.0)
    print(f"concurrency: {cc['streams']} streams, errors={cc['errors']}, wall {cc['wall_s']} s, "
          f"peak RSS +{cc['rss_peak_kb'] - cc['rss_baseline_kb']} KiB = {cc['rss_per_stream_kb']} KiB/stream")
    path = write_results("sse_overhead", {"throughput": tp, "concurrency": cc})
    print(f"wrote {path}")


if __name__ == "__main__":
    asyncio.run(main())
