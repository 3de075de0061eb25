"""Resume under load: N concurrent runs on one worker, each read by an EventSource-like
client that drops its connection after a few events and resumes once with Last-Event-ID.

What it measures, and why it is set up this way:
- The server runs in its own process (one uvicorn worker, the real app from
  ``create_app``), the clients in this one, so client parsing does not sit on the
  server's event loop. The model is a paced script inside the server: each run streams
  ``--chunks`` chunks ``--chunk-delay-ms`` apart (after a random start offset, so runs
  overlap instead of ticking in lock-step), and every chunk carries the CLOCK_MONOTONIC
  time at which the provider yielded it. The client stamps arrival with the same clock,
  so ``arrival - stamp`` is the delay the server (and the loopback socket and the client's
  parser) added to a token.
- Correctness: every client's events, first connection + resumed one, must be exactly
  ids 1..N with every chunk index once: zero lost, zero duplicated. A third connect after
  the end must be answered 204.
- Memory: on a fresh server, RSS is read from /proc before and after ``--runs`` held runs
  (running, no reader) and again after one idle follower attached to each, so
  ``per run`` and ``per idle follower`` are separate deltas.

Run from the repository root:  .venv/bin/python bench/resume.py [--runs 1000]
Writes bench/results/resume.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import platform
import random
import resource
import signal
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import orjson  # noqa: E402

from llm.provider import ProviderHealth  # noqa: E402
from llm.types import ChatRequest, ContentDelta, MessageComplete, MessageStart, StreamEvent, Usage  # noqa: E402
from tests.support.sse import SSEEvent, iter_sse  # noqa: E402

TARGETS = {"p99_delay_ms": 10.0, "idle_follower_kb": 100.0, "lost": 0, "duplicated": 0}
HOLD = "hold"
PACED = "paced"


# --- server side ------------------------------------------------------------------------------


@dataclass(slots=True)
class PacedProvider:
    """Streams ``chunks`` chunks ``delay_s`` apart, each stamped with its yield time;
    a ``hold`` question parks after ``message_start`` until the run is cancelled."""

    chunks: int
    delay_s: float
    name: str = "paced"
    model: str = "paced"

    async def stream_chat(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        question = request.messages[-1].content if request.messages else ""
        yield MessageStart()
        if question == HOLD:
            await asyncio.Event().wait()
        await asyncio.sleep(random.random() * self.delay_s)
        for i in range(self.chunks):
            await asyncio.sleep(self.delay_s)
            yield ContentDelta(f"{i}@{time.monotonic_ns()};")
        yield MessageComplete(stop_for_tool_use=False, usage=Usage(10, self.chunks), stop_reason="stop")

    async def health(self) -> ProviderHealth:
        return ProviderHealth(True, "paced benchmark provider")

    async def aclose(self) -> None:
        return None


def raise_fd_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def serve(
    port: int, db: str, chunks: int, delay_ms: float, profile: str | None, stats: str | None, gc_freeze: bool
) -> None:
    """The server process: the real app, one worker, a paced provider, no tools."""
    import uvicorn

    from agenttools.core.registry import ToolRegistry
    from app.config import Settings
    from app.factory import create_app

    raise_fd_limit()
    settings = Settings.from_env(
        {
            "AGENT_DB_PATH": db,
            "AGENT_MANDATORY_CONTEXTS": "none",
            "AGENT_INGEST_SAMPLE_KB": "false",
            "AGENT_EMBEDDER": "none",
            "AGENT_LLM_PROVIDER": "extractive",
            "OLLAMA_HOST": "http://127.0.0.1:9",
            "AGENT_MAX_RUNS_PER_USER": "1000000",
            "AGENT_REQUESTS_PER_MINUTE": "1000000",
        }
    )
    app = create_app(settings, provider=PacedProvider(chunks, delay_ms / 1000), registry=ToolRegistry(), embedder=None)
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", access_log=False, backlog=4096, timeout_graceful_shutdown=5
    )
    # uvicorn re-raises SIGTERM after its graceful shutdown; ignoring it afterwards lets
    # this function return normally (and write its stats and profile).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    profiler = None
    if profile is not None:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    try:
        asyncio.run(_serve(uvicorn.Server(config), stats, gc_freeze))
    finally:
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(profile)


async def _serve(server: Any, stats: str | None, gc_freeze: bool) -> None:
    monitor = LoopMonitor()
    monitor.start()
    task = asyncio.create_task(server.serve())
    try:
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        if gc_freeze:
            # The same policy `agentchat serve` applies once it is up.
            from app.cli.gcpolicy import tune_for_serving

            tune_for_serving()
        monitor.reset()
        await task
    finally:
        monitor.stop()
        if stats:
            Path(stats).write_text(json.dumps(monitor.report()))


class LoopMonitor:
    """How late the event loop wakes a 5 ms timer (every stall delays every stream), and
    how long garbage collections take (a full collection stops the loop)."""

    TICK_S = 0.005

    def __init__(self) -> None:
        self.lags_ms: list[float] = []
        self.gc_ms: dict[int, list[float]] = {0: [], 1: [], 2: []}
        self._gc_started = 0.0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        gc.callbacks.append(self._on_gc)
        self._task = asyncio.create_task(self._tick())

    def stop(self) -> None:
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._on_gc)
        if self._task is not None:
            self._task.cancel()

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            self.gc_ms[info["generation"]].append((time.perf_counter() - self._gc_started) * 1000)

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(self.TICK_S)
            self.lags_ms.append(max(0.0, (loop.time() - before - self.TICK_S) * 1000))

    def reset(self) -> None:
        self.lags_ms.clear()
        for v in self.gc_ms.values():
            v.clear()

    def report(self) -> dict[str, Any]:
        return {
            "loop_lag_ms": {
                "p50": round(percentile(self.lags_ms, 50), 2),
                "p99": round(percentile(self.lags_ms, 99), 2),
                "max": round(max(self.lags_ms, default=0.0), 2),
            },
            "gc_pauses": {
                f"gen{g}": {"count": len(v), "total_ms": round(sum(v), 1), "max_ms": round(max(v, default=0.0), 2)}
                for g, v in self.gc_ms.items()
            },
        }


# --- client side ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (from /proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def settled_rss_kb(pid: int) -> int:
    samples = []
    for _ in range(5):
        await asyncio.sleep(0.2)
        samples.append(rss_kb(pid))
    return int(statistics.median(samples))


@contextlib.asynccontextmanager
async def server_process(args: argparse.Namespace, stats: dict[str, Any]) -> AsyncIterator[tuple[str, int]]:
    """Run the server in a child process; on exit, its loop/GC stats land in ``stats``."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="bench-resume-") as tmp:
        profile = ["--profile", args.profile] if args.profile else []
        profile += ["--gc-tuned"] if args.gc_freeze else ["--no-gc-tuning"]
        proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--serve", *profile, "--stats", str(Path(tmp) / "stats.json"), "--port", str(port), "--db", str(Path(tmp) / "bench.sqlite3"),
            "--chunks", str(args.chunks), "--chunk-delay-ms", str(args.chunk_delay_ms),
        )
        base = f"http://127.0.0.1:{port}"
        try:
            async with httpx.AsyncClient(timeout=2) as probe:
                for _ in range(300):
                    with contextlib.suppress(httpx.HTTPError):
                        if (await probe.get(f"{base}/healthz")).status_code == 200:
                            break
                    await asyncio.sleep(0.05)
                else:
                    raise RuntimeError("the server did not start")
            yield base, proc.pid
        finally:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()
            with contextlib.suppress(OSError, ValueError):
                stats.update(json.loads((Path(tmp) / "stats.json").read_text()))


