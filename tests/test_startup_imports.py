"""What ``agentchat serve`` imports before it is ready, with nothing configured: none of the
model or embedder client libraries (``ollama``, ``google.genai``, ``openai``) nor the MCP
SDK (``mcp``), nor what only some requests or settings use (``jsonschema``: the query
planner's first plan; ``jwt``: ``AGENT_AUTH=jwt``; the OpenAPI document and its page, built
at the first ``/openapi.json`` or ``/docs``; the installed version, ``importlib.metadata``:
``--version`` and the OpenAPI document), nor httpx's own command-line client (``rich``,
``pygments``: ``app.cli.without_httpx_cli``), nor a WebSocket library. Each costs a start 0.04-1 s of CPU,
and every restarted replica, every ``--workers`` child and every serve the test suite
starts pays it; they load when their provider, embedder, MCP servers or auth mode are
configured, when a probe found their server, or at their first use.

The process is a real ``agentchat serve`` (the CLI's ``main``, run by ``python -c`` so it
can name its modules on the way out): ready, then SIGTERM, then the list.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.procs import PYTHON, REPO, AgentServer, child_env
from tests.support.server import free_port

CLIENT_LIBRARIES = ("ollama", "google.genai", "openai", "mcp")
LOADED_WHEN_USED = (
    *CLIENT_LIBRARIES, "jsonschema", "jwt", "app.server.openapi_paths", "app.server.docs_page",
    "importlib.metadata",  # the installed version: agentchat --version, /openapi.json
)  # fmt: skip
#: What httpx's command-line client (``httpx._main``) would load, which nothing here runs,
#: and a WebSocket library (no WebSocket route: ``app/cli/no_websockets.py`` refuses them).
NEVER_LOADED = ("rich", "pygments", "websockets", "wsproto")

#: ``agentchat serve`` with its arguments, naming on exit those of ``libraries`` it imported.
_SERVE_AND_NAME = """
import atexit, json, sys
libraries = {libraries!r}
atexit.register(lambda: print("imported: " + json.dumps(sorted(
    m for m in sys.modules if any(m == lib or m.startswith(lib + ".") for lib in libraries)
    ) + ["app.factory" if "app.factory" in sys.modules else "no app"]), flush=True))
from app.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


async def _imported(server: AgentServer, timeout_s: float = 60.0) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while True:  # the log is pumped by a thread: the line may come after the exit
        found = [line for line in server.lines() if line.startswith("imported: ")]
        if found:
            return list(json.loads(found[-1].removeprefix("imported: ")))
        if time.monotonic() > deadline:
            raise TimeoutError(f"no list of imports within {timeout_s} s:\n{server.tail()}")
        await asyncio.sleep(0.05)


async def test_serve_with_nothing_configured_loads_no_client_library_nor_what_it_does_not_use(tmp_path: Path) -> None:
    nothing_there = free_port()  # where Ollama is looked for: nothing listens
    server = AgentServer(tmp_path, {"OLLAMA_HOST": f"http://127.0.0.1:{nothing_there}"})
    assert server.argv[1:3] == ["-m", "app.cli"]
    server.argv = [PYTHON, "-c", _SERVE_AND_NAME.format(libraries=(*LOADED_WHEN_USED, *NEVER_LOADED)), *server.argv[3:]]
    server.start()
    try:
        ready = await server.wait_ready(timeout=90)
        # auto did look for Ollama (and found it unreachable): the probe ran, without the library.
        assert "ollama not reachable" in json.dumps(ready).lower(), ready
        server.send(signal.SIGTERM)
        assert await server.wait_exit(60) is not None, server.tail()
        imported = await _imported(server)
    finally:
        server.close()
    assert imported == ["app.factory"], (
        f"agentchat serve imported {imported} with no provider, embedder, MCP server or auth configured"
    )



def test_help_loads_no_web_framework_nor_engine() -> None:
    """``agentchat --help`` (and every command's parser and log set-up) loads none of the
    serving stack, the HTTP client or numpy: the serve-only parts are imported when
    ``serve`` runs. Starlette came with the log set-up (``app.ops.log_context``), ~45 ms
    of the ~270 ms of CPU of ``--help``."""
    code = (
        "import sys\n"
        "from app.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ('starlette', 'uvicorn', 'anyio', 'httpx', 'numpy', 'knowledge', 'storage')\n"
        "loaded = [m for m, module in sys.modules.items() if module is not None]  # None: blocked\n"
        "print(sorted(m for m in loaded if m.split('.')[0] in heavy), file=sys.stderr)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=child_env({}), capture_output=True,
                         text=True, timeout=120, check=True)  # fmt: skip
    assert "agentchat" in out.stdout  # the help was printed
    assert out.stderr.strip() == "[]", out.stderr


async def test_a_workers_supervisor_loads_neither_the_app_nor_the_stores(tmp_path: Path) -> None:
    """``serve --workers``'s supervisor binds the socket, holds the file's writer lock and
    watches its workers; it serves nothing. It loaded every store and numpy anyway
    (~0.3 s of CPU of every group's start) because the light modules it uses -
    ``storage.sqlite.writer_lock``, ``runtime_dir``, the upgrade guard - sat in a package
    whose ``__init__`` imported the engine; the engine loads at its first use now
    (``storage.sqlite.engine``). Only the supervisor runs the naming wrapper: it starts
    its workers as ``python -m app.cli``."""
    libraries = ("numpy", "storage.sqlite.engine", "storage.bundle", "knowledge")
    server = AgentServer(tmp_path, {"AGENT_WORKERS": "2", "OLLAMA_HOST": f"http://127.0.0.1:{free_port()}"})
    server.argv = [PYTHON, "-c", _SERVE_AND_NAME.format(libraries=libraries), *server.argv[3:]]
    server.start()
    try:
        await server.wait_ready(timeout=90)
        server.send(signal.SIGTERM)
        assert await server.wait_exit(60) is not None, server.tail()
        imported = await _imported(server)
    finally:
        server.close()
    assert imported == ["no app"], f"the supervisor of serve --workers imported {imported}"
