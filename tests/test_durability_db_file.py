"""The SQLite file changed under a running server process, during live runs.

Three faults, applied to the files of a server that is streaming runs:

- **removed**: the database, its ``-wal`` and ``-shm`` unlinked (what ``rm agent.sqlite3*``
  or a clean-up job does);
- **replaced**: another SQLite file moved over the database's path (a restore by rename);
- **shm_read_only**: the ``-shm`` replaced by a read-only copy of itself.

What must hold, for each:
- ``/readyz`` turns 503 with ``checks.db.ok`` false and says why;
- every live run ends loudly: its follower gets ``error`` (``storage_unavailable``)
  without an id, last, after contiguous ids, and no ``message_complete``: the run's
  ending (``error`` + ``message_complete`` failed) is not stored — the file is gone —
  so it is never shown under ids the log does not hold;
- a new run is refused with 503 ``storage_unavailable`` and ``Retry-After``;
- the process stays up, and never writes into the file now at the path: after
  *removed* no file appears there; after *replaced* the new file is byte for byte
  what was moved in, even after the server stopped;
- after *removed*, a restarted server says it is creating a new database.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import sqlite3
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.fakes.paced_ollama import run_body
from tests.support.procs import DEMO_AUTH, AgentServer, ToolStack, Trace, client, follow, start_run, tool_stack, until

pytestmark = pytest.mark.slow  # real server processes, database files changed under them

RUNS = 2
FILES = ("", "-wal", "-shm")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ToolStack]:
    """The paced model fake, the proxy and the backend, one for the module: each fault
    has a server and a database of its own, and its runs tags of their own."""
    async with tool_stack(tmp_path_factory.mktemp("tools"), tokens=400, pause_s=0.05) as tools:
        yield tools


def _remove(db: Path, workdir: Path) -> None:
    for suffix in FILES:
        Path(f"{db}{suffix}").unlink()


def _replace(db: Path, workdir: Path) -> None:
    other = workdir / "other.sqlite3"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE restored (note TEXT)")
    conn.execute("INSERT INTO restored VALUES ('moved in by the operator')")
    conn.commit()
    conn.close()
    os.replace(other, db)


def _shm_read_only(db: Path, workdir: Path) -> None:
    shm = Path(f"{db}-shm")
    copy = workdir / "copy-shm"
    copy.write_bytes(shm.read_bytes())
    copy.chmod(0o444)
    os.replace(copy, shm)


FAULTS = {"removed": _remove, "replaced": _replace, "shm_read_only": _shm_read_only}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _db_check(body: dict[str, Any] | None) -> dict[str, Any]:
    return ((body or {}).get("checks") or {}).get("db") or {}


@pytest.mark.asyncio(loop_scope="module")  # the module's stack is served in its loop
@pytest.mark.parametrize("fault", list(FAULTS))
async def test_a_database_file_changed_under_the_server_is_noticed_and_never_written(
    tmp_path: Path, stack: ToolStack, fault: str
) -> None:
    server = AgentServer(tmp_path, stack.agent_env())
    server.start()
    try:
        await server.wait_ready()  # ready before the fault: waited for, not probed once right after /healthz
        async with client() as http:
            traces = [Trace(tag=f"{fault}-{i}-{uuid.uuid4().hex[:6]}") for i in range(RUNS)]
            followers = []
            for trace in traces:
                status, body = await start_run(http, server.base, run_body(trace.tag))
                assert status == 201, body
                trace.stream_url = body["stream_url"]
                followers.append(
                    asyncio.create_task(follow(http, server.base, trace, deadline_s=120, reconnect=False))
                )
            await until(
                lambda: all(sum(n == "content_chunk" for n in t.names()) >= 3 for t in traces),
                "every run to stream",
                timeout=60,
            )
            assert all(t.outcome == "pending" for t in traces), "the runs ended before the fault"

            mark = server.mark()
            FAULTS[fault](server.db_path, tmp_path)
            moved_in = _sha256(server.db_path) if fault == "replaced" else None

            readiness: list[tuple[int, dict[str, Any] | None]] = []

            async def noticed() -> bool:
                readiness.append(await server.readyz(http))
                return readiness[-1][0] == 503 and _db_check(readiness[-1][1]).get("ok") is False

            for _ in range(300):
                if await noticed():
                    break
                await asyncio.sleep(0.05)
            assert readiness[-1][0] == 503, readiness[-3:]
            assert _db_check(readiness[-1][1])["detail"], readiness[-1]

            await asyncio.wait_for(asyncio.gather(*followers), timeout=90)

            refused = await http.post(
                f"{server.base}/v1/agent/runs", json=run_body(f"{fault}-after"), headers=DEMO_AUTH
            )
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"] == "storage_unavailable"
            assert refused.headers.get("retry-after")
            assert (await server.readyz(http))[0] == 503  # it stays unavailable
            assert server.running, server.tail()
            if fault == "removed":
                assert not server.db_path.exists(), "the running server created a new database file"

        # A graceful stop: closing the database must not write into the file either.
        server.send(signal.SIGTERM)
        assert await server.wait_exit(60) is not None, server.tail()
        log = server.text(since=mark)
        if fault == "replaced":  # not one byte written into the file moved in
            assert _sha256(server.db_path) == moved_in
            conn = sqlite3.connect(server.db_path)
            assert conn.execute("SELECT note FROM restored").fetchall() == [("moved in by the operator",)]
            conn.close()
        if fault == "removed":  # a restart starts afresh — and says so
            restart_mark = server.mark()
            await server.restart()
            assert "creating a new database" in server.text(since=restart_mark), server.tail()
    finally:
        server.close()

    for trace in traces:
        assert trace.outcome == "ended", (trace.tag, trace.outcome, trace.frames[-3:])
        ids = [f[0] for f in trace.frames[:-1]]
        assert ids == [str(i) for i in range(1, len(ids) + 1)], (trace.tag, ids)
        last_id, last_name, _ = trace.frames[-1]
        assert last_name == "error" and last_id is None, (trace.tag, trace.frames[-3:])
        assert trace.error_codes == ["storage_unavailable"], (trace.tag, trace.error_codes)
        assert "message_complete" not in trace.names(), (trace.tag, trace.names()[-4:])
    assert "the database file changed under the running server" in log, log[-3000:]
