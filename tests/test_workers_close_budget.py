"""``serve --workers``' supervisor gives its workers their whole close budget, and no
more (``app/cli/workers.py``, ``app/ops/close_budget.py``).

The supervisor SIGKILLs a worker still running at the drain plus ``STOP_MARGIN_S``, the
budget: the sum of the bounds of every step the close waits on. A real app's close
records the bound each step is handed, and the budget must be exactly those steps (a
set of values passed with a step left out, as long as another had the same bound).
Through real processes (``tests/support/budget_supervisor.py``: the real supervisor over
workers whose close the test ends), with a budget of seconds: a worker closing within it
is waited for, one past it is killed. Reading the budget loads no engine.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from app.config import Settings
from app.ops import close_budget
from app.ops.close_budget import CLOSE_BUDGET_S, CLOSE_STEPS_S
from tests.conftest import running_app
from tests.fakes import running_fake
from tests.fakes.mcp_server import build_server
from tests.support.deadline import reap, until, within
from tests.support.procs import REPO, child_env

pytestmark = pytest.mark.slow


def test_the_stop_margin_is_the_budget() -> None:
    from app.cli import workers

    assert sum(CLOSE_STEPS_S.values()) == CLOSE_BUDGET_S
    assert workers.STOP_MARGIN_S == CLOSE_BUDGET_S
    assert workers.stop_deadline_s(20.0) == 20.0 + CLOSE_BUDGET_S
    assert workers.Supervisor.__dataclass_fields__["stop_after_s"].default == workers.stop_deadline_s(20.0)


def test_the_supervisor_imports_no_engine_for_the_budget() -> None:
    """``serve --workers``' parent only supervises: reading the budget must not load the
    knowledge base, the storage engines or numpy (they cost it ~20 MB and its start)."""
    code = (
        "import sys; import app.cli.workers; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('knowledge', 'numpy', 'aiosqlite', 'psycopg', 'toolindex', 'agenttools') "
        "or m.startswith(('storage.sqlite', 'storage.postgres'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=child_env({}), capture_output=True,
                         text=True, timeout=120, check=True)  # fmt: skip
    assert out.stdout.strip() == "[]", out.stdout


async def test_the_budget_is_every_bound_a_real_close_waits_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A served app with every part that has a bounded close (sibling workers' leader and
    feed, MCP connections, its own OpenTelemetry provider, the knowledge base's
    re-embedding) is closed, and each bounded step records the bound it was handed: every
    step of the budget is there with that bound, and no step outside it. (uvicorn's own
    graceful shutdown is set by ``agentchat serve``, checked by name; the exit is no wait.)"""
    import app.factory
    import app.history
    import app.ops.embedder_check
    import app.ops.leader
    import app.rooms
    import storage.sqlite.database
    import storage.sqlite.worker_feed
    from agenttools.mcp.client import McpConnection
    from app.cli import serve
    from app.ops.tracing import Tracing
    from app.runs import drain
    from app.runs.manager import RunManager
    from knowledge.backfill import VectorBackfill
    from knowledge.kb import KnowledgeBase
    from knowledge.kb_counts_memo import CountsAtGeneration
    from storage.sqlite.database import SqliteDatabase
    from storage.sqlite.worker_feed import WorkerFeed

    given: dict[str, set[float]] = {}

    def note(step: str, bound: float) -> None:
        given.setdefault(step, set()).add(bound)

    def recording_wait(step: str, real: Any) -> Any:
        async def wait(tasks: Any, timeout_s: float) -> Any:
            note(step, timeout_s)
            return await real(tasks, timeout_s)

        return wait

    monkeypatch.setattr(app.factory, "cancel_and_wait", recording_wait("background tasks", app.factory.cancel_and_wait))
    monkeypatch.setattr(
        app.ops.leader, "cancel_and_wait", recording_wait("background jobs' leader", app.ops.leader.cancel_and_wait)
    )
    for module, step in ((app.history, "conversation titles"), (app.ops.embedder_check, "embedder check"),
                         (app.rooms, "knowledge rooms' tasks")):  # fmt: skip
        monkeypatch.setattr(module, "cancel_and_wait", recording_wait(step, module.cancel_and_wait))

    def wrap(cls: Any, name: str, record: Any) -> None:
        real = getattr(cls, name)

        async def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
            record(self, inspect.signature(real).bind(self, *args, **kwargs))
            return await real(self, *args, **kwargs)

        monkeypatch.setattr(cls, name, wrapped)

    def bound_arg(step: str, name: str) -> Any:
        def record(_: Any, bound: inspect.BoundArguments) -> None:
            bound.apply_defaults()
            note(step, bound.arguments[name])

        return record

    wrap(McpConnection, "close", lambda self, b: (bound_arg("MCP connections", "timeout_s")(self, b),
                                                   bound_arg("MCP connections' cancel", "cancel_s")(self, b)))
    wrap(Tracing, "aclose", lambda self, b: self._owns and bound_arg("spans' flush", "flush_s")(self, b))
    wrap(VectorBackfill, "aclose", lambda self, _: note("knowledge-base re-embedding", self._config.reembed_stop_s))
    # The bound the knowledge base hands its dense side (only PostgreSQL's counts and waits: the matrix has
    # nothing to wait for; the wait itself: tests/test_kb_count_close_frozen_pg.py)
    wrap(KnowledgeBase, "aclose",
         lambda self, _: note("knowledge-base unreadable-vector count", self.config.unreadable_count_stop_s))
    wrap(CountsAtGeneration, "aclose", lambda self, _: note("knowledge-base /readyz count", self._stop_s))
    wrap(RunManager, "shutdown", lambda *_: note("runs cancelled by the drain", drain.INTERRUPTED_RUNS_S))
    wrap(WorkerFeed, "close", lambda *_: note("sibling feed readers", storage.sqlite.worker_feed.CLOSE_S))
    wrap(SqliteDatabase, "close", lambda *_: note("database close", storage.sqlite.database.CLOSE_AFTER_CANCEL_S))

    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def traces(request: Request) -> Response:
        await request.body()
        return Response(b"", media_type="application/x-protobuf")

    collector = Starlette(routes=[Route("/v1/traces", traces, methods=["POST"])])
    desk_server, _ = build_server("desk")
    servers = tmp_path / "mcp-servers.toml"
    async with running_fake(desk_server.streamable_http_app()) as desk_url, running_fake(collector) as otel_url:
        servers.write_text(f'[servers.desk]\nurl = "{desk_url}/mcp"\n')
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otel_url)
        settings = Settings.from_env({
            "AGENT_DB_PATH": str(tmp_path / "agent.db"),
            "AGENT_CACHE_DIR": str(tmp_path / "cache"),
            "AGENT_INGEST_SAMPLE_KB": "false",
            "AGENT_EMBEDDER": "hashing",
            "AGENT_LLM_PROVIDER": "extractive",
            "AGENT_MCP_SERVERS": str(servers),
            "AGENT_WORKERS": "2",  # a worker of ``serve --workers``: the leader and the feed
            "OTEL_EXPORTER_OTLP_ENDPOINT": otel_url,
        })  # fmt: skip
        async with running_app(settings) as (_, served):
            svc = served.state.services
            assert svc.leader is not None and svc.rooms.mcp is not None
        assert given, "the app never closed"
    assert "SERVER_CLOSE_S" in inspect.getsource(serve._serve_agent)  # uvicorn's graceful shutdown
    seen = {step: bounds for step, bounds in given.items()}
    seen["open connections"] = {close_budget.SERVER_CLOSE_S}
    seen["interpreter exit"] = {close_budget.EXIT_S}
    assert seen == {step: {bound} for step, bound in CLOSE_STEPS_S.items()}
    assert sum(bound for (bound,) in seen.values()) == CLOSE_BUDGET_S


