"""What the processes of one writer group start must not carry the group's lock or port
(``storage.sqlite.writer_lock``; second review of issue 23's live log), with real
``agentchat serve`` processes:

* an MCP stdio server started by a serving process (uvloop's ``subprocess_exec`` closes
  no inherited descriptor): a ``--workers`` worker's lock descriptor and listening socket
  came from ``pass_fds``, inheritable, and a lone serve's socket was made inheritable for
  ``--reload`` - a lingering MCP child (or a helper it started) held the lock after the
  group exited, and the next serve waited for ever;
* the serving child of ``serve --reload``: it held no lock, so a SIGKILL of the
  reloader left it serving and writing unlocked beside the next serve. It shares the
  reloader's lock now, and stops when the reloader dies.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import httpx
import pytest

from storage.sqlite.writer_lock import WriterLock, lock_path
from tests.support.procs import PYTHON, REPO, ManagedProcess, child_env, until
from tests.support.server import free_port

pytestmark = pytest.mark.slow  # real server processes

#: An MCP stdio server that first writes down every descriptor it was started with
#: (what each names, and the port of each TCP socket), then answers the protocol itself:
#: ``initialize`` (at 2025-06-18, a version the agent's client speaks), ``tools/list`` (one
#: tool), ``ping``, and "method not found" to anything else. The descriptors are the test's
#: point; a fake of the SDK's server (``tests.fakes.mcp_server``) cost ~1.6 CPU-s of
#: imports in each serving process's child, for the same ``MCP server connected``.
PROBE = """
import json, os, socket, sys
seen = []
for name in os.listdir("/proc/self/fd"):
    try:
        target = os.readlink(f"/proc/self/fd/{name}")
    except OSError:
        continue
    port = None
    if target.startswith("socket:"):
        try:
            s = socket.socket(fileno=os.dup(int(name)))
            if s.family in (socket.AF_INET, socket.AF_INET6):
                port = s.getsockname()[1]
            s.close()
        except OSError:
            pass
    seen.append({"fd": int(name), "target": target, "port": port})
final = os.path.join(sys.argv[1], f"fds.{os.getpid()}.json")
with open(final + ".tmp", "w") as out:
    json.dump(seen, out)
os.rename(final + ".tmp", final)  # whole when the test sees it

TOOL = {"name": "echo", "description": "Repeat the text back.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}
for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message or "method" not in message:
        continue  # a notification, or an answer to nothing this server asked
    method = message["method"]
    if method == "initialize":
        answer = {"result": {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                             "serverInfo": {"name": "fd-probe", "version": "1"}}}
    elif method == "tools/list":
        answer = {"result": {"tools": [TOOL]}}
    elif method == "ping":
        answer = {"result": {}}
    else:
        answer = {"error": {"code": -32601, "message": f"method not found: {method}"}}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], **answer}) + "\\n")
    sys.stdout.flush()
