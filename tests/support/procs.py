"""Real processes, real signals: the harness of the durability tests and bench/chaos.py.

- ``AgentServer``: ``python -m app.cli serve`` as a child process on a fixed loopback port,
  so it can be SIGKILLed or SIGTERMed and started again on the same port and the same
  SQLite file (clients keep their URLs). Every process it starts carries a tag in its
  environment (``HARNESS_TAG``), so ``close()`` finds and SIGKILLs them all - the workers
  of ``serve --workers`` too, which sit in sessions of their own and outlive a killed
  supervisor when they are slow to drain or stopped - and fails if one survives. Its
  output (stdout and stderr, merged) goes through a pipe into ``<workdir>/<name>.log``
  and memory: a pipe, not a file, so a file-size limit put on the server (``prlimit
  --fsize``) cannot cut its own log.
- ``BackendServer``: the reference backend in its own process (``python -m backend``).
- ``CountingProxy``: a reverse proxy in the test process in front of the backend that
  counts every request by method and path and keeps the bodies of writes, so a test
  can say how many times one run's side-effecting call reached the backend.
- ``ToolStack``: the paced scripted Ollama fake (in the test process, so it outlives
  agent restarts), the backend and the proxy, plus the agent environment that uses them.
- Clients: ``start_run`` (POST /v1/agent/runs, retried while the server is down or
  shutting down), ``follow`` (an EventSource-like reader that reconnects with
  ``Last-Event-ID`` until it sees ``message_complete``), ``replay`` (the stored log from 0).

Nothing here asserts: tests and the benchmark judge the ``Trace`` objects.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import httpx
import orjson

from app.cli.children import die_with_parent
from tests.fakes.paced_ollama import SIDE_EFFECT_PATH, PacedOllama, side_effect_marker
from tests.support.deadline import reap, within
from tests.support.server import free_port, serve_app
from tests.support.sse import SSEEvent, iter_sse

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
DEMO_AUTH = {"Authorization": "Bearer demo-alice"}
#: A serve that reaches for nothing outside its database: the offline answerer, no
#: embedder, no sample knowledge base, and an Ollama address nothing listens on - for
#: the tests about processes, files and signals rather than answers.
OFFLINE_SERVE_ENV: Mapping[str, str] = {
    "AGENT_LLM_PROVIDER": "extractive",
    "AGENT_EMBEDDER": "none",
    "AGENT_INGEST_SAMPLE_KB": "false",
    "OLLAMA_HOST": "http://127.0.0.1:9",
}
"""A token the reference backend accepts; with ``AGENT_AUTH=none`` the agent forwards it."""

_ISOLATED_PREFIXES = ("AGENT_", "OLLAMA_", "GEMINI_", "PERPLEXITY_", "OPENAI_")

HARNESS_TAG = "AGENTCHAT_HARNESS_TAG"
"""The environment variable naming the ``ManagedProcess`` a process descends from:
inherited by every child (``serve --workers`` hands its environment on), it finds the
descendants that moved to sessions of their own or to init after their parent died."""

#: How long ``close()`` waits for the processes it SIGKILLed to be gone.
CLOSE_GUARD_S = 30.0

Frame = tuple[str | None, str, str]
"""(id, event, data) of one SSE event."""


def child_env(overrides: Mapping[str, str]) -> dict[str, str]:
    """This process's environment without any of the service's variables, plus ``overrides``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_ISOLATED_PREFIXES)}
    env.update({"PYTHONUNBUFFERED": "1", "OPENBLAS_NUM_THREADS": "1"})
    env.update({k: str(v) for k, v in overrides.items()})
    return env


