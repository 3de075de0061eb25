"""The load harness of bench/capacity.py, bench/scaleout.py and bench/langgraph_peer.py:
the client side (the model fakes' process is ``bench/_fakes.py``).

Neither the model fakes nor the clients share an event loop with the server under test
(or with each other):

- **client workers** (``python bench/_load.py worker JOB OUT``): each runs its share of
  the runs on one event loop with raw asyncio sockets (httpx's per-chunk cost would
  make a thousand streams a client-side bottleneck) and writes every event it received,
  with its arrival time, to ``OUT``; it also reports its own loop lag, so a report can
  show the clients were not what held the tokens back.
- the **orchestrator** (the benchmark script): starts servers, builds the run specs,
  hands them to ``drive`` and judges the results.

A run spec (a dict, JSON-able): ``key``; ``at_s`` (start offset from the common t0);
``protocol`` ``agent`` (``POST /v1/agent/runs`` then ``GET stream_url``) or
``langgraph`` (``POST /threads``, ``POST /threads/{id}/runs`` with
``stream_resumable``, then ``GET …/runs/{id}/stream``); ``post`` (base URL the run is
created on); ``follow`` (base URLs to read it from, the first preferred, the next on a
connection failure); ``body``; ``drop_after`` (drop the first connection after this
many events and resume with ``Last-Event-ID``, or ``None``); ``away_s``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import sys
import time
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import orjson  # noqa: E402

from bench._common import raise_fd_limit, summary  # noqa: E402

PYTHON = sys.executable
T = TypeVar("T")
Frame = list[Any]
"""[id, event, data, arrival_ns, segment] of one received SSE event."""


# --- event-loop lag -----------------------------------------------------------------------------


class LoopLag:
    """How late the loop wakes a 10 ms timer: a stalled loop delays every stream it serves."""

    TICK_S = 0.01

    def __init__(self) -> None:
        self.lags_ms: list[float] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._tick())

    async def _tick(self) -> None:
        while True:  # perf_counter, not loop.time(): uvloop's clock has 1 ms steps
            before = time.perf_counter()
            await asyncio.sleep(self.TICK_S)
            self.lags_ms.append(max(0.0, (time.perf_counter() - before - self.TICK_S) * 1000))

    def stop(self) -> dict[str, Any]:
        if self._task is not None:
            self._task.cancel()
        report = {**summary(self.lags_ms), "max": round(max(self.lags_ms, default=0.0), 1)}
        self.lags_ms = []
        return report


# --- a raw EventSource ---------------------------------------------------------------------------


class Dropped(Exception):
    """The connection ended in the middle of the body."""


async def _lines(reader: asyncio.StreamReader, chunked: bool) -> AsyncIterator[bytes]:
    """Lines of an HTTP/1.1 body; ``Dropped`` if it ends before its terminating chunk."""
    pending = b""
    while True:
        if chunked:
            size_line = await reader.readline()
            if not size_line.endswith(b"\n"):
                raise Dropped
            size = int(size_line.strip().split(b";")[0] or b"0", 16)
            if size == 0:
                return
            try:
                data = (await reader.readexactly(size + 2))[:-2]
            except asyncio.IncompleteReadError as exc:
                raise Dropped from exc
        else:
            data = await reader.read(65536)
            if not data:
                return
        pending += data
        *lines, pending = pending.split(b"\n")
        for line in lines:
            yield line


SSEItem = tuple[int, tuple[str | None, str, str] | None]


async def sse(url: str, headers: dict[str, str]) -> AsyncGenerator[SSEItem, None]:
    """One GET of an event stream on its own socket: first ``(status, None)``, then
    ``(status, (id, event, data))`` per event. Closing the generator drops the connection."""
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    try:
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        head = f"GET {target} HTTP/1.1\r\nHost: {parts.netloc}\r\nAccept: text/event-stream\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        writer.write((head + "\r\n").encode())
        status_line = await reader.readline()
        if not status_line:
            raise Dropped
        status = int(status_line.split()[1])
        chunked = False
        length: int | None = None
        while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = header.decode("latin-1").partition(":")
            name, value = name.strip().lower(), value.strip().lower()
            chunked |= name == "transfer-encoding" and "chunked" in value
            if name == "content-length":
                length = int(value)
        yield status, None
        if status != 200:
            if length:
                await reader.readexactly(length)
            return
        event_id: str | None = None
        event, data = "message", list[str]()
        async for raw in _lines(reader, chunked):
            line = raw.rstrip(b"\r").decode()
            if not line:
                if data:
                    yield status, (event_id, event, "\n".join(data))
                event, data = "message", []
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "data":
                data.append(value)
            elif name == "event":
                event = value
            elif name == "id":
                event_id = value
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


# --- one run, as a client sees it -----------------------------------------------------------------


async def _create(http: httpx.AsyncClient, spec: dict[str, Any], out: dict[str, Any]) -> str | None:
    """Create the run; the path of its event stream, or None (``out['outcome']`` says why)."""
    base = spec["post"]
    deadline = time.monotonic() + 60
    while True:
        try:
            if spec["protocol"] == "agent":
                response = await http.post(f"{base}/v1/agent/runs", json=spec["body"],
                                           headers={"Authorization": "Bearer demo-alice"})
                if response.status_code == 201:
                    body = response.json()
                    out.update(run_id=body["run_id"], conversation_id=body["conversation_id"])
                    out["created_ns"] = time.monotonic_ns()
                    return str(body["stream_url"])
            else:
                response = await http.post(f"{base}/threads", json={})
                if response.status_code == 200:
                    thread = response.json()["thread_id"]
                    response = await http.post(f"{base}/threads/{thread}/runs", json={
                        "assistant_id": "paced", "input": spec["body"], "stream_mode": ["custom"],
                        "stream_resumable": True, "on_disconnect": "continue",
                    })
                    if response.status_code == 200:
                        out.update(run_id=response.json()["run_id"], thread_id=thread)
                        out["created_ns"] = time.monotonic_ns()
                        return f"/threads/{thread}/runs/{out['run_id']}/stream"
            out["create_status"] = response.status_code
            if response.status_code not in (429, 503) or time.monotonic() > deadline:
                out["outcome"] = f"create answered {response.status_code}: {response.text[:200]}"
                return None
        except httpx.TransportError as exc:
            out["create_status"] = type(exc).__name__
            if time.monotonic() > deadline:
                out["outcome"] = f"create failed: {exc!r}"
                return None
        await asyncio.sleep(0.1)


async def _follow(spec: dict[str, Any], path: str, out: dict[str, Any], deadline: float) -> None:
    """Read the stream like an EventSource until the run's end, reconnecting with
    ``Last-Event-ID`` (to the next ``follow`` base after a connection failure)."""
    agent = spec["protocol"] == "agent"
    frames: list[Frame] = out["frames"]
    bases: list[str] = spec["follow"]
    which = 0
    drop_after = spec.get("drop_after")
    while time.monotonic() < deadline:
        last = next((f[0] for f in reversed(frames) if f[0] is not None), None)
        headers = {"Last-Event-ID": last} if last is not None else ({} if agent else {"Last-Event-ID": "0"})
        segment = len(out["connects"])
        seen = 0
        try:
            stream = sse(bases[which] + path, headers)
            async with contextlib.aclosing(stream):
                async for status, frame in stream:
                    if frame is None:
                        out["connects"].append([status, time.monotonic_ns(), which])
                        if status == 204:
                            out["outcome"] = "no_terminal" if agent else "complete"
                            return
                        if status != 200:
                            break
                        continue
                    if frame[1] == "heartbeat":
                        continue
                    frames.append([frame[0], frame[1], frame[2], time.monotonic_ns(), segment])
                    seen += 1
                    if agent and frame[1] == "message_complete":
                        out["outcome"] = "complete"
                        return
                    if drop_after is not None and seen >= drop_after:
                        break
                else:
                    if not agent and out["connects"] and out["connects"][-1][0] == 200:
                        out["outcome"] = "complete"  # their stream ends cleanly with the run
                        return
            if drop_after is not None and seen >= drop_after:
                drop_after = None
                await asyncio.sleep(spec.get("away_s", 0.0))
                continue
            await asyncio.sleep(0.1)  # a 404/5xx answer, or a clean end without the terminal event
        except (OSError, Dropped, ValueError, IndexError) as exc:
            out["connects"].append([type(exc).__name__, time.monotonic_ns(), which])
            which = (which + 1) % len(bases)
            await asyncio.sleep(0.05)
    out["outcome"] = "timeout"


async def one_run(http: httpx.AsyncClient, spec: dict[str, Any], t0_ns: int, timeout_s: float) -> dict[str, Any]:
    await asyncio.sleep(max(0.0, (t0_ns - time.monotonic_ns()) / 1e9 + spec["at_s"]))
    out: dict[str, Any] = {"key": spec["key"], "frames": [], "connects": [], "outcome": "pending"}
    out["post_ns"] = time.monotonic_ns()
    try:
        path = await _create(http, spec, out)
        if path is not None:
            out["stream_path"] = path
            # The outer timeout also ends a stream that stays open with nothing but heartbeats.
            await asyncio.wait_for(_follow(spec, path, out, time.monotonic() + timeout_s), timeout_s + 5)
    except TimeoutError:
        out["outcome"] = "timeout"
    except Exception as exc:  # a client bug must not lose the other runs' results
        out["outcome"] = f"client error: {exc!r}"
    return out


async def _worker(job: dict[str, Any]) -> dict[str, Any]:
    raise_fd_limit()
    specs = job["specs"]
    lag = LoopLag()
    lag.start()
    cpu0 = time.process_time()
    limits = httpx.Limits(max_connections=max(100, len(specs)), max_keepalive_connections=100)
    async with httpx.AsyncClient(timeout=httpx.Timeout(60, connect=10, pool=120), limits=limits) as http:
        results = await asyncio.gather(*(one_run(http, s, job["t0_ns"], job["timeout_s"]) for s in specs))
    return {"runs": results, "loop_lag_ms": lag.stop(), "cpu_s": round(time.process_time() - cpu0, 2)}


def _worker_main(args: argparse.Namespace) -> None:
    import gc

    job = orjson.loads(Path(args.job).read_bytes())
    gc.freeze()  # start-up objects need not be walked by every full collection
    result = run_loop(_worker(job))
    Path(args.out).write_bytes(orjson.dumps(result))


def run_loop(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on uvloop when it is installed (uvicorn, and so the servers under
    test, pick it then too), else on asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


async def drive(
    specs: list[dict[str, Any]], workdir: Path, *, workers: int, timeout_s: float, name: str = "load",
    t0_ns: int | None = None,
) -> dict[str, Any]:
    """Run ``specs`` over ``workers`` client processes (round-robin); every run's result,
    and each worker's loop lag and CPU time."""
    workers = max(1, min(workers, len(specs) or 1))
    shares: list[list[dict[str, Any]]] = [specs[i::workers] for i in range(workers)]
    if t0_ns is None:
        t0_ns = time.monotonic_ns() + 2_000_000_000  # room for the workers to start
    procs = []
    for i, share in enumerate(shares):
        job, out = workdir / f"{name}-job-{i}.json", workdir / f"{name}-out-{i}.json"
        job.write_bytes(orjson.dumps({"specs": share, "t0_ns": t0_ns, "timeout_s": timeout_s}))
        out.unlink(missing_ok=True)
        proc = await asyncio.create_subprocess_exec(
            PYTHON, str(Path(__file__)), "worker", str(job), str(out), cwd=ROOT,
            stdout=asyncio.subprocess.DEVNULL, stderr=open(workdir / f"{name}-worker-{i}.log", "ab"),  # noqa: SIM115
        )
        procs.append((proc, out))
    runs: list[dict[str, Any]] = []
    clients: list[dict[str, Any]] = []
    try:
        for proc, out in procs:
            code = await proc.wait()
            if code != 0 or not out.exists():
                raise RuntimeError(f"a client worker failed ({code}); see {workdir}/{name}-worker-*.log")
            result = orjson.loads(out.read_bytes())
            runs.extend(result["runs"])
            clients.append({"loop_lag_ms": result["loop_lag_ms"], "cpu_s": result["cpu_s"],
                            "runs": len(result["runs"])})
    finally:
        for proc, _ in procs:  # interrupted (or one failed): the others go too
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    return {"t0_ns": t0_ns, "runs": runs, "clients": clients}


def spread(n: int, ramp_s: float, seed: int = 7) -> list[float]:
    """Start offsets of ``n`` runs evenly over ``ramp_s`` seconds (0: all at once)."""
    rng = random.Random(seed)
    return [i * ramp_s / max(1, n) + (rng.random() * ramp_s / max(1, n) if ramp_s else 0.0) for i in range(n)]


def main() -> None:
    p = argparse.ArgumentParser(description="a client worker of the load benchmarks (not run by hand)")
    sub = p.add_subparsers(dest="what", required=True)
    worker = sub.add_parser("worker")
    worker.add_argument("job")
    worker.add_argument("out")
    _worker_main(p.parse_args())


if __name__ == "__main__":
    main()
