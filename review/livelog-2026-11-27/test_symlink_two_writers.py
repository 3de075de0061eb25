"""Review repro: a second `serve` on the same SQLite file reached through a symlink
(AGENT_DB_PATH spelled differently) does not wait: its lock file is beside the symlink,
so it takes a lock nobody holds, becomes a second writer and claims the first's live runs."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from storage.sqlite.writer_lock import lock_path
from tests.fakes.paced_ollama import run_body
from tests.support.procs import AgentServer, Trace, client, follow, start_run, tool_stack, until


def _streaming(trace: Trace) -> bool:
    return any(name == "content_chunk" for _, name, _ in trace.frames)


async def test_second_serve_through_a_symlink_waits(tmp_path: Path) -> None:
    real_dir = tmp_path / "volume"
    real_dir.mkdir()
    link_dir = tmp_path / "app"
    link_dir.mkdir()
    db = real_dir / "agent.sqlite3"
    link = link_dir / "agent.sqlite3"
    async with tool_stack(tmp_path, tokens=60, pause_s=0.1) as stack:
        env = stack.agent_env()
        first = AgentServer(tmp_path, {**env, "AGENT_DB_PATH": str(db)}, name="first")
        second = AgentServer(tmp_path, {**env, "AGENT_DB_PATH": str(link)}, name="second")
        followers = []
        try:
            first.start()
            await first.wait_ready()
            link.symlink_to(db)
            async with client() as http:
                traces = [Trace(tag=f"s{i}-{uuid.uuid4().hex[:6]}") for i in range(2)]
                for trace in traces:
                    status, body = await start_run(http, first.base, run_body(trace.tag))
                    assert status == 201, (status, body)
                    trace.run_id, trace.stream_url = body["run_id"], body["stream_url"]
                    followers.append(asyncio.create_task(follow(http, first.base, trace, deadline_s=120)))
                await until(lambda: all(_streaming(t) for t in traces), "every run streaming", timeout=60)
                second.start()
                await second.wait_healthy()
                # Give it time to either wait or become ready (whichever it does).
                deadline = asyncio.get_running_loop().time() + 60
                status = 0
                while asyncio.get_running_loop().time() < deadline:
                    status, body = await second.readyz(http)
                    if status == 200 or (status == 503 and body and "writer" in body.get("checks", {})):
                        break
                    await asyncio.sleep(0.1)
                print("lock files:", lock_path(db), lock_path(link), lock_path(db).exists(), lock_path(link).exists())
                print("second /readyz:", status)
                print("second claimed:", second.grep("carrying on runs"))
                print("first errors:", first.grep("could not be stored", "storage write rejected", "lease"))
                if status == 200:
                    await asyncio.wait(followers, timeout=90)
                    for t in traces:
                        names = [n for _, n, _ in t.frames]
                        print("first's client", t.tag, "outcome", t.outcome, "last events", names[-3:],
                              "errors", [d for _, n, d in t.frames if n == "error"])
                    import sqlite3
                    con = sqlite3.connect(db)
                    print("dup (run_id, seq) in run_log:", con.execute(
                        "SELECT run_id, seq, COUNT(*) FROM run_log GROUP BY run_id, seq HAVING COUNT(*) > 1 LIMIT 5").fetchall())
                    print("runs:", con.execute("SELECT id, status FROM runs").fetchall())
                    con.close()
                assert status == 503, f"second serve through a symlink became a writer: /readyz {status}\n{second.tail()}"
        finally:
            for task in followers:
                task.cancel()
            await asyncio.gather(*followers, return_exceptions=True)
            first.close()
            second.close()