async def agentchat(env: Mapping[str, str], *argv: str, cwd: Path = REPO) -> tuple[int, str, str]:
    """``python -m app.cli ARGV`` with exactly ``env``: its exit code, stdout and stderr
    apart (``run_cli`` interleaves them); reaped even when the 180 s guard ends the wait."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.cli", *argv, cwd=cwd, env=dict(env),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await within(proc.communicate(), f"agentchat {' '.join(argv)}", 180)
    finally:
        await reap(proc, "agentchat", grace=5)  # left running by a timeout otherwise
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def run_cli(args: Sequence[str], env: Mapping[str, str], *, timeout_s: float = 120.0) -> tuple[int, str]:
    """``python -m app.cli ARGS`` as a user runs it, with exactly ``env``: its exit code and
    its output (stdout and stderr interleaved); killed if it has not ended in ``timeout_s``."""
    proc = await asyncio.create_subprocess_exec(
        PYTHON, "-m", "app.cli", *args,
        cwd=REPO, env=dict(env), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace")


def answers_ctrl_c() -> None:
    """``preexec_fn`` of a child the test sends SIGINT: the default action back.

    A command started with ``&`` by a shell without job control (``make test &``, a CI
    step's background job) runs with SIGINT ignored, and every child inherits that: a
    Python child then never installs its Ctrl-C handler, and a test of what Ctrl-C does
    waits for a process that ignores it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def tagged_processes(tag: str) -> dict[int, str]:
    """Running processes of this user whose environment has ``HARNESS_TAG=tag`` (pid:
    command line). A zombie's environment reads empty, so the dead are not counted.
    Linux only (``/proc``); elsewhere nothing is found."""
    needle = f"{HARNESS_TAG}={tag}".encode()
    found: dict[int, str] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as environ:
                if needle not in environ.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                found[int(entry)] = cmdline.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError:  # gone meanwhile, or another user's
            continue
    return found


def _start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot), or None once it is gone or
    a zombie: with the pid, the identity of one process (pids are reused)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # After the command's closing parenthesis: state is field 3, starttime field 22.
    return None if fields[0] in ("Z", "X") else int(fields[19])


# --- processes ----------------------------------------------------------------------------------


#: How long ``ManagedProcess.close`` waits for its workers' directory to hold nothing live
#: (another group's on the same file may: then it is left to that group).
TIDY_GUARD_S = 3.0


