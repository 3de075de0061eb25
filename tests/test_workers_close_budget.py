"""``serve --workers``' supervisor gives its workers their whole close budget, and no
more (``app/cli/workers.py``, ``app/ops/close_budget.py``).

The supervisor SIGKILLs a worker still running at the drain plus ``STOP_MARGIN_S``. That
margin was 30 s while the close's own bounded steps (the drain's wait for cancelled
runs, uvicorn's graceful shutdown, the background tasks, the re-embedding, the leader,
the feed, the database close) add up to far more: a worker still within them was killed
half-way through its close. The margin is now their sum. Through real processes
(``tests/support/budget_supervisor.py``: the real supervisor over workers whose close
the test ends), with a budget of seconds: a worker closing within it is waited for, one
past it is killed.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

import pytest

from app.ops import close_budget
from app.ops.close_budget import CLOSE_BUDGET_S, CLOSE_STEPS_S
from tests.support.deadline import reap, until, within
from tests.support.procs import REPO, child_env

pytestmark = pytest.mark.slow


def test_the_stop_margin_is_the_sum_of_the_close_steps_bounds() -> None:
    """Each bound the close waits on is in the budget, named where it is defined, and
    the supervisor's margin is their sum - not a number the steps outgrow."""
    import app.factory
    import app.ops.leader
    import knowledge.backfill
    import storage.sqlite.database
    import storage.sqlite.worker_feed
    from app.cli import workers

    steps = set(CLOSE_STEPS_S.values())
    assert close_budget.INTERRUPTED_RUNS_S in steps and close_budget.SERVER_CLOSE_S in steps
    assert app.factory.BACKGROUND_STOP_S is close_budget.BACKGROUND_STOP_S
    for bound in (
        app.ops.leader.STOP_S,
        knowledge.backfill.STOP_S,
        storage.sqlite.database.CLOSE_AFTER_CANCEL_S,
        storage.sqlite.worker_feed.CLOSE_S,
    ):
        assert bound in steps
    assert sum(CLOSE_STEPS_S.values()) == CLOSE_BUDGET_S
    assert workers.STOP_MARGIN_S == CLOSE_BUDGET_S
    assert workers.stop_deadline_s(20.0) == 20.0 + CLOSE_BUDGET_S
    assert workers.Supervisor.__dataclass_fields__["stop_after_s"].default == workers.stop_deadline_s(20.0)


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
