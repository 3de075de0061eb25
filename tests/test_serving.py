"""``agentchat serve`` as an operator meets it, in a real subprocess: the address is
printed once the port is bound and the app started (with ``--reload`` too, where a child
process starts the app); a taken port is one line and exit code 1; ``--version``;
``--reload`` watches only the project's packages; connections that trickle their headers
or body are closed (408); a client that leaves mid-body is one INFO line, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

import httpx
import pytest

from app.cli.reloader import reload_config
from app.cli.serving import PACKAGES, PROJECT_ROOT
from app.config import Settings
from tests.support.deadline import reap, within
from tests.support.procs import child_env

SERVING = re.compile(r"agentchat: serving on http://127\.0\.0\.1:(\d+) ")


def offline_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return child_env(
        {
            "AGENT_DB_PATH": str(tmp_path / "agent.sqlite3"),
            "AGENT_INGEST_SAMPLE_KB": "false",
            "AGENT_EMBEDDER": "none",
            "AGENT_LLM_PROVIDER": "extractive",
            "OLLAMA_HOST": "http://127.0.0.1:9",
            **extra,
        }
    )


@dataclass
class Served:
    proc: asyncio.subprocess.Process
    lines: list[str] = field(default_factory=list)
    port: int = 0

    @property
    def log(self) -> str:
        return "".join(self.lines)


async def _pump(served: Served) -> None:
    assert served.proc.stdout is not None
    async for raw in served.proc.stdout:
        served.lines.append(raw.decode(errors="replace"))


@contextlib.asynccontextmanager
async def agentchat_serve(tmp_path: Path, *args: str, **env: str) -> AsyncIterator[Served]:
    """``agentchat serve --port 0 --no-backend`` until it prints where it serves."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", "0", "--no-backend", *args,
        env=offline_env(tmp_path, **env), cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )
    served = Served(proc)
    pump = asyncio.create_task(_pump(served))
    try:
        async with asyncio.timeout(60):
            while not (m := SERVING.search(served.log)):
                assert proc.returncode is None and not pump.done(), f"exited before serving:\n{served.log}"
                await asyncio.sleep(0.02)
        served.port = int(m.group(1))
        yield served
    finally:
        # `--reload` runs the server in a child of the reloader, which holds the same
        # stdout: reap() bounds the wait for the pipe to close as well.
        await reap(proc, "agentchat serve", grace=30)
        await within(pump, "the end of agentchat serve's output", 10)


@pytest.mark.slow  # real `agentchat serve` process
async def test_the_address_is_printed_once_bound_and_started(tmp_path: Path) -> None:
    async with agentchat_serve(tmp_path) as served:
        printed_at = len(served.lines)
        # At the moment the line is out, the port answers.
        async with httpx.AsyncClient(timeout=5) as client:
            health = await client.get(f"http://127.0.0.1:{served.port}/healthz")
    assert health.status_code == 200
    before = "".join(served.lines[:printed_at])
    assert "Application startup complete" in before  # started before it says so
    assert served.port != 0
    assert served.log.count("agentchat: serving on") == 1
    assert served.proc.returncode == 0
    assert "Traceback" not in served.log


@pytest.mark.slow  # real `agentchat serve --reload` process
async def test_with_reload_serving_is_said_once_the_app_answers(tmp_path: Path) -> None:
    """``make dev`` (``--reload``) printed "serving on" as soon as the reloader bound the
    port, seconds before its child had started the app: "starting" comes first now, and
    "serving on" once the app answers."""
    async with agentchat_serve(tmp_path, "--reload") as served:
        printed_at = len(served.lines)
        async with httpx.AsyncClient(timeout=5) as client:
            health = await client.get(f"http://127.0.0.1:{served.port}/healthz")
    assert health.status_code == 200
    before = "".join(served.lines[:printed_at])
    assert f"agentchat: starting on http://127.0.0.1:{served.port}  [reloading on changes]" in before
    assert "Application startup complete" in before  # the child started the app before the line
    assert before.index("agentchat: starting on") < before.index("Application startup complete")
    assert served.log.count("agentchat: serving on") == 1
    assert "Traceback" not in served.log


def test_the_reload_watch_says_when_the_app_never_answers() -> None:
    import threading

    from app.cli.reload_ready import announce_when_answering, probe_url

    said: list[str] = []
    answered = iter([False, False, True])
    url = probe_url("0.0.0.0", 8000)
    assert url == "http://127.0.0.1:8000/healthz" and probe_url("::", 1) == "http://[::1]:1/healthz"
    assert announce_when_answering(url, "serving", said.append, threading.Event(), probe=lambda _: next(answered))
    assert said == ["serving"]
    said.clear()
    assert not announce_when_answering(url, "serving", said.append, threading.Event(), deadline_s=0,
                                       probe=lambda _: False)
    assert len(said) == 1 and said[0].startswith(f"agentchat: the app has not answered {url} within 0 s")
    stopped = threading.Event()
    stopped.set()  # the reloader ended: nothing is said
    said.clear()
    assert not announce_when_answering(url, "serving", said.append, stopped, probe=lambda _: False)
    assert said == []


