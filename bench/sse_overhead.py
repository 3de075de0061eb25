"""SSE overhead of /v1/agent/chat vs a bare sse-starlette endpoint, and 500 concurrent streams.

Part 1 (throughput, time to first byte): a zero-latency provider streams N content
chunks; the same server also exposes ``/bare``, an sse-starlette endpoint emitting the
same events. Requests rotate between the native chat, the bare endpoint, the
OpenAI-compatible stream (``/v1/chat/completions``, ``stream: true``) and the AI SDK UI
message stream (``/v1/agent/ui-stream``) in one run, so all see the same machine state.
Reported per column: frames/s (each column counts the frames it receives: native
events, ``chat.completion.chunk``s, UI chunks — about the same number per run), time to
the first byte and to the first answer text, and each face's ratio to / time added
over the native stream.

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
import uuid
from typing import Any

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


def chat_body() -> dict[str, Any]:
    return BODY


def openai_body() -> dict[str, Any]:
    return {"model": "agentchat-knowledge", "messages": [{"role": "user", "content": "benchmark"}], "stream": True}


def ui_body() -> dict[str, Any]:
    # A fresh chat each time, as the native chat starts a fresh conversation.
    message = {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "benchmark"}]}
    return {"id": f"bench-{uuid.uuid4().hex}", "messages": [message], "trigger": "submit-message"}


#: column → (path, body, the marker of a completed stream, the marker of answer text)
COLUMNS: dict[str, tuple[str, Any, str, str]] = {
    "agent": ("/v1/agent/chat", chat_body, '"status":"completed"', '"chunk":"'),
    "bare": ("/bare", chat_body, '"status":"completed"', '"chunk":"'),
    "openai": ("/v1/chat/completions", openai_body, '"finish_reason":"stop"', '"content":"token'),
    "ui": ("/v1/agent/ui-stream", ui_body, '"finishReason":"stop"', '"type":"text-delta"'),
}


async def one_stream(
    client: httpx.AsyncClient, base: str, column: str = "agent"
) -> tuple[float, float, int, bool, float]:
    """(ttfb_ms, total_ms, frames, completed, first_text_ms): frames are ``data:`` lines."""
    path, body, done_marker, text_marker = COLUMNS[column]
    started = time.perf_counter()
    ttfb = first_text = None
    frames = 0
    completed = False
    async with client.stream("POST", base + path, json=body()) as response:
        if response.status_code != 200:
            return float("nan"), float("nan"), 0, False, float("nan")
        async for line in response.aiter_lines():
            if ttfb is None:
                ttfb = (time.perf_counter() - started) * 1000
            if line.startswith("data: "):
                frames += 1
                if first_text is None and text_marker in line:
                    first_text = (time.perf_counter() - started) * 1000
                if done_marker in line:
                    completed = True
    total = (time.perf_counter() - started) * 1000
    return ttfb or total, total, frames, completed, first_text or total


async def throughput(chunks: int, rounds: int) -> dict[str, object]:
    proc, base = await start_server(chunks, 0.0)
    ttfb: dict[str, list[float]] = {c: [] for c in COLUMNS}
    rate: dict[str, list[float]] = {c: [] for c in COLUMNS}
    text: dict[str, list[float]] = {c: [] for c in COLUMNS}
    frames: dict[str, int] = {}
    try:
        async with httpx.AsyncClient(timeout=60) as client:
            for _ in range(3):  # warm-up every path
                for column in COLUMNS:
                    await one_stream(client, base, column)
            for _ in range(rounds):
                for column in COLUMNS:
                    first, total, n, ok, first_text = await one_stream(client, base, column)
                    assert ok, f"{column} did not complete"
                    ttfb[column].append(first)
                    text[column].append(first_text)
                    rate[column].append(n / (total / 1000))
                    frames[column] = n
    finally:
        proc.terminate()
        proc.wait(10)
    r = {c: summary(v) for c, v in rate.items()}
    t = {c: summary(v) for c, v in ttfb.items()}
    x = {c: summary(v) for c, v in text.items()}
    out: dict[str, object] = {
        "chunks_per_stream": chunks,
        "rounds": rounds,
        "frames_per_stream": frames,
        "agent_events_per_s": r["agent"],
        "bare_events_per_s": r["bare"],
        "throughput_ratio_p50": round(r["agent"]["p50"] / r["bare"]["p50"], 3),
        "agent_ttfb_ms": t["agent"],
        "bare_ttfb_ms": t["bare"],
        "ttfb_added_ms_p50": round(t["agent"]["p50"] - t["bare"]["p50"], 3),
        "targets": {"throughput_ratio_min": 0.5, "ttfb_added_ms_max": 5.0},
    }
    for face in ("openai", "ui"):
        out[f"{face}_events_per_s"] = r[face]
        out[f"{face}_ttfb_ms"] = t[face]
        out[f"{face}_vs_agent_throughput_ratio_p50"] = round(r[face]["p50"] / r["agent"]["p50"], 3)
        out[f"{face}_ttfb_added_vs_agent_ms_p50"] = round(t[face]["p50"] - t["agent"]["p50"], 3)
        out[f"{face}_first_text_added_vs_agent_ms_p50"] = round(x[face]["p50"] - x["agent"]["p50"], 3)
    out["first_text_ms"] = x
    return out


async def concurrency(streams: int, chunks: int, delay_ms: float) -> dict[str, object]:
    proc, base = await start_server(chunks, delay_ms)
    try:
        async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=streams + 10)) as client:
            await one_stream(client, base)
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
                *(one_stream(client, base) for _ in range(streams)), return_exceptions=True
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
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))
    tp = await throughput(args.chunks, args.rounds)
    print(f"throughput: agent {tp['agent_events_per_s']['p50']:.0f} ev/s vs bare "
          f"{tp['bare_events_per_s']['p50']:.0f} ev/s -> ratio {tp['throughput_ratio_p50']} (target >= 0.5)")
    print(f"ttfb p50: agent {tp['agent_ttfb_ms']['p50']:.2f} ms vs bare {tp['bare_ttfb_ms']['p50']:.2f} ms "
          f"-> added {tp['ttfb_added_ms_p50']} ms (target <= 5)")
    for face, label in (("openai", "OpenAI-compatible"), ("ui", "AI SDK UI stream")):
        print(f"{label}: {tp[f'{face}_events_per_s']['p50']:.0f} frames/s "  # type: ignore[index]
              f"({tp[f'{face}_vs_agent_throughput_ratio_p50']} x native), ttfb p50 "
              f"{tp[f'{face}_ttfb_ms']['p50']:.2f} ms ({tp[f'{face}_ttfb_added_vs_agent_ms_p50']:+} ms vs native), "  # type: ignore[index]
              f"first text {tp[f'{face}_first_text_added_vs_agent_ms_p50']:+} ms vs native")
    cc = await concurrency(args.streams, 40, 5.0)
    print(f"concurrency: {cc['streams']} streams, errors={cc['errors']}, wall {cc['wall_s']} s, "
          f"peak RSS +{cc['rss_peak_kb'] - cc['rss_baseline_kb']} KiB = {cc['rss_per_stream_kb']} KiB/stream")
    path = write_results("sse_overhead", {"throughput": tp, "concurrency": cc})
    print(f"wrote {path}")


if __name__ == "__main__":
    asyncio.run(main())