class ManagedProcess:
    """One command that can be started, signalled and started again; output kept."""

    def __init__(self, name: str, argv: list[str], env: Mapping[str, str], log_path: Path) -> None:
        self.name = name
        self.argv = argv
        self.env = dict(env)
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._log: TextIO = open(log_path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - closed in close()
        #: This object's mark on every process it starts (``HARNESS_TAG``), unique in the machine.
        self.tag = f"{name}-{os.getpid()}-{uuid.uuid4().hex}"
        #: Set before ``start`` by a test that sends SIGINT: the child gets its default back (``answers_ctrl_c``).
        self.ctrl_c = False

    # -- life cycle --

    def start(self) -> int:
        if self.running:
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        self.starts += 1
        self._append(f"=== harness: start #{self.starts} of {self.name}\n")
        proc = subprocess.Popen(
            self.argv,
            cwd=REPO,
            env={**self.env, HARNESS_TAG: self.tag},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C in the terminal reaches pytest only
            preexec_fn=self._preexec(),
        )
        self.proc = proc
        threading.Thread(target=self._pump, args=(proc,), name=f"log-{self.name}", daemon=True).start()
        self._append(f"=== harness: {self.name} pid {proc.pid}\n")
        return proc.pid

    def _preexec(self) -> Callable[[], None] | None:
        """The child dies with this process (a worker killed by pytest-timeout takes it
        along) and, with ``ctrl_c``, answers SIGINT."""
        dies = die_with_parent(signal.SIGKILL)
        if not self.ctrl_c:
            return dies

        def both() -> None:
            if dies is not None:
                dies()
            answers_ctrl_c()

        return both

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    def send(self, sig: int) -> None:
        if not self.running:
            raise RuntimeError(f"{self.name} is not running (exit code {self.returncode})")
        assert self.proc is not None
        self._append(f"=== harness: sending {signal.Signals(sig).name} to {self.name} pid {self.proc.pid}\n")
        self.proc.send_signal(sig)

    async def wait_exit(self, timeout: float) -> int | None:
        """The exit code, or None if still running after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while self.proc is not None and self.proc.poll() is None:
            if time.monotonic() > deadline:
                return None
            await asyncio.sleep(0.02)
        code = self.returncode
        self._append(f"=== harness: {self.name} exited with {code}\n")
        return code

    async def kill(self) -> int | None:
        """SIGKILL and reap."""
        if self.running:
            self.send(signal.SIGKILL)
        return await self.wait_exit(30)

    def close(self) -> None:
        """SIGKILL the process and everything it started, wait until they are gone (at
        most ``CLOSE_GUARD_S``), close the log, remove what a killed ``--workers`` group on
        its ``AGENT_DB_PATH`` left in the temporary directory (``_tidy_runtime_dirs``);
        raises naming any process that survives.

        The descendants are found by the tag in their environment, not through the
        process tree: ``serve --workers``' workers run in sessions of their own (a
        process-group kill misses them) and once the supervisor is dead they belong to
        init. Killing only the supervisor left a stopped or slow-to-drain worker running
        for as long as it liked (one outlived the suite by 18 min)."""
        try:
            survivors = self._kill_everything(CLOSE_GUARD_S)
        finally:
            with self._lock:
                self._log.close()
            if "AGENT_DB_PATH" in self.env:
                self._tidy_runtime_dirs(Path(self.env["AGENT_DB_PATH"]))
        if survivors:
            raise RuntimeError(
                f"{self.name}: processes still running {CLOSE_GUARD_S:g} s after SIGKILL: "
                + "; ".join(f"pid {pid} {what}" for pid, what in survivors.items())
            )

    @staticmethod
    def _tidy_runtime_dirs(db_path: Path) -> None:
        """Remove what a killed ``--workers`` group on ``db_path`` leaves in the temporary
        directory, as the product's next start would (a test's group has none): the
        workers' meeting place on the file (``storage.sqlite.runtime_dir``: files of dead
        pids only, the directory once nothing live is left) and supervisors' directories
        nobody holds. Any process serving a file, not only an ``AgentServer``: a test's
        group started as a bare ``ManagedProcess`` left both (``tests/test_writer_lock.py``:
        three directories a run)."""
        import tempfile

        from app.cli.workers import remove_dead_runtime_directories
        from storage.sqlite.runtime_dir import runtime_dir, tidy_runtime_dir

        # A worker SIGKILLed while already exiting (the supervisor's death sent it
        # SIGTERM) may not show its tag any more, and holds the leader's lock until
        # it is gone: the directory goes once nothing there runs, within a bound.
        directory, deadline = runtime_dir(db_path), time.monotonic() + TIDY_GUARD_S
        while not tidy_runtime_dir(directory) and time.monotonic() < deadline:
            time.sleep(0.02)
        remove_dead_runtime_directories(Path(tempfile.gettempdir()))

    def _kill_everything(self, timeout: float) -> dict[int, str]:
        """SIGKILL the process's group and every tagged process until none is left;
        the ones left after ``timeout`` (pid: command line)."""
        deadline = time.monotonic() + timeout
        # Every process seen tagged, by (pid, start time), until it is gone: one that is
        # exiting no longer shows its environment but is still running.
        seen: dict[tuple[int, int], str] = {}
        while True:
            if self.proc is not None and self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.proc.pid, signal.SIGKILL)  # its own session: pgid == pid
                self.proc.poll()
            for pid, command in tagged_processes(self.tag).items():
                started = _start_time(pid)
                if started is not None:
                    seen[(pid, started)] = command
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            seen = {key: command for key, command in seen.items() if _start_time(key[0]) == key[1]}
            leader_done = self.proc is None or self.proc.poll() is not None
            if not seen and leader_done:
                return {}
            if time.monotonic() > deadline:
                live = {pid: command for (pid, _), command in seen.items()}
                if not leader_done:
                    assert self.proc is not None
                    live.setdefault(self.proc.pid, " ".join(self.argv))
                return live
            time.sleep(0.02)

    # -- output --

    def _pump(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            self._append(raw.decode("utf-8", "replace"))
        proc.stdout.close()

    def _append(self, line: str) -> None:
        with self._lock:
            self._lines.append(line)
            if not self._log.closed:
                self._log.write(line)

    def mark(self) -> int:
        with self._lock:
            return len(self._lines)

    def lines(self, since: int = 0) -> list[str]:
        with self._lock:
            return list(self._lines[since:])

    def text(self, since: int = 0) -> str:
        return "".join(self.lines(since))

    def tail(self, n: int = 60) -> str:
        return "".join(self.lines()[-n:])

    def grep(self, *needles: str, since: int = 0, limit: int = 20) -> list[str]:
        """Lines containing any of ``needles`` (for assertion messages and reports)."""
        found = [line.rstrip() for line in self.lines(since) if any(n in line for n in needles)]
        return found[:limit]


class AgentServer(ManagedProcess):
    """``agentchat serve`` on 127.0.0.1:``port`` with ``AGENT_DB_PATH`` in ``workdir``."""

    def __init__(self, workdir: Path, env: Mapping[str, str], *, port: int | None = None, name: str = "agent") -> None:
        self.port = port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.db_path = Path(env.get("AGENT_DB_PATH") or workdir / "agent.sqlite3")
        full = {"AGENT_DB_PATH": str(self.db_path), "AGENT_HOST": "127.0.0.1", "AGENT_PORT": str(self.port), **env}
        argv = [PYTHON, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(self.port), "--no-backend"]
        super().__init__(name, argv, child_env(full), workdir / f"{name}.log")

    async def wait_healthy(self, timeout: float = 60) -> None:
        """Until ``/healthz`` answers 200; fails at once if the process exits."""
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(timeout=2) as http:
            while True:
                if not self.running:
                    raise RuntimeError(f"{self.name} exited with {self.returncode} before it answered:\n{self.tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(f"{self.base}/healthz")).status_code == 200:
                        return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{self.name} did not answer /healthz within {timeout} s:\n{self.tail()}")
                await asyncio.sleep(0.05)

    async def readyz(self, http: httpx.AsyncClient) -> tuple[int, dict[str, Any] | None]:
        """(status, body) of ``/readyz``; status 0 when the server does not answer."""
        try:
            response = await http.get(f"{self.base}/readyz", timeout=5)
        except httpx.HTTPError:
            return 0, None
        try:
            body = response.json()
        except ValueError:
            body = None
        return response.status_code, body if isinstance(body, dict) else None

    async def wait_ready(
        self, timeout: float = 90, *, history: list[tuple[int, dict[str, Any] | None]] | None = None
    ) -> dict[str, Any]:
        """Poll ``/readyz`` until 200 (every answer goes into ``history``); its body."""
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient() as http:
            while True:
                if not self.running:
                    raise RuntimeError(f"{self.name} exited with {self.returncode} before it was ready:\n{self.tail()}")
                status, body = await self.readyz(http)
                if history is not None:
                    history.append((status, body))
                if status == 200 and body is not None:
                    return body
                if time.monotonic() > deadline:
                    last = f"{status} {body}"
                    raise TimeoutError(f"{self.name} not ready within {timeout} s (last: {last}):\n{self.tail()}")
                await asyncio.sleep(0.05)

    async def restart(self, timeout: float = 60) -> float:
        """Start again (same port, same database) and wait for /healthz; the monotonic
        time at which the new process was spawned."""
        spawned = time.monotonic()
        self.start()
        await self.wait_healthy(timeout)
        return spawned


class BackendServer(ManagedProcess):
    """The reference backend in its own process (``python -m backend``)."""

    def __init__(self, workdir: Path, *, port: int | None = None, name: str = "backend") -> None:
        self.port = port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        db = workdir / "backend.sqlite3"
        if (REPO / "backend" / "__main__.py").exists():
            argv = [PYTHON, "-m", "backend", "--host", "127.0.0.1", "--port", str(self.port), "--db", str(db),
                    "--log-level", "warning"]
        else:  # before the backend had its own entry point
            code = (
                "import sys, uvicorn; from backend.app import create_backend_app; "
                "uvicorn.run(create_backend_app(sys.argv[2]), host='127.0.0.1', port=int(sys.argv[1]), "
                "log_level='warning', access_log=False)"
            )
            argv = [PYTHON, "-c", code, str(self.port), str(db)]
        super().__init__(name, argv, child_env({}), workdir / f"{name}.log")

    async def wait_healthy(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(timeout=2) as http:
            while True:
                if not self.running:
                    raise RuntimeError(f"backend exited with {self.returncode}:\n{self.tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(f"{self.base}/healthz")).status_code == 200:
                        return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"backend did not answer within {timeout} s:\n{self.tail()}")
                await asyncio.sleep(0.05)


def prlimit_fsize(pid: int, limit: int | None) -> None:
    """Cap (or with ``None`` restore) the largest file offset process ``pid`` may write.

    Python ignores SIGXFSZ, so past the cap every write fails with EFBIG instead of
    killing the process: the way to make a live server's database unwritable.
    """
    # Only the soft limit moves: raising a hard limit back needs CAP_SYS_RESOURCE.
    soft = "unlimited" if limit is None else str(limit)
    subprocess.run(
        ["prlimit", "--pid", str(pid), f"--fsize={soft}:unlimited"], check=True, capture_output=True, timeout=30
    )


# --- the counting proxy -----------------------------------------------------------------------


@dataclass(slots=True)
class ProxiedRequest:
    method: str
    path: str
    body: bytes
    status: int
    at: float


@dataclass(slots=True)
class Hold:
    """Answer a matching request only once ``release`` is set (the backend has done it)."""

    marker: bytes
    reached: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)


class CountingProxy:
    """ASGI reverse proxy to ``upstream`` that records every request.

    Serve ``proxy`` (it is the ASGI app) with ``serve_app(proxy, lifespan="off")``.
    ``hold(marker)``: a request whose body contains ``marker`` reaches the backend, but its
    answer is held back until the hold is released — the window in which a tool has
    done its work and the agent does not know it yet.
    """

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.counts: Counter[tuple[str, str]] = Counter()
        self.requests: list[ProxiedRequest] = []
        self.holds: list[Hold] = []
        self._http: httpx.AsyncClient | None = None

    def hold(self, marker: bytes) -> Hold:
        held = Hold(marker)
        self.holds.append(held)
        return held

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] != "http":
            return
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=30)
        chunks: list[bytes] = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        method, path = scope["method"], scope["path"]
        query = scope.get("query_string", b"").decode("latin-1")
        url = self.upstream + scope.get("raw_path", path.encode()).decode("latin-1") + (f"?{query}" if query else "")
        skip = {b"host", b"content-length", b"connection", b"transfer-encoding"}
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"] if k.lower() not in skip]
        self.counts[(method, path)] += 1
        try:
            upstream = await self._http.request(method, url, content=body, headers=headers)
            status, content = upstream.status_code, upstream.content
            out_headers = [
                (k.encode("latin-1"), v.encode("latin-1"))
                for k, v in upstream.headers.items()
                if k.lower() not in {"content-length", "transfer-encoding", "connection", "content-encoding"}
            ]
        except httpx.HTTPError as exc:
            status, content = 502, orjson.dumps({"error": "bad_gateway", "detail": str(exc)})
            out_headers = [(b"content-type", b"application/json")]
        self.requests.append(ProxiedRequest(method, path, body, status, time.monotonic()))
        for held in self.holds:
            if held.marker in body:
                held.reached.set()
                await held.release.wait()
        out_headers.append((b"content-length", str(len(content)).encode()))
        with contextlib.suppress(OSError, RuntimeError):  # the agent may be gone by now
            await send({"type": "http.response.start", "status": status, "headers": out_headers})
            await send({"type": "http.response.body", "body": content})

    def count(self, method: str, path: str, marker: bytes | None = None) -> int:
        """Requests of ``method path`` (whose body contains ``marker``, when given)."""
        return sum(
            1 for r in self.requests if r.method == method and r.path == path and (marker is None or marker in r.body)
        )

    def side_effects(self, tag: str) -> int:
        """How many times run ``tag``'s side-effecting call reached the backend."""
        return self.count("POST", SIDE_EFFECT_PATH, side_effect_marker(tag))