def client(connections: int) -> httpx.AsyncClient:
    """For the short POSTs (start, cancel). Kept small: httpcore's pool scans every
    connection on each request, so a pool sized for 2,000 would cost this process
    more CPU than the server spends on the request."""
    return httpx.AsyncClient(
        timeout=httpx.Timeout(120, connect=30, pool=120),
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
    )


async def start_run(http: httpx.AsyncClient, base: str, question: str) -> dict[str, Any]:
    response = await http.post(f"{base}/v1/agent/runs", json={"message": question, "context_type": "knowledge"})
    response.raise_for_status()
    return response.json()  # type: ignore[no-any-return]


@dataclass(slots=True)
class Received:
    id: str | None
    event: str
    data: str
    at_ns: int
    live: bool


@dataclass(slots=True)
class RunReport:
    events: list[Received] = field(default_factory=list)
    after_end_status: int = 0


async def chunked_lines(reader: asyncio.StreamReader) -> AsyncIterator[str]:
    """Text lines of a chunked HTTP/1.1 body."""
    pending = b""
    while True:
        size_line = await reader.readline()
        if not size_line:
            return
        size = int(size_line.strip().split(b";")[0] or b"0", 16)
        if size == 0:
            return
        pending += (await reader.readexactly(size + 2))[:-2]
        *lines, pending = pending.split(b"\n")
        for line in lines:
            yield line.decode()


