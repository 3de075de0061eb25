"""A live run's token writes: a burst of tokens emitted in one turn of the event loop is
one write (the writer then commits many runs' writes in one transaction), every write of
a leased run carries the lease (so streaming renews it, and a write after a take-over
fails instead of being stored), and the ending is one write, last, marked finished."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from app.runs.run import Run
from events import ContentChunk, TokenUsage
from events import MessageComplete as Complete
from storage.records import RunWrite


class Log:
    """A run event log that records each write and commits it when told."""

    def __init__(self) -> None:
        self.writes: list[RunWrite] = []
        self.commits: list[Callable[[], None]] = []

    def write(self, step: RunWrite, *, on_commit: Callable[[], None] | None = None,
              on_fail: Callable[[BaseException], None] | None = None) -> None:
        self.writes.append(step)
        if on_commit is not None:
            self.commits.append(on_commit)


async def test_token_bursts_are_one_leased_write_each_and_shown_only_once_committed() -> None:
    log = Log()
    run = Run("run_1", "conv_1", "alice", "knowledge", log=log, lease_owner="replica-a", lease_s=10.0)
    for i in range(3):
        run.emit(ContentChunk(chunk=f"w{i} "))
    await asyncio.sleep(0)  # the burst is flushed at the end of this turn of the loop
    run.emit(ContentChunk(chunk="w3 "))
    await asyncio.sleep(0)
    run.emit(Complete(status="completed", run_id="run_1", conversation_id="conv_1", turns=1,
                      usage=TokenUsage(input_tokens=1, output_tokens=4)))

    assert [[e.seq for e in w.events] for w in log.writes] == [[1, 2, 3], [4], [5]]
    assert all((w.lease_owner, w.lease_s) == ("replica-a", 10.0) for w in log.writes)
    assert [w.finished for w in log.writes] == [False, False, True] and log.writes[-1].status == "completed"
    assert run.durable == 0  # nothing is shown before its write commits
    log.commits[0]()
    assert run.durable == 3
    for commit in log.commits[1:]:
        commit()
    assert run.durable == 5 and run.events[-1].event == "message_complete"


async def test_a_run_without_a_lease_writes_without_one() -> None:
    log = Log()
    run = Run("run_2", "conv_2", "alice", "knowledge", log=log)
    run.emit(ContentChunk(chunk="hi"))
    await asyncio.sleep(0)
    assert [(w.lease_owner, w.lease_s) for w in log.writes] == [(None, 0.0)]
