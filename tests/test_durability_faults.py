"""Storage faults under a real server process, during live runs.

Two faults, each held until ``/readyz`` has noticed it and then a while longer (several
times ``AGENT_DB_WRITE_RETRY_S``), then cleared:

- **locked**: another process holds ``BEGIN EXCLUSIVE`` on the server's SQLite file;
- **unwritable**: ``prlimit --fsize=1`` on the server process, so every write past the
  first byte of any file fails with EFBIG (Python ignores SIGXFSZ).

What must hold:
- ``/readyz`` answers 503 with ``checks.db.ok`` false during the fault, 200 after it;
- every run that was live ends loudly: during the fault its follower gets ``error``
  (``storage_unavailable``) *without an id* and the stream ends — its ending is not
  stored yet, so it is not shown under ids another process may still give to other
  events; reconnecting by ``Last-Event-ID`` once the fault cleared, it gets the stored
  ending: ``error`` ``storage_unavailable``, then ``message_complete`` ``failed`` — one, last;
- nothing a follower saw under an id is missing from the log: once the fault has
  cleared, a replay from 0 — by a new process, after SIGKILL, so it can only come from
  the database — is exactly what the follower received with ids (1..N, no gap);
- the server works again: a new run completes.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.fakes.paced_ollama import run_body
from tests.support.paced_stack import paced_stack_fixtures
from tests.support.procs import (
    AgentServer,
    Frame,
    ToolStack,
    Trace,
    client,
    follow,
    prlimit_fsize,
    replay,
    start_run,
    until,
)
from tests.support.sqlite_lock import sqlite_file_locked

pytestmark = pytest.mark.slow  # real server processes under storage faults

RUNS = 3
RETRY_S = 1.0
HOLD_AFTER_NOTICED_S = 3 * RETRY_S
#: The fake model's pause between words once the fault has cleared: the pacing only keeps
#: the runs live through the fault; the run that shows the server works again need not crawl.
AFTER_FAULT_PAUSE_S = 0.005
PAUSE_S = 0.05


#: The module's paced tool stack, and each test's view of it paced again (tests/support/paced_stack.py).
module_stack, stack = paced_stack_fixtures(tokens=40, pause_s=PAUSE_S)

def database_locked(server: AgentServer) -> contextlib.AbstractAsyncContextManager[None]:
    """Another process holds the database's write lock until the block ends."""
    return sqlite_file_locked(server.db_path)


@contextlib.asynccontextmanager
async def database_unwritable(server: AgentServer) -> AsyncIterator[None]:
    assert server.pid is not None
    prlimit_fsize(server.pid, 1)
    try:
        yield
    finally:
        if server.running:
            prlimit_fsize(server.pid, None)


FAULTS = {"locked": database_locked, "unwritable": database_unwritable}


def _chunks(trace: Trace) -> int:
    return sum(1 for _, name, _ in trace.frames if name == "content_chunk")


def _db_ok(body: dict[str, Any] | None) -> Any:
    return (((body or {}).get("checks") or {}).get("db") or {}).get("ok")


