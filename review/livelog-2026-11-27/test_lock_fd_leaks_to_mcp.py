"""Review repro: a --workers worker's inherited lock fd is inheritable (pass_fds clears
CLOEXEC) and uvloop's subprocess_exec does not close it, so an MCP stdio server (and anything
it starts) holds the database's writer lock. After the serve group has stopped cleanly, a
helper the MCP server started still holds it: the next serve waits for ever."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
from pathlib import Path

import httpx

from storage.sqlite.writer_lock import lock_path
from tests.support.procs import PYTHON, AgentServer, ManagedProcess, child_env, until
from tests.support.server import free_port

ROOT = "/work/wt_review_ll"


def _lock_is_free(path: Path) -> bool:
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


async def test_mcp_stdio_server_does_not_inherit_the_writer_lock(tmp_path: Path) -> None:
    db = tmp_path / "agent.sqlite3"
    script = tmp_path / "mcp.sh"
    script.write_text(
        "#!/bin/sh\n"
        f"ls -l /proc/$$/fd > '{tmp_path}/fds.'$$\n"
        # a helper a real MCP server may start (a browser, a language server, npx's node...)
        f"setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $! >> '{tmp_path}/helpers'\n"
        f"cd {ROOT} && exec {PYTHON} -m tests.fakes.mcp_server ops\n"
    )
    script.chmod(0o755)
    config = tmp_path / "mcp.toml"
    config.write_text(f'[servers.ops]\ncommand = "{script}"\n')
    env = {
        "AGENT_LLM_PROVIDER": "extractive", "AGENT_EMBEDDER": "none", "AGENT_INGEST_SAMPLE_KB": "false",
        "AGENT_AUTH": "none", "AGENT_DB_PATH": str(db), "AGENT_MCP_SERVERS": str(config),
    }
    port = free_port()
    argv = [PYTHON, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--no-backend"]
    group = ManagedProcess("group", [*argv, "--workers", "2"], child_env(env), tmp_path / "group.log")
    nxt = AgentServer(tmp_path, env, name="next")
    try:
        group.start()
        await until(lambda: len(group.grep("serving on")) >= 2 or not group.running, "both workers serving", 90)
        await until(lambda: len(list(tmp_path.glob("fds.*"))) >= 2, "both MCP servers started", 60)
        dumps = "\n".join(p.read_text() for p in tmp_path.glob("fds.*"))
        print(dumps)
        leaked = str(lock_path(db)) in dumps
        print("lock fd in the MCP server's fds:", leaked)
        group.send(signal.SIGTERM)
        print("group exit:", await group.wait_exit(60))
        free = _lock_is_free(lock_path(db))
        print("lock free after the serve group exited:", free)
        nxt.start()
        async with httpx.AsyncClient() as http:
            status = 0
            for _ in range(200):
                status, body = await nxt.readyz(http)
                if status == 200 or (status == 503 and body and "writer" in body.get("checks", {})):
                    break
                await asyncio.sleep(0.1)
            print("next serve /readyz:", status, body)
        assert not leaked and free and status == 200
    finally:
        group.close()
        nxt.close()
        with contextlib.suppress(FileNotFoundError):
            for pid in (tmp_path / "helpers").read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
