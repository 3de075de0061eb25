"""Review check: `serve --reload` - the reloader parent holds the writer lock, the serving
child (multiprocessing spawn) does not. SIGKILL the parent: does the child go on serving
(and writing) while a new serve takes the freed lock?"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import httpx

from tests.support.procs import PYTHON, AgentServer, ManagedProcess, child_env
from tests.support.server import free_port


async def test_reload_child_outlives_its_lock(tmp_path: Path) -> None:
    db = tmp_path / "agent.sqlite3"
    env = {"AGENT_LLM_PROVIDER": "extractive", "AGENT_EMBEDDER": "none", "AGENT_INGEST_SAMPLE_KB": "false",
           "AGENT_AUTH": "none", "AGENT_DB_PATH": str(db)}
    port = free_port()
    argv = [PYTHON, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--no-backend", "--reload"]
    dev = ManagedProcess("dev", argv, child_env(env), tmp_path / "dev.log")
    second = AgentServer(tmp_path, env, name="second")
    child_pids: list[int] = []
    try:
        dev.start()
        async with httpx.AsyncClient() as http:
            status = 0
            for _ in range(600):
                try:
                    status = (await http.get(f"http://127.0.0.1:{port}/readyz", timeout=5)).status_code
                except httpx.HTTPError:
                    status = 0
                if status == 200:
                    break
                await asyncio.sleep(0.1)
            assert status == 200, dev.tail()
            children = Path(f"/proc/{dev.pid}/task/{dev.pid}/children").read_text().split()
            child_pids = [int(c) for c in children]
            print("reloader", dev.pid, "children", child_pids)
            await dev.kill()
            await asyncio.sleep(1.0)  # review script only: let the kernel reap/notify
            alive = [p for p in child_pids if Path(f"/proc/{p}").exists()]
            try:
                st = (await http.get(f"http://127.0.0.1:{port}/readyz", timeout=5)).status_code
            except httpx.HTTPError:
                st = 0
            print("children alive after SIGKILL of the reloader:", alive, "orphan /readyz:", st)
            second.start()
            for _ in range(600):
                s2, body = await second.readyz(http)
                if s2 == 200 or (s2 == 503 and body and "writer" in body.get("checks", {})):
                    break
                await asyncio.sleep(0.1)
            print("second serve /readyz:", s2)
            assert not (alive and st == 200 and s2 == 200), "two writers: the orphaned reload child and the second serve"
    finally:
        dev.close()
        second.close()
        for p in child_pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
