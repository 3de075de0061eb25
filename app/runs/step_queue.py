"""What a live run hands the run store's writer queue: the store it writes to
(``RunEventLog``) and, for each step, the small object the writer tells when the step
commits or fails (``QueuedStep``).

Why apart: the writer queue's side of a run, kept beside ``run`` (the run itself) so
the run's module reads as the run's state, its writes and its followers; under load
thousands of ``QueuedStep`` wait in the queue (issue 22), so its shape matters alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from storage.errors import LeaseLost
from storage.records import RunWrite


class RunEventLog(Protocol):
    """The part of the run store a live run writes to."""

    def write(
        self,
        step: RunWrite,
        *,
        on_commit: Callable[[], None] | None = None,
        on_fail: Callable[[BaseException], None] | None = None,
    ) -> None: ...


class StepOwner(Protocol):
    """What a queued step tells its run (``app.runs.run.Run``)."""

    def mark_durable(self, upto: int) -> None: ...

    def storage_lost(self, exc: BaseException) -> None: ...

    def abandon(self) -> None: ...


class QueuedStep:
    """What a step waiting in the store's writer queue tells its run when it commits or
    fails. One small object per step rather than two closures (their cells and
    functions): under load thousands of steps wait in that queue, and this is most of
    what each one holds (issue 22)."""

    __slots__ = ("future", "run", "upto")

    def __init__(self, run: StepOwner, upto: int, future: asyncio.Future[None] | None) -> None:
        self.run, self.upto, self.future = run, upto, future

    def committed(self) -> None:
        self.run.mark_durable(self.upto)
        if self.future is not None and not self.future.done():
            self.future.set_result(None)

    def failed(self, exc: BaseException) -> None:
        if self.future is not None and not self.future.done():
            self.future.set_exception(exc)
            self.future.exception()
        if isinstance(exc, LeaseLost):
            self.run.abandon()
        else:
            self.run.storage_lost(exc)