# --- the stack a tool-using run needs -------------------------------------------------------------


@dataclass(slots=True)
class ToolStack:
    fake: PacedOllama
    ollama_url: str
    backend: BackendServer
    proxy: CountingProxy
    proxy_url: str

    def agent_env(self, **extra: str) -> dict[str, str]:
        """Agent settings for runs that walk the fake's flow against the proxied backend."""
        env = {
            "AGENT_LLM_PROVIDER": "ollama",
            "OLLAMA_HOST": self.ollama_url,
            "OLLAMA_MODEL": self.fake.model,
            "AGENT_EMBEDDER": "none",
            "AGENT_BACKEND_URL": self.proxy_url,
            "AGENT_INGEST_SAMPLE_KB": "false",
            "AGENT_DB_WRITE_RETRY_S": "1",
            "AGENT_SHUTDOWN_GRACE_S": "1",
            "AGENT_MAX_RUNS_PER_USER": "100000",
            "AGENT_REQUESTS_PER_MINUTE": "1000000",
            "AGENT_HEARTBEAT_S": "1",
        }
        env.update(extra)
        return env


@contextlib.asynccontextmanager
async def tool_stack(workdir: Path, *, tokens: int = 20, pause_s: float = 0.05) -> AsyncIterator[ToolStack]:
    """The paced fake and the proxy served in this event loop, the backend in its own process."""
    fake = PacedOllama(tokens=tokens, pause_s=pause_s)
    backend = BackendServer(workdir)
    backend.start()
    try:
        await backend.wait_healthy()
        proxy = CountingProxy(backend.base)
        async with serve_app(fake.app) as ollama_url, serve_app(proxy, lifespan="off") as proxy_url:
            try:
                yield ToolStack(fake, ollama_url, backend, proxy, proxy_url)
            finally:
                await proxy.aclose()
    finally:
        backend.close()


