"""``run_resumed.reason`` after a take-over tells the two causes of a lapsed lease apart:

- the replica that ran the run stopped (its lease expired; this replica never lost the
  database): "its replica stopped; another took it over";
- the lease lapsed while the database was unreachable (this replica was cut off from it
  too, while that lease was last alive): "its lease lapsed while the database was
  unreachable" — its replica may well still be alive.

In-process: a real SQLite store; the taking-over replica is a ``RunManager`` with leases
whose store can be switched unreachable (every call raises ``StorageUnavailable``, as
the engines do when the database is away). The run was left by "replica A" with a
checkpoint and a short lease; the agent here only records the ``run_resumed`` it gets.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

from app.runs.manager import RunManager
from app.runs.records import Caller, ChatInput, encode_run_input
from app.runs.run import Run, terminal_event
from app.runs.state import RunState
from events import RunResumed, RunStarted
from storage.errors import StorageUnavailable
from storage.interfaces import RunStore
from storage.records import NewRun, RunEvent, RunWrite
from tests.support.procs import until
from tests.support.storage import opened_storage

LEASE_S = 1.0


class SwitchableStore:
    """A run store that can be made unreachable: while ``down``, every call raises."""

    def __init__(self, inner: RunStore) -> None:
        self._inner = inner
        self.down = False
        self.refused = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not inspect.iscoroutinefunction(attr):
            return attr  # ``write`` hands the step to the store's writer (sync)

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.down:
                self.refused += 1
                raise StorageUnavailable("the database is unreachable (test)")
            return await attr(*args, **kwargs)

        return call


class RecordingAgent:
    """Ends each run it is given at once, keeping the ``run_resumed`` it was handed."""

    def __init__(self) -> None:
        self.resumed: list[RunResumed] = []

    async def __call__(
        self,
        run: Run,
        chat: ChatInput,
        caller: Caller,
        state: RunState | None = None,
        resumed: RunResumed | None = None,
    ) -> None:
        assert resumed is not None, "a checkpointed run is carried on with run_resumed"
        self.resumed.append(resumed)
        await run.emit_step([resumed, terminal_event(run, "completed")], finished=True)


async def leave_a_run(store: RunStore, run_id: str) -> float:
    """What replica A leaves behind: a run with a checkpoint, leased for ``LEASE_S / 2``.
    Returns when (epoch seconds) that lease has surely expired."""
    await store.create(
        NewRun(
            id=run_id,
            conversation_id=f"conv_{run_id}",
            user_id="alice",
            context_type="knowledge",
            input=encode_run_input(ChatInput("what is a lease?", "knowledge", {}), Caller("alice")),
            lease_owner="replica-a",
            lease_s=LEASE_S / 2,
        )
    )
    started = RunStarted(run_id=run_id, conversation_id=f"conv_{run_id}")
    await store.commit(
        RunWrite(
            run_id,
            f"conv_{run_id}",
            "alice",
            events=[RunEvent(seq=1, event=started.name, data=started.to_json().decode())],
            checkpoint=RunState(system="s", tool_names=[], budget=1, messages=[]).encode(),
            checkpoint_seq=1,
            status="running",
            lease_owner="replica-a",
            lease_s=LEASE_S / 2,
        )
    )
    return time.time() + LEASE_S / 2


async def take_over_with(
    tmp_path: Path, outage: Callable[[SwitchableStore, RecordingAgent, float], Awaitable[None]]
) -> RunResumed:
    async with opened_storage(tmp_path / "agent.sqlite3") as storage:
        store = SwitchableStore(storage.runs)
        agent = RecordingAgent()
        manager = RunManager(store=cast(RunStore, store), agent=agent, lease_s=LEASE_S, cancel_poll_s=0.05)
        assert await manager.recover() == 0
        try:
            await outage(store, agent, await leave_a_run(storage.runs, "run_left"))
            await until(lambda: len(agent.resumed) == 1, "the take-over", 20)
            run = manager.get("run_left")
            assert run is not None
            await run.wait_settled()
        finally:
            await manager.shutdown(0)
        stored = await storage.runs.get("run_left")
        assert stored is not None and stored.status == "completed"
        return agent.resumed[0]


async def test_a_stopped_replica_is_named_as_stopped(tmp_path: Path) -> None:
    async def no_outage(store: SwitchableStore, agent: RecordingAgent, expires_at: float) -> None:
        return None

    resumed = await take_over_with(tmp_path, no_outage)
    assert resumed.reason == "its replica stopped; another took it over"
    assert resumed.run_id == "run_left" and resumed.checkpoint_seq == 1


async def test_a_lease_lapsed_in_an_outage_is_named_as_such(tmp_path: Path) -> None:
    async def outage(store: SwitchableStore, agent: RecordingAgent, expires_at: float) -> None:
        store.down = True  # (replica A left its run a moment before the outage)
        # The database stays away past the lease's expiry, and this replica noticed.
        await until(lambda: store.refused >= 2 and time.time() > expires_at, "an outage past the lease", 20)
        assert agent.resumed == []
        store.down = False

    resumed = await take_over_with(tmp_path, outage)
    assert resumed.reason == "its lease lapsed while the database was unreachable; it was taken over"
    assert "stopped" not in resumed.reason