def test_the_reload_watch_asks_the_app_itself_not_a_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer with ``HTTP_PROXY`` in the environment (no ``NO_PROXY`` for loopback)
    never saw "serving on": the probe of ``127.0.0.1`` went to the proxy."""
    import http.server
    import threading

    from app.cli.reload_ready import answers

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    with socket.socket() as closed:  # a proxy address nothing listens on
        closed.bind(("127.0.0.1", 0))
        dead_proxy = f"http://127.0.0.1:{closed.getsockname()[1]}"
    app = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    thread = threading.Thread(target=app.serve_forever, daemon=True)
    thread.start()
    try:
        for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.setenv(name, dead_proxy)
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        assert answers(f"http://127.0.0.1:{app.server_port}/healthz", timeout_s=5)
    finally:
        app.shutdown()
        app.server_close()
        thread.join(5)


@pytest.mark.slow  # real `agentchat serve` processes
async def test_a_taken_port_is_one_line_and_exit_code_1(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--no-backend"],
            env=offline_env(tmp_path), cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60,
        )
        backend = subprocess.run(  # the reference backend's port (agent port + 1 unless --backend-port)
            [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", "0",
             "--backend-port", str(port)],
            env=offline_env(tmp_path), cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60,
        )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"agentchat: cannot listen on 127.0.0.1:{port}: the port is already in use "
        "(another agentchat? pick another with --port or AGENT_PORT)"
    ]
    assert done.stdout == ""
    assert backend.returncode == 1
    assert len(backend.stderr.splitlines()) == 1 and "already in use" in backend.stderr
    assert "--backend-port" in backend.stderr and "Traceback" not in backend.stderr


def test_version() -> None:
    done = subprocess.run([sys.executable, "-m", "app.cli", "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert done.stdout.strip() == f"agentchat {version('agentchat')}"


def test_reload_watches_only_the_project_packages(tmp_path: Path) -> None:
    settings = Settings.from_env({"AGENT_DB_PATH": str(tmp_path / "a.db")})
    config = reload_config("127.0.0.1", 8123, settings)
    watched = {Path(d) for d in config.reload_dirs}
    assert watched == {PROJECT_ROOT / name for name in PACKAGES}
    assert not any(".venv" in d.parts or d == PROJECT_ROOT for d in watched)
    assert config.should_reload and config.factory and config.header_timeout_s == settings.header_timeout_s


def test_reload_watches_every_project_package_the_app_imports() -> None:
    """A package the served app imports but ``--reload`` does not watch is edited without a
    restart (``events/``, the wire's event types, was left out): the app keeps the old code."""
    listing = (
        "import sys, app.factory; from pathlib import Path; root = Path(sys.argv[1]); "
        "print('\\n'.join(sorted({Path(m.__file__).resolve().relative_to(root).parts[0] "
        "for m in list(sys.modules.values()) if getattr(m, '__file__', None) "
        "and Path(m.__file__).resolve().is_relative_to(root) and '.venv' not in Path(m.__file__).parts})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", listing, str(PROJECT_ROOT)],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    imported = set(done.stdout.split())
    assert {"app", "events"} <= imported
    assert imported <= set(PACKAGES)


async def _read_until_closed(reader: asyncio.StreamReader) -> bytes:
    return await reader.read()  # until EOF


@pytest.mark.slow  # real `agentchat serve` process, timeouts waited out
async def test_slow_headers_and_bodies_are_timed_out_and_a_leaving_client_is_one_line(tmp_path: Path) -> None:
    async with agentchat_serve(tmp_path, AGENT_HEADER_TIMEOUT_S="0.5", AGENT_BODY_TIMEOUT_S="0.5") as served:
        port = served.port

        async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            return await asyncio.open_connection("127.0.0.1", port)

        # 1. Silent, and trickled headers: 408, then the connection is closed.
        silent_r, silent_w = await connect()
        trickle_r, trickle_w = await connect()
        trickle_w.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        await trickle_w.drain()
        async with asyncio.timeout(20):
            silent = await _read_until_closed(silent_r)
            trickled = await _read_until_closed(trickle_r)
        # 2. A body that never completes: 408 body_timeout, connection closed.
        body_r, body_w = await connect()
        body_w.write(b"POST /v1/agent/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"message\":")
        await body_w.drain()
        async with asyncio.timeout(20):
            slow_body = await _read_until_closed(body_r)
        # 3. A client that leaves mid-body.
        _gone_r, gone_w = await connect()
        gone_w.write(b"POST /v1/agent/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"message\":")
        await gone_w.drain()
        await asyncio.sleep(0.1)
        gone_w.transport.abort()
        # 4. Well-behaved clients are served as before (keep-alive included).
        async with httpx.AsyncClient(timeout=10) as client:
            for _ in range(2):
                assert (await client.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200
            async with asyncio.timeout(20):
                while "client left before sending its whole body" not in served.log:
                    await asyncio.sleep(0.05)
        for w in (silent_w, trickle_w, body_w):
            w.close()
    assert silent.startswith(b"HTTP/1.1 408 ") and trickled.startswith(b"HTTP/1.1 408 ")
    assert slow_body.startswith(b"HTTP/1.1 408 ") and b'"error":"body_timeout"' in slow_body
    assert b"connection: close" in slow_body.lower()
    log = served.log
    assert "Traceback" not in log and "Exception" not in log, log
    assert log.count("request headers too slow; closing") == 2
    assert log.count("request body too slow; closing") == 1
    left = [line for line in served.lines if "client left before sending its whole body" in line]
    assert len(left) == 1 and '"level":"INFO"' in left[0]  # `agentchat serve` logs JSON lines by default


@pytest.mark.parametrize("header_timeout", ["0", "-1", "abc"])
def test_bad_timeouts_stop_the_service_at_start(tmp_path: Path, header_timeout: str) -> None:
    with pytest.raises(Exception, match="AGENT_HEADER_TIMEOUT_S"):
        Settings.from_env({"AGENT_DB_PATH": str(tmp_path / "a.db"), "AGENT_HEADER_TIMEOUT_S": header_timeout})