async def supervise(tmp_path: Path, *, budget: float) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.support.budget_supervisor", "--dir", str(tmp_path),
        "--grace", "0", "--budget", str(budget),
        cwd=REPO, env=child_env({}), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    log = tmp_path / "worker0.log"
    await until(lambda: log.exists() and "ready" in log.read_text(), "the worker's handler in place")
    return proc


def worker_said(tmp_path: Path) -> list[str]:
    return (tmp_path / "worker0.log").read_text().split()


async def test_a_worker_closing_within_its_budget_is_waited_for(tmp_path: Path) -> None:
    """SIGTERM: the worker closes; the test ends its close once it has begun, well within
    the budget: the supervisor waits for it, kills nothing and exits 0."""
    proc = await supervise(tmp_path, budget=120)
    try:
        proc.send_signal(signal.SIGTERM)
        await until(lambda: "closing" in worker_said(tmp_path), "the worker's close")
        (tmp_path / "release").touch()
        out, err = await within(proc.communicate(), "the supervisor's exit")
        assert proc.returncode == 0, err.decode()
        assert json.loads(out.decode().splitlines()[-1]) == {"code": 0, "killed": []}
        assert worker_said(tmp_path) == ["ready", "closing", "closed"]
    finally:
        await reap(proc, "the supervisor", grace=5)


async def test_a_worker_past_its_budget_is_killed(tmp_path: Path) -> None:
    """A close that does not end within the budget: SIGKILLed at the deadline, the
    supervisor exits 1 (``KILLED_ON_STOP``)."""
    proc = await supervise(tmp_path, budget=1)
    try:
        proc.send_signal(signal.SIGTERM)
        out, err = await within(proc.communicate(), "the supervisor's exit")
        assert proc.returncode == 1, err.decode()
        report = json.loads(out.decode().splitlines()[-1])
        assert report["code"] == 1 and len(report["killed"]) == 1, report
        assert worker_said(tmp_path) == ["ready", "closing"]  # killed inside its close
    finally:
        await reap(proc, "the supervisor", grace=5)