@pytest.mark.asyncio(loop_scope="module")  # the module's stack is served in its loop
@pytest.mark.parametrize("fault", ["locked", "unwritable"])
async def test_a_storage_fault_ends_live_runs_loudly_and_loses_nothing(
    tmp_path: Path, stack: ToolStack, fault: str
) -> None:
    if fault == "unwritable" and shutil.which("prlimit") is None:
        pytest.skip("needs prlimit (util-linux) to cap the server's file size")
    server = AgentServer(tmp_path, stack.agent_env(AGENT_DB_WRITE_RETRY_S=str(RETRY_S)))
    server.start()
    try:
        await server.wait_ready()  # ready before the fault: waited for, not probed once right after /healthz
        async with client() as http:
            traces = [Trace(tag=f"{fault}-{i}-{uuid.uuid4().hex[:6]}") for i in range(RUNS)]
            followers = []
            for trace in traces:
                status, body = await start_run(http, server.base, run_body(trace.tag))
                assert status == 201, body
                trace.run_id, trace.stream_url = body["run_id"], body["stream_url"]
                followers.append(asyncio.create_task(follow(http, server.base, trace, deadline_s=120)))
            await until(lambda: all(_chunks(t) >= 3 for t in traces), "every run to stream", timeout=60)

            mark = server.mark()
            during: list[tuple[int, dict[str, Any] | None]] = []
            async with FAULTS[fault](server):
                noticed_at: float | None = None
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    during.append(await server.readyz(http))
                    if noticed_at is None and during[-1][0] == 503:
                        noticed_at = time.monotonic()
                    if noticed_at is not None and time.monotonic() - noticed_at > HOLD_AFTER_NOTICED_S:
                        break
                    await asyncio.sleep(0.1)

            after: list[tuple[int, dict[str, Any] | None]] = []
            with contextlib.suppress(TimeoutError):
                await server.wait_ready(timeout=30, history=after)
            _, pending = await asyncio.wait(followers, timeout=90)
            for task in pending:
                task.cancel()

            # The server works again.
            stack.fake.pause_s = AFTER_FAULT_PAUSE_S
            fresh = Trace(tag=f"{fault}-after-{uuid.uuid4().hex[:6]}")
            status, body = await start_run(http, server.base, run_body(fresh.tag))
            assert status == 201, body
            fresh.stream_url = body["stream_url"]
            await follow(http, server.base, fresh, deadline_s=90)

            # What the log holds: read by a new process, so nothing comes from the
            # old one's memory. SIGKILL: what followers saw must be durable already.
            await server.kill()
            await server.restart()
            stored: dict[str, list[Frame]] = {}
            for trace in traces:
                assert trace.stream_url is not None
                status, frames = await replay(http, server.base, trace.stream_url)
                stored[trace.tag] = frames if status == 200 else []
    finally:
        server.close()

    log = server.grep("ERROR", "storage", "Traceback", "database is locked", "EFBIG", "too large", since=mark)
    context = orjson.dumps(
        {"readyz_during": [(s, (b or {}).get("checks", {}).get("db")) for s, b in during[-5:]], "log": log[:25]},
        option=orjson.OPT_INDENT_2,
    ).decode()
    problems: list[str] = []
    if not any(s == 503 and _db_ok(b) is False for s, b in during):
        problems.append("/readyz never reported the fault (503 with checks.db.ok false)")
    if not after or after[-1][0] != 200:
        problems.append(f"/readyz did not recover after the fault: {after[-1:]}")
    for trace in traces:
        frames = [f for f in trace.frames if f[0] is not None]  # what the log is asked to hold
        unlogged = [(i, f) for i, f in enumerate(trace.frames) if f[0] is None]
        ids = [f[0] for f in frames]
        if not unlogged or any(f[1] != "error" or orjson.loads(f[2]).get("code") != "storage_unavailable"
                               for _, f in unlogged):
            problems.append(f"{trace.tag}: no id-less error storage_unavailable during the fault: {unlogged[:3]}")
        elif unlogged[0][0] > next(  # the first id-less error comes before the stored one
            (i for i, f in enumerate(trace.frames) if f[0] and f[1] == "error"),
            len(trace.frames),
        ):
            problems.append(f"{trace.tag}: the ending was shown with ids before it was stored: {trace.frames[-4:]}")
        if ids != [str(i) for i in range(1, len(frames) + 1)]:
            problems.append(f"{trace.tag}: ids not contiguous: {ids}")
        if trace.names().count("message_complete") != 1 or not frames or frames[-1][1] != "message_complete":
            problems.append(f"{trace.tag}: no single final message_complete ({trace.outcome}, {trace.names()[-4:]})")
        if trace.error_codes[-1:] != ["storage_unavailable"] or len(frames) < 2 or frames[-2][1] != "error":
            problems.append(
                f"{trace.tag}: did not end with error storage_unavailable: {trace.names()[-3:]} {trace.error_codes}"
            )
        if trace.final_status != "failed":
            problems.append(f"{trace.tag}: ended {trace.final_status}, not failed")
        if stored[trace.tag] != frames:
            missing = sorted(set(ids) - {f[0] for f in stored[trace.tag]}, key=lambda i: int(i or 0))
            problems.append(
                f"{trace.tag}: the follower saw {len(frames)} events, the log replays {len(stored[trace.tag])}; "
                f"ids missing from the log: {missing[:12]}"
            )
    if fresh.final_status != "completed":
        problems.append(
            f"a run after the fault did not complete: {fresh.outcome} {fresh.names()[-4:]} {fresh.error_codes}"
        )
    assert not problems, "\n".join(problems) + "\n" + context
