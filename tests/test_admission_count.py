"""The per-user run cap's count (``Admission.active_runs``, issue 23): the user's
unfinished runs in the store, less those that ended here with their ending still in
the write queue, never fewer than those live here — looked up per stored id in the
user's own runs, so another user's runs in memory change nothing."""

from __future__ import annotations

import time

from app.runs.registry import RunRegistry
from app.runs.run import Run
from app.server.limits import Admission


class StoredRuns:
    """The store's answer: ids of the user's queued/running/interrupted runs."""

    def __init__(self, unfinished: dict[str, list[str]]) -> None:
        self.unfinished = unfinished
        self.asked: list[tuple[str, int]] = []

    async def unfinished_runs(self, user_id: str, limit: int) -> list[str]:
        self.asked.append((user_id, limit))
        return self.unfinished.get(user_id, [])[:limit]


def run(run_id: str, user_id: str, *, ended: bool) -> Run:
    r = Run(id=run_id, conversation_id=f"c-{run_id}", user_id=user_id, context_type="workflow")
    r.status = "completed" if ended else "running"
    if ended:
        r.finished_at = time.time()
    return r


async def test_an_ending_still_in_the_write_queue_is_not_counted_and_other_replicas_runs_are() -> None:
    registry = RunRegistry()
    for r in (
        run("a-ended", "alice", ended=True),  # ended here, the store has not its ending yet
        run("a-live", "alice", ended=False),
        run("b-ended", "bob", ended=True),
        run("b-live", "bob", ended=False),
    ):
        registry.register(r)
    # a-remote: live on another replica (only in the store)
    store = StoredRuns({"alice": ["a-ended", "a-live", "a-remote"], "bob": ["b-ended", "b-live"]})
    limits = Admission(per_minute=60, runs_store=store)  # type: ignore[arg-type]
    assert await limits.active_runs("alice", registry, 3) == 2
    assert await limits.active_runs("bob", registry, 3) == 1
    assert store.asked == [("alice", 67), ("bob", 67)]


async def test_never_fewer_than_the_runs_live_here() -> None:
    registry = RunRegistry()
    registry.register(run("a-1", "alice", ended=False))
    registry.register(run("a-2", "alice", ended=False))
    limits = Admission(per_minute=60, runs_store=StoredRuns({}))  # type: ignore[arg-type]
    assert await limits.active_runs("alice", registry, 3) == 2
    assert await limits.active_runs("carol", registry, 3) == 0