@contextlib.asynccontextmanager
async def event_source(url: str, last_id: str | None = None) -> AsyncIterator[tuple[int, AsyncIterator[SSEEvent]]]:
    """One EventSource connection on its own socket: (status, events). Leaving the block
    drops the connection, as closing a tab does.

    A raw asyncio client rather than httpx: with a thousand streams, httpx's pool and
    per-chunk overhead saturate this process's core and the client, not the server,
    would set the measured delay. Parsing is still the browser-faithful ``iter_sse``.
    """
    target = httpx.URL(url)
    reader, writer = await asyncio.open_connection(target.host, target.port)
    try:
        head = f"GET {target.raw_path.decode()} HTTP/1.1\r\nHost: {target.host}:{target.port}\r\n"
        head += "Accept: text/event-stream\r\nCache-Control: no-cache\r\n"
        if last_id:
            head += f"Last-Event-ID: {last_id}\r\n"
        writer.write((head + "\r\n").encode())
        status = int((await reader.readline()).split()[1])
        headers: dict[str, str] = {}
        while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        if status == 200 and headers.get("transfer-encoding") != "chunked":
            raise RuntimeError(f"expected a chunked event stream, got {headers}")
        events = iter_sse(chunked_lines(reader)) if status == 200 else _nothing()
        async with contextlib.aclosing(events):
            yield status, events
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def _nothing() -> AsyncIterator[SSEEvent]:
    return
    yield


async def read(url: str, out: list[Received], *, last_id: str | None, stop_after: int | None) -> None:
    """Read one SSE connection; stop (drop the connection) after ``stop_after`` events."""
    connected_ns = time.monotonic_ns()
    seen = 0
    async with event_source(url, last_id) as (status, events):
        if status != 200:
            raise RuntimeError(f"GET events answered {status}")
        async for ev in events:
            now = time.monotonic_ns()
            if ev.event == "heartbeat":
                continue
            live = True
            if ev.event == "content_chunk":
                stamp = int(orjson.loads(ev.data)["chunk"].split("@")[1].rstrip(";"))
                live = stamp >= connected_ns  # replayed chunks waited for the client, not the server
            out.append(Received(ev.id, ev.event, ev.data, now, live))
            seen += 1
            if ev.event == "message_complete" or (stop_after is not None and seen >= stop_after):
                return


async def one_run(http: httpx.AsyncClient, base: str, rng: random.Random, active: list[int]) -> RunReport:
    report = RunReport()
    created = await start_run(http, base, PACED)
    url = base + created["stream_url"]
    active[0] += 1
    active[1] = max(active[1], active[0])
    try:
        await read(url, report.events, last_id=None, stop_after=rng.randint(3, 9))
        await asyncio.sleep(rng.random() * 0.3)  # away while the run goes on
        if not report.events or report.events[-1].event != "message_complete":
            last = report.events[-1].id if report.events else None
            await read(url, report.events, last_id=last, stop_after=None)
    finally:
        active[0] -= 1
    async with event_source(url, report.events[-1].id) as (status, _):
        report.after_end_status = status
    return report