# --- clients ----------------------------------------------------------------------------------------


@dataclass(slots=True)
class Trace:
    """Everything one client saw of one run, connection by connection."""

    tag: str
    run_id: str | None = None
    conversation_id: str | None = None
    stream_url: str | None = None
    start_status: int | None = None
    segments: list[list[Frame]] = field(default_factory=list)
    received_at: list[float] = field(default_factory=list)
    """Monotonic arrival time of each frame of ``frames`` (same order)."""
    connects: list[str] = field(default_factory=list)
    """One entry per attempt to read the stream: an HTTP status or an error name."""
    ends: list[str] = field(default_factory=list)
    """How each segment ended: ``message_complete``, ``eof`` (a clean end of the body)
    or the name of the transport error (a dropped connection)."""
    outcome: str = "pending"
    """``complete`` (saw message_complete), ``no_terminal`` (204 before a message_complete),
    ``ended`` (a clean end after an id-less frame, read with ``reconnect=False``),
    ``not_found``, ``timeout`` or ``error: …``."""

    @property
    def frames(self) -> list[Frame]:
        return [f for seg in self.segments for f in seg]

    @property
    def last_id(self) -> int:
        for fid, _, _ in reversed(self.frames):
            if fid is not None and fid.isdigit():
                return int(fid)
        return 0

    def names(self) -> list[str]:
        return [name for _, name, _ in self.frames]

    def data_of(self, name: str) -> list[Any]:
        return [orjson.loads(d) for _, n, d in self.frames if n == name]

    @property
    def final_status(self) -> str | None:
        done = self.data_of("message_complete")
        return str(done[-1].get("status")) if done else None

    @property
    def error_codes(self) -> list[str]:
        return [str(e.get("code")) for e in self.data_of("error")]


