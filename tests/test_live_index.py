"""The registry's live runs (issue 23): ``RunRegistry.active`` — asked twice by every
admission (the live-run and model-pool caps) — walks only the runs that may still be
live, not every run kept in memory after it ended (``finished_memory_s``). Checked
against the definition (registered, neither finished nor released) through a run's
life — finished, released, parked, taken over, replaced by a later copy, forgotten — and
that a run found ended is not looked at again.
"""

from __future__ import annotations

import asyncio

from app.runs.registry import RunRegistry
from app.runs.run import Run, terminal_event


class CountedRun(Run):
    """A run that counts how often anyone asks whether it has finished."""

    __slots__ = ("asked",)

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.asked = 0

    @property
    def finished(self) -> bool:
        self.asked += 1
        return self.finished_at is not None


def make(run_id: str, cls: type[Run] = Run) -> Run:
    return cls(id=run_id, conversation_id=f"conv_{run_id}", user_id="alice", context_type="knowledge")


def definition(registry: RunRegistry) -> set[str]:
    return {r.id for r in registry.runs.values() if not r.finished and not r.released}


async def test_active_follows_a_runs_life() -> None:
    registry = RunRegistry()
    runs = [make(f"r{i}") for i in range(6)]
    for run in runs:
        registry.register(run)
    assert {r.id for r in registry.active()} == definition(registry) == {r.id for r in runs}

    runs[0].emit(terminal_event(runs[0], "completed"))  # finished (its ending not stored yet)
    runs[1].release()  # shutdown: followers end, the next process carries it on
    runs[2].park()  # waits for an approval, held by no process
    runs[3].abandon()  # taken over by another process
    assert {r.id for r in registry.active()} == definition(registry) == {"r4", "r5"}

    # A later copy of r4 (a claim taking its lapsed lease back) speaks for the id.
    copy = make("r4")
    registry.register(copy)
    assert registry.active().count(copy) == 1 and runs[4] not in registry.active()
    assert {r.id for r in registry.active()} == definition(registry)

    registry.forget("r5")
    assert {r.id for r in registry.active()} == definition(registry) == {"r4"}
    copy.emit(terminal_event(copy, "failed"))
    assert registry.active() == [] and definition(registry) == set()


async def test_a_run_out_of_the_registry_and_back_is_live_again() -> None:
    """What a route sees when a run is not in memory (a test takes it out and puts it back)."""
    registry = RunRegistry()
    run = make("r1")
    registry.register(run)
    registry.runs.pop("r1")
    assert registry.active() == []
    registry.runs["r1"] = run
    assert registry.active() == [run]


async def test_an_ended_run_is_not_looked_at_again() -> None:
    """1,000 runs in memory, 10 live: after one walk has found the ended ones, the next
    admission's walk asks only the live ones (it asked every run in memory before)."""
    registry = RunRegistry()
    runs = [make(f"r{i}", CountedRun) for i in range(1000)]
    for run in runs:
        registry.register(run)
    for run in runs[10:]:
        run.emit(terminal_event(run, "completed"))
    await asyncio.sleep(0)  # the endings' writes (no store here: durable at once)
    assert len(registry.active()) == 10
    for run in runs:
        assert isinstance(run, CountedRun)
        run.asked = 0
    assert len(registry.active()) == 10
    assert sum(r.asked for r in runs if isinstance(r, CountedRun)) == 10
    assert len(registry.runs) == 1000  # still kept for replay; only the walk skips them