def check(report: RunReport, chunks: int) -> tuple[int, int, bool]:
    """(lost, duplicated, completed) for one client's concatenated events."""
    ids = [int(e.id) for e in report.events if e.id is not None]
    last = ids[-1] if ids else 0
    duplicated = len(ids) - len(set(ids))
    lost = len(set(range(1, last + 1)) - set(ids))
    indices = [int(orjson.loads(e.data)["chunk"].split("@")[0]) for e in report.events if e.event == "content_chunk"]
    duplicated += len(indices) - len(set(indices))
    lost += len(set(range(chunks)) - set(indices))
    final = report.events[-1] if report.events else None
    completed = final is not None and final.event == "message_complete" and orjson.loads(final.data)["status"] == "completed"
    return lost, duplicated, completed


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


async def bench_resume(args: argparse.Namespace) -> dict[str, Any]:
    server_stats: dict[str, Any] = {}
    client_monitor = LoopMonitor()
    async with server_process(args, server_stats) as (base, pid), client(64) as http:
        await asyncio.gather(*(start_run(http, base, PACED) for _ in range(5)))  # warm-up
        await asyncio.sleep(args.chunks * args.chunk_delay_ms / 1000 + 0.5)
        rss_before = await settled_rss_kb(pid)
        rng = random.Random(7)
        active = [0, 0]
        peak_rss = [rss_before]

        async def sample() -> None:
            while True:
                peak_rss[0] = max(peak_rss[0], rss_kb(pid))
                await asyncio.sleep(0.1)

        async def staggered(i: int) -> RunReport:
            await asyncio.sleep(i * args.ramp_s / args.runs)
            return await one_run(http, base, rng, active)

        sampler = asyncio.create_task(sample())
        client_monitor.start()
        cpu0, server_cpu0 = time.process_time(), cpu_s(pid)
        t0 = time.perf_counter()
        start_ns = time.monotonic_ns()
        reports = await asyncio.gather(*(staggered(i) for i in range(args.runs)))
        elapsed = time.perf_counter() - t0
        client_cpu, server_cpu = time.process_time() - cpu0, cpu_s(pid) - server_cpu0
        sampler.cancel()
        client_monitor.stop()

    lost = duplicated = incomplete = 0
    for r in reports:
        lo, du, ok = check(r, args.chunks)
        lost, duplicated, incomplete = lost + lo, duplicated + du, incomplete + (not ok)
    stamped = [
        (int(orjson.loads(e.data)["chunk"].split("@")[1].rstrip(";")), e.at_ns)
        for r in reports
        for e in r.events
        if e.event == "content_chunk" and e.live
    ]
    delays = [(at - stamp) / 1e6 for stamp, at in stamped]
    by_second: dict[int, list[float]] = {}
    for stamp, at in stamped:
        by_second.setdefault((stamp - start_ns) // 1_000_000_000, []).append((at - stamp) / 1e6)
    total_events = sum(len(r.events) for r in reports)
    return {
        "runs": args.runs,
        "peak_concurrent_runs_followed": active[1],
        "chunks_per_run": args.chunks,
        "chunk_delay_ms": args.chunk_delay_ms,
        "ramp_s": args.ramp_s,
        "server_gc_freeze": args.gc_freeze,
        "elapsed_s": round(elapsed, 2),
        "events_received": total_events,
        "events_per_s": round(total_events / elapsed, 1),
        "lost_events": lost,
        "duplicated_events": duplicated,
        "runs_not_completed": incomplete,
        "reconnect_after_end_204": sum(r.after_end_status == 204 for r in reports),
        "delay_ms": {
            "samples": len(delays),
            "p50": round(percentile(delays, 50), 3),
            "p90": round(percentile(delays, 90), 3),
            "p99": round(percentile(delays, 99), 3),
            "max": round(max(delays), 3) if delays else None,
        },
        "delay_ms_p99_by_second": {str(k): round(percentile(v, 99), 1) for k, v in sorted(by_second.items())},
        "server_rss_kb": {"before": rss_before, "peak": peak_rss[0]},
        "server_rss_kb_per_active_run": round((peak_rss[0] - rss_before) / args.runs, 1),
        "client_cpu_s": round(client_cpu, 2),
        "server_cpu_s": round(server_cpu, 2),
        "server_process": server_stats,
        "client_process": client_monitor.report(),
    }


async def bench_idle(args: argparse.Namespace) -> dict[str, Any]:
    """On a fresh server: RSS for held runs, then for one idle follower on each."""
    n = args.runs
    async with server_process(args, {}) as (base, pid), client(64) as http:
        await asyncio.gather(*(start_run(http, base, PACED) for _ in range(5)))
        await asyncio.sleep(args.chunks * args.chunk_delay_ms / 1000 + 0.5)
        rss0 = await settled_rss_kb(pid)
        gate = asyncio.Semaphore(100)

        async def held() -> dict[str, Any]:
            async with gate:
                return await start_run(http, base, HOLD)

        runs = await asyncio.gather(*(held() for _ in range(n)))
        rss1 = await settled_rss_kb(pid)

        attached = 0
        all_attached = asyncio.Event()

        async def follow(created: dict[str, Any]) -> list[str]:
            nonlocal attached
            seen: list[str] = []
            counted = False
            async with event_source(base + created["stream_url"]) as (_, events):
                async for ev in events:
                    seen.append(ev.event)
                    if not counted and ev.event == "message_start":
                        counted = True
                        attached += 1
                        if attached == n:
                            all_attached.set()
                    if ev.event == "message_complete":
                        break
            return seen

        followers = [asyncio.create_task(follow(r)) for r in runs]
        await asyncio.wait_for(all_attached.wait(), 120)
        rss2 = await settled_rss_kb(pid)

        async def cancel(created: dict[str, Any]) -> int:
            async with gate:
                return (await http.post(f"{base}/v1/agent/runs/{created['run_id']}/cancel")).status_code

        statuses = await asyncio.gather(*(cancel(r) for r in runs))
        seen = await asyncio.gather(*followers)
    return {
        "runs": n,
        "server_rss_kb": {"baseline": rss0, "held_runs": rss1, "held_runs_plus_idle_followers": rss2},
        "rss_kb_per_held_run": round((rss1 - rss0) / n, 1),
        "rss_kb_per_idle_follower": round((rss2 - rss1) / n, 1),
        "cancelled_ok": sum(s == 200 for s in statuses),
        "followers_saw_cancelled_end": sum(s[-1] == "message_complete" for s in seen),
    }


async def main(args: argparse.Namespace) -> None:
    fd_limit = raise_fd_limit()
    # The client's own start-up objects need not be walked by every full collection
    # (its stalls would be counted as server delay).
    gc.collect()
    gc.freeze()
    resume = await bench_resume(args)
    idle = await bench_idle(args) if not args.skip_idle else None
    result = {
        "benchmark": "resume",
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "fd_limit": fd_limit},
        "targets": TARGETS,
        "resume": resume,
        "idle_followers": idle,
        "meets_targets": {
            "zero_lost_and_duplicated": resume["lost_events"] == 0 and resume["duplicated_events"] == 0,
            "p99_delay": resume["delay_ms"]["p99"] <= TARGETS["p99_delay_ms"],
            "idle_follower_kb": None if idle is None else idle["rss_kb_per_idle_follower"] <= TARGETS["idle_follower_kb"],
        },
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--chunks", type=int, default=20)
    p.add_argument("--chunk-delay-ms", type=float, default=500.0)
    p.add_argument("--ramp-s", type=float, default=2.0, help="spread the run starts over this many seconds")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "resume.json"))
    p.add_argument("--profile", help="write a cProfile of the server process to this file")
    p.add_argument("--skip-idle", action="store_true", help="only the resume phase")
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--db", help=argparse.SUPPRESS)
    p.add_argument("--stats", help=argparse.SUPPRESS)
    p.add_argument(
        "--no-gc-tuning", dest="gc_freeze", action="store_false",
        help="leave the server's GC at CPython defaults instead of the serving policy of `agentchat serve`",
    )
    p.add_argument("--gc-tuned", dest="gc_freeze", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args()


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.serve:
        serve(
            arguments.port, arguments.db, arguments.chunks, arguments.chunk_delay_ms,
            arguments.profile, arguments.stats, arguments.gc_freeze,
        )
    else:
        asyncio.run(main(arguments))