async def start_run(
    http: httpx.AsyncClient,
    base: str,
    body: dict[str, Any],
    *,
    headers: Mapping[str, str] = DEMO_AUTH,
    deadline_s: float = 60,
) -> tuple[int, dict[str, Any]]:
    """POST /v1/agent/runs, retried while the server is down or answers 503; (status, body)."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            response = await http.post(f"{base}/v1/agent/runs", json=body, headers=dict(headers))
        except httpx.TransportError:
            response = None
        if response is not None and response.status_code != 503:
            try:
                payload = response.json()
            except ValueError:
                payload = {"raw": response.text}
            return response.status_code, payload
        if time.monotonic() > deadline:
            return (response.status_code if response is not None else 0), {}
        delay = 0.1
        if response is not None:
            with contextlib.suppress(ValueError):
                delay = min(1.0, float(response.headers.get("retry-after", "0.1")))
        await asyncio.sleep(delay)


async def follow(
    http: httpx.AsyncClient,
    base: str,
    trace: Trace,
    *,
    deadline_s: float = 120,
    not_found_grace_s: float = 10,
    on_frame: Callable[[Trace, Frame], None] | None = None,
    headers: Mapping[str, str] = DEMO_AUTH,
    reconnect: bool = True,
) -> Trace:
    """Read the run's events like an EventSource: on a dropped or cleanly closed stream,
    reconnect with ``Last-Event-ID`` (server down: retry every 50 ms; a clean end without
    ``message_complete``, e.g. an id-less ``storage_unavailable`` error: after 100 ms)
    until ``message_complete`` arrives, the server answers 204, or the deadline passes.
    Without ``reconnect``, a clean end of the first stream read ends it (outcome ``ended``)."""
    assert trace.stream_url is not None
    deadline = time.monotonic() + deadline_s
    not_found_since: float | None = None
    while trace.outcome == "pending":
        if time.monotonic() > deadline:
            trace.outcome = "timeout"
            break
        last = trace.last_id
        request_headers = {"Accept": "text/event-stream", **headers}
        if last:
            request_headers["Last-Event-ID"] = str(last)
        segment: list[Frame] = []
        try:
            async with http.stream("GET", f"{base}{trace.stream_url}", headers=request_headers) as response:
                trace.connects.append(str(response.status_code))
                if response.status_code == 204:
                    trace.outcome = "no_terminal"
                    break
                if response.status_code == 404:
                    not_found_since = not_found_since or time.monotonic()
                    if time.monotonic() - not_found_since > not_found_grace_s:
                        trace.outcome = "not_found"
                        break
                    await asyncio.sleep(0.1)
                    continue
                if response.status_code in (400, 401, 403, 410):
                    trace.outcome = f"error: GET events answered {response.status_code}"
                    break
                if response.status_code != 200:  # 429, 5xx: the server is busy or restarting
                    await asyncio.sleep(0.1)
                    continue
                not_found_since = None
                trace.segments.append(segment)
                end = "eof"
                try:
                    async for ev in iter_sse(response.aiter_lines()):
                        # Heartbeats keep a stream that never ends alive past any read
                        # timeout: the deadline is checked on every frame, theirs too.
                        if time.monotonic() > deadline:
                            trace.outcome = "timeout"
                            end = "deadline"
                            break
                        if ev.event == "heartbeat":
                            continue
                        frame: Frame = (ev.id, ev.event, ev.data)
                        segment.append(frame)
                        trace.received_at.append(time.monotonic())
                        if on_frame is not None:
                            on_frame(trace, frame)
                        if ev.event == "message_complete":
                            trace.outcome = "complete"
                            end = "message_complete"
                            break
                except httpx.TransportError as exc:
                    end = type(exc).__name__
                    raise
                finally:
                    trace.ends.append(end)
        except httpx.TransportError as exc:
            trace.connects.append(type(exc).__name__)
            await asyncio.sleep(0.05)
            continue
        if trace.outcome == "pending" and segment and segment[-1][0] is None:
            if not reconnect:
                trace.outcome = "ended"
                break
            await asyncio.sleep(0.1)  # an EventSource waits its ``retry:`` before reconnecting
    return trace


async def replay(
    http: httpx.AsyncClient,
    base: str,
    stream_url: str,
    after: int = 0,
    *,
    headers: Mapping[str, str] = DEMO_AUTH,
    deadline_s: float = 60,
) -> tuple[int, list[Frame]]:
    """(status, frames) of one read of the stored log from ``after``, no reconnects.

    A run that never ends streams heartbeats for ever (no read timeout fires): past
    ``deadline_s`` the read fails naming the run and what it had shown."""
    frames: list[Frame] = []
    url = f"{base}{stream_url}"
    try:
        async with asyncio.timeout(deadline_s):
            async with http.stream("GET", url, headers={"Last-Event-ID": str(after), **headers}) as response:
                if response.status_code != 200:
                    return response.status_code, frames
                async for ev in iter_sse(response.aiter_lines()):
                    if ev.event != "heartbeat":
                        frames.append((ev.id, ev.event, ev.data))
                    if ev.event == "message_complete":
                        break
    except TimeoutError:
        shown = [f"{i} {e}" for i, e, _ in frames[-5:]]
        raise AssertionError(
            f"the log at {url} did not end within {deadline_s} s ({len(frames)} frames, the last {shown})"
        ) from None
    return 200, frames


async def until(predicate: Callable[[], bool], what: str, timeout: float = 60, step: float = 0.02) -> None:
    """Wait for a condition; the timeout only guards against a hang."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(step)


