"""The harness's children die with the test process (app/cli/children.py).

pytest-timeout ends a hung worker with ``os._exit``; the servers that worker started
must not outlive it. A parent process that starts a child the way the harness does and
then exits without any clean-up stands in for the killed worker. And a server the
harness closes leaves no process behind, ``serve --workers``' workers included.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")

PARENT = textwrap.dedent(
    """
    import os, signal, subprocess, sys
    sys.path.insert(0, {repo!r})
    from app.cli.children import die_with_parent
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                             preexec_fn=die_with_parent(signal.SIGKILL), start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(child.pid, flush=True)
    os._exit(0)  # what pytest-timeout does to a hung worker: no teardown, no atexit
    """
)


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for init to reap it counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_child_started_like_the_harness_dies_when_its_parent_is_gone() -> None:
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", PARENT.format(repo=repo)], capture_output=True, timeout=60, check=True)
    child = int(out.stdout.split()[0])
    try:
        deadline = time.monotonic() + 30
        while _alive(child):
            assert time.monotonic() < deadline, f"child {child} outlived its parent by 30 s"
            time.sleep(0.05)
    finally:
        if _alive(child):
            os.kill(child, 9)


async def test_closing_a_workers_server_leaves_none_of_its_processes(tmp_path: Path) -> None:
    """``AgentServer.close()`` ends ``serve --workers``' workers too: they run in sessions
    of their own, so killing the supervisor alone left a worker that did not drain (here:
    stopped with SIGSTOP, as a hung close would be) running for good."""
    from tests.support.procs import AgentServer, tagged_processes

    env = {"AGENT_LLM_PROVIDER": "extractive", "AGENT_EMBEDDER": "none", "AGENT_INGEST_SAMPLE_KB": "false",
           "OLLAMA_HOST": "http://127.0.0.1:9", "AGENT_WORKERS": "2"}
    server = AgentServer(tmp_path, env, name="orphans-workers")
    server.start()
    workers: list[int] = []
    try:
        await server.wait_healthy()
        deadline = time.monotonic() + 60
        while len(workers) < 2:
            assert time.monotonic() < deadline, f"two workers never ran: {tagged_processes(server.tag)}"
            workers = [pid for pid, cmd in tagged_processes(server.tag).items() if "--worker" in cmd.split()]
            await asyncio.sleep(0.05)
        os.kill(workers[0], signal.SIGSTOP)  # it will not act on the SIGTERM its parent's death sends
    finally:
        server.close()
        left = [pid for pid in workers if _alive(pid)]
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    assert not left, f"workers {left} outlived the closed server"
    assert tagged_processes(server.tag) == {}
