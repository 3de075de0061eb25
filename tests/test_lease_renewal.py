"""A replica's leases are renewed whatever else its lease upkeep waits on.

Under load with ``agentchat serve --workers 2`` (300 paced runs) 2 runs lapsed: the
renewal waited in one loop behind the look for expired leases and the cancel check, whose
reads queued behind the followers', and a sibling took the runs over mid-stream. Here a
real SQLite store whose claims and cancel checks hang (as a loaded database makes them)
under a replica that holds a live run: its leases keep being renewed and stay its own.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from pathlib import Path
from typing import Any, cast

from app.runs.manager import RunManager
from app.runs.records import Caller, ChatInput
from app.runs.run import Run, terminal_event
from app.runs.state import RunState
from events import RunResumed
from storage.interfaces import RunStore
from tests.support.procs import until
from tests.support.storage import opened_storage
from tests.test_run_resumed_reason import LEASE_S, leave_a_run


class HangingUpkeep:
    """The real store, except that once ``hang`` is set, claims and cancel checks wait
    until ``release`` (what a loaded database does to them); renewals are counted."""

    def __init__(self, inner: RunStore) -> None:
        self._inner = inner
        self.hang = False
        self.release = asyncio.Event()
        self.hanging = 0
        self.renewals = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            if name == "renew":
                self.renewals += 1
            elif self.hang and name in ("claim", "cancel_requests", "expire_waits"):
                self.hanging += 1
                await self.release.wait()
            return await attr(*args, **kwargs)

        return call


class WaitingAgent:
    """Carries the run on and keeps it live until ``done`` is set."""

    def __init__(self) -> None:
        self.done = asyncio.Event()
        self.running = 0

    async def __call__(
        self,
        run: Run,
        chat: ChatInput,
        caller: Caller,
        state: RunState | None = None,
        resumed: RunResumed | None = None,
    ) -> None:
        self.running += 1
        await self.done.wait()
        await run.emit_step([terminal_event(run, "completed")], finished=True)


async def test_leases_are_renewed_while_the_claims_and_cancel_checks_hang(tmp_path: Path) -> None:
    async with opened_storage(tmp_path / "agent.sqlite3") as storage:
        expired_at = await leave_a_run(storage.runs, "held_run")
        await until(lambda: time.time() > expired_at, "replica A's lease expired", 10)
        store = HangingUpkeep(storage.runs)
        agent = WaitingAgent()
        manager = RunManager(store=cast(RunStore, store), agent=agent, lease_s=LEASE_S, cancel_poll_s=0.05)
        # Carried on here once replica A's lease expired: this replica holds it now.
        assert await manager.recover() == 1
        try:
            await until(lambda: agent.running == 1, "the run carried on here", 20)
            store.hang = True
            await until(lambda: store.hanging > 0, "the upkeep hanging on a claim or a cancel check", 20)
            renewed = store.renewals
            await until(lambda: store.renewals >= renewed + 3, "renewals while the upkeep hangs", 20)
            row = await storage.runs.get("held_run")
            assert row is not None and row.status == "running"
            still = await storage.runs.renew(manager.owner_id, ["held_run"], LEASE_S)
            assert still == {"held_run"}, "the lease is no longer this replica's"
            assert manager.counters.leases_lost == 0
        finally:
            store.release.set()
            agent.done.set()
            await manager.shutdown(1)