def sse_event_frames(events: list[SSEEvent]) -> list[Frame]:
    return [(e.id, e.event, e.data) for e in events if e.event != "heartbeat"]


def client(max_connections: int = 200, read_timeout: float = 30) -> httpx.AsyncClient:
    """A client for many concurrent streams (the read timeout outlasts heartbeats)."""
    return httpx.AsyncClient(
        timeout=httpx.Timeout(read_timeout, connect=5, pool=60),
        limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=20),
    )


# --- judging traces -----------------------------------------------------------------------------


@dataclass(slots=True)
class TraceProblems:
    """What is wrong with one run's trace, in words (empty lists: nothing)."""

    tag: str
    problems: list[str] = field(default_factory=list)


def check_trace(trace: Trace, stored: list[Frame] | None) -> list[str]:
    """Problems of one trace: ids not contiguous from 1, duplicates, not exactly one
    ``message_complete`` (last), an unacceptable end, or a difference from the stored log."""
    problems: list[str] = []
    frames = trace.frames
    ids = [f[0] for f in frames]
    expected = [str(i) for i in range(1, len(frames) + 1)]
    if ids != expected:
        dup = [i for i, n in Counter(ids).items() if n > 1]
        problems.append(f"ids not contiguous from 1 (duplicates {dup[:5]}): {_ids_summary(ids)}")
    completes = [f for f in frames if f[1] == "message_complete"]
    if len(completes) != 1 or not frames or frames[-1][1] != "message_complete":
        problems.append(f"{len(completes)} message_complete events (last event {frames[-1][1] if frames else None})")
    if trace.outcome != "complete":
        problems.append(f"client outcome {trace.outcome} (connects {trace.connects[-6:]})")
    status = trace.final_status
    if status is not None and status != "completed":
        codes = trace.error_codes
        if not (status == "failed" and codes and codes[-1] == "run_interrupted"):
            problems.append(f"ended {status} with error codes {codes}")
    if stored is not None and stored != frames:
        problems.append(f"live view differs from the stored log: {_first_difference(frames, stored)}")
    return problems


def _ids_summary(ids: list[str | None]) -> str:
    if len(ids) <= 40:
        return str(ids)
    return f"{ids[:20]} … {ids[-20:]} ({len(ids)} events)"


def _first_difference(seen: list[Frame], stored: list[Frame]) -> str:
    for i, (a, b) in enumerate(zip(seen, stored, strict=False)):
        if a != b:
            return f"at #{i}: live {a[:2]} {a[2][:120]!r} vs stored {b[:2]} {b[2][:120]!r}"
    return f"live has {len(seen)} events, the log {len(stored)}"