"""


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "AGENT_LLM_PROVIDER": "extractive",
        "AGENT_EMBEDDER": "none",
        "AGENT_INGEST_SAMPLE_KB": "false",
        "AGENT_AUTH": "none",
        "AGENT_DB_PATH": str(tmp_path / "agent.sqlite3"),
        **extra,
    }


async def _ready(port: int, proc: ManagedProcess, timeout: float = 90) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    async with httpx.AsyncClient() as http:
        while True:
            assert proc.running, proc.tail()
            try:
                if (await http.get(f"http://127.0.0.1:{port}/readyz", timeout=5)).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert asyncio.get_running_loop().time() < deadline, proc.tail()
            await asyncio.sleep(0.1)


@pytest.mark.parametrize("workers", [1, 2])
async def test_an_mcp_stdio_server_holds_neither_the_lock_nor_the_port(tmp_path: Path, workers: int) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    config = tmp_path / "mcp.toml"
    config.write_text(
        f'[servers.ops]\ncommand = "{PYTHON}"\nargs = [{json.dumps(str(probe))}, {json.dumps(str(tmp_path))}]\n'
        f"cwd = {json.dumps(str(REPO))}\n"
    )
    env = _env(tmp_path, AGENT_MCP_SERVERS=str(config))
    port = free_port()
    argv = [PYTHON, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--no-backend",
            "--workers", str(workers)]
    group = ManagedProcess("group", argv, child_env(env), tmp_path / "group.log")
    try:
        group.start()
        await until(lambda: len(list(tmp_path.glob("fds.*.json"))) >= workers or not group.running,
                    "each serving process's MCP server started", 90)
        dumps = [json.loads(p.read_text()) for p in tmp_path.glob("fds.*.json")]
        assert len(dumps) >= workers, group.tail()
        lock = str(lock_path(tmp_path / "agent.sqlite3"))
        for seen in dumps:
            assert not [d for d in seen if d["target"] == lock], seen
            assert not [d for d in seen if d["port"] == port], seen
        await _ready(port, group)
    finally:
        group.close()


def _spawned_child(parent: int) -> int:
    """The serving child of the ``--reload`` process ``parent`` (not its resource tracker)."""
    for raw in Path(f"/proc/{parent}/task/{parent}/children").read_text().split():
        cmdline = Path(f"/proc/{raw}/cmdline").read_bytes()
        if b"spawn_main" in cmdline:
            return int(raw)
    raise AssertionError(f"no serving child of {parent}")


def _alive(pid: int) -> bool:
    """Running, not a zombie (an orphan is reaped by whoever adopted it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")


def _fd_naming(pid: int, target: str) -> int | None:
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{name}") == target:
                return int(name)
        except OSError:
            continue
    return None


def _holders(target: str) -> list[tuple[int, str]]:
    """(pid, command line) of every process with ``target`` open: a failure's message."""
    found = []
    for raw in os.listdir("/proc"):
        if raw.isdigit():
            try:
                if _fd_naming(int(raw), target) is not None:
                    found.append((int(raw), Path(f"/proc/{raw}/cmdline").read_bytes().replace(b"\0", b" ").decode()))
            except OSError:
                continue
    return found


async def test_the_reload_child_shares_the_lock_and_stops_when_the_reloader_is_killed(tmp_path: Path) -> None:
    db = tmp_path / "agent.sqlite3"
    port = free_port()
    argv = [PYTHON, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--no-backend", "--reload"]
    dev = ManagedProcess("dev", argv, child_env(_env(tmp_path)), tmp_path / "dev.log")
    child = 0
    try:
        dev.start()
        await _ready(port, dev)
        child = _spawned_child(dev.pid)
        fd = _fd_naming(child, str(lock_path(db)))
        assert fd is not None, "the reload child does not share the reloader's lock"
        flags = int(Path(f"/proc/{child}/fdinfo/{fd}").read_text().split("flags:")[1].split()[0], 8)
        assert flags & os.O_CLOEXEC, "the child's lock descriptor is inheritable"
        await dev.kill()  # SIGKILL: the reloader runs no clean-up
        await until(lambda: not _alive(child), "the reload child stopping after its reloader", 60)
        # Free once both are gone (a process whose main thread shows as a zombie may
        # still be closing its other threads' descriptors: waited for, briefly).
        lock = WriterLock(db)
        try:
            await until(lock.try_acquire, "the lock free once the reloader and its child are gone", 30)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}: held by {_holders(str(lock_path(db)))}") from None
        lock.release()
    finally:
        dev.close()
        if child and _alive(child):
            os.kill(child, signal.SIGKILL)


async def test_the_reloader_locks_a_removed_lock_file_again(tmp_path: Path) -> None:
    """``serve --reload``'s reloader holds the lock, so it watches the lock file as a lone
    serve does (third review of issue 23: docs/scaling.md said so, nothing did): removed
    while held, the file is locked again, and a serve started afterwards would wait."""
    db = tmp_path / "agent.sqlite3"
    port = free_port()
    argv = [PYTHON, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--no-backend", "--reload"]
    dev = ManagedProcess("dev", argv, child_env(_env(tmp_path)), tmp_path / "dev.log")
    try:
        dev.start()
        await _ready(port, dev)
        lock_path(db).unlink()
        await until(lambda: bool(dev.grep("locked it again")) or not dev.running, "the reloader relocking", 60)
        assert dev.grep("locked it again"), dev.tail()
        assert not WriterLock(db).try_acquire(), "the removed lock file was not locked again"
        assert WriterLock(db).holder() == f"pid {dev.pid}"
        await _ready(port, dev)
    finally:
        dev.close()
