"""A run's task: made (new or restored from the store), started in its conversation's
turn, and ended exactly once whatever happens to the agent.

The agent loop ends a run itself; this is the net under it. A run cancelled before its
agent began (queued behind an earlier turn) or an agent that crashed past its own
handlers still gets its one terminal event here — ``run_started`` first if it had none —
so every run ends with exactly one ``message_complete``. A run parked for an approval
leaves memory and its conversation's turn order: later turns wait for its stored ending,
wherever it is carried on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from app.ops.log_context import bind_run
from app.runs.cancels import RunCancels
from app.runs.counters import RunCounters
from app.runs.registry import RunRegistry
from app.runs.rescue import EndingRescue
from app.runs.run import Run, RunEvent, terminal_event
from events import Error, Event, RunStarted
from llm.types import Message
from storage.errors import DatabaseLost, StorageUnavailable
from storage.interfaces import RunStore
from storage.records import WAITING_APPROVAL, StoredRun

log = logging.getLogger("agentchat.runs")

#: How soon a turn waiting for an earlier one's stored ending reads the store again
#: after it did not answer.
STORE_AWAY_RETRY_S = 0.5


@dataclass(slots=True)
class RunLauncher:
    store: RunStore
    max_events: int
    registry: RunRegistry
    counters: RunCounters
    cancels: RunCancels
    rescue: EndingRescue
    #: This process's lease identity (``None``: no leases) and the lease lifetime.
    lease_owner: str | None
    lease_ttl_s: float

    def new_run(self, run_id: str, conversation_id: str, user_id: str, context_type: str) -> Run:
        run = Run(
            id=run_id,
            conversation_id=conversation_id,
            user_id=user_id,
            context_type=context_type,
            log=self.store,
            max_events=self.max_events,
        )
        return self._attach(run)

    def restore(self, stored: StoredRun, events: list[RunEvent]) -> Run:
        """A stored run with its logged events, held under the claim's epoch."""
        run = self._attach(Run.restore(stored, events, self.store, self.max_events))
        if self.lease_owner is not None:
            run.lease_epoch = stored.lease_epoch
        return run

    def _attach(self, run: Run) -> Run:
        """What every run of this process reports: a refused ending, a lost lease."""
        run.on_storage_failure = self.rescue.rescue
        run.on_abandon = self._lost
        run.on_suspend = self._suspended
        if self.lease_owner is not None:
            run.lease_owner, run.lease_s = self.lease_owner, self.lease_ttl_s
            # An outage's given-up write lets the run go for a claim to carry on (its
            # lease lapses), where the store says an outage passes: PostgreSQL.
            run.survives_outage = bool(getattr(self.store, "outage_passes", False))
        return run

    def _suspended(self, run: Run) -> None:
        """A run of this process was let go for an outage (``Run._suspend``)."""
        self.counters.outage_suspended += 1

    def _lost(self, run: Run) -> None:
        """A run of this process was taken over by another (found by a renewal, or by a
        step whose write the lease refused)."""
        self.counters.leases_lost += 1

    def start(
        self, run: Run, earlier: list[Run], body: Callable[[], Awaitable[None]], *, elsewhere: Sequence[str] = ()
    ) -> None:
        """Run ``body`` (the agent) once ``earlier`` runs of the conversation here and the
        ones on other replicas (``elsewhere``) have ended."""

        async def go() -> None:
            bind_run(run.id, run.conversation_id, run.user_id)  # every log line of the run names it
            for other in earlier:  # the conversation's turns run one after another
                await other.wait_settled()
                if other.parked and not other.finished:
                    refuse_behind_parked(run, other.id)
                    return
                # A copy let go here (an outage's given-up write, a take-over, a later
                # claim's copy), its unstored ending dropped: a claim carries it on, here
                # or elsewhere, so its turn ends with the ending stored, not with this copy.
                if other.lost and await self._stored_end(other.id) == WAITING_APPROVAL:
                    refuse_behind_parked(run, other.id)
                    return
            for other_id in elsewhere:
                if await self._stored_end(other_id) == WAITING_APPROVAL:
                    refuse_behind_parked(run, other_id)
                    return
            await body()

        run.turn_after = frozenset(o.id for o in earlier) | frozenset(elsewhere)

        task = asyncio.create_task(go(), name=f"agent:{run.id}")
        run.task = task
        task.add_done_callback(lambda t: self._on_done(run, t))

    async def _stored_end(self, run_id: str) -> str | None:
        """The status an earlier turn ended (or parked) with in the store, read again
        while the database is away: a turn queued behind a run let go for an outage
        waits through it (its own lease lapses meanwhile, and a claim that takes it
        over stops this copy), where a read's ``StorageUnavailable`` would end it
        ``failed``."""
        said = False
        while True:
            try:
                return await self.cancels.wait_end(run_id, parked_ends=True)
            except StorageUnavailable as exc:
                if isinstance(exc, DatabaseLost):  # SQLite's file removed or replaced: not coming back
                    raise
                if not said:  # once per wait: an outage is read again every half second
                    said = True
                    log.info("waiting for an earlier turn: the database is away", extra={"error": str(exc)[:200]})
                await asyncio.sleep(STORE_AWAY_RETRY_S)

    def _on_done(self, run: Run, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("agent task crashed", exc_info=task.exception(), extra={"run_id": run.id})
        if not run.finished and not run.released:
            status: Literal["cancelled", "failed"] = "cancelled" if task.cancelled() else "failed"
            # The contract: ``run_started`` comes first, even for a run that never began.
            events: list[Event] = [] if run.events else [RunStarted(run_id=run.id, conversation_id=run.conversation_id)]
            if status == "failed":
                events.append(Error(message="internal error", code="internal_error"))
            events.append(terminal_event(run, status))
            never_started = run.status == "queued" and run.question is not None
            messages = [Message("user", run.question)] if never_started and run.question else []
            run.emit_step(events, messages=messages, finished=True)
        if run.parked and not run.finished:  # waits for a decision, stored: whoever claims it next carries it on
            self.counters.parked += 1
            if self.registry.runs.get(run.id) is run:
                self.registry.forget(run.id)
            self.registry.leave_turn_order(run)
        self.registry.settle_conversation(run)


def refuse_behind_parked(run: Run, parked_id: str) -> None:
    """End ``run``, queued behind ``parked_id``, which has just parked for an approval:
    as a new message is refused while a run of its conversation waits (409
    ``approval_pending``, docs/approvals.md), one queued a moment before the park does not
    wait for the decision either — nor runs ahead of the turn it was queued behind. It
    ends ``cancelled`` before its agent began, with an ``approval_pending`` error naming
    the waiting run; its message is not added to the conversation."""
    detail = (
        f"run {parked_id} of this conversation now waits for a decision on a tool call: decide it "
        "(POST /v1/agent/runs/{run_id}/approvals/{tool_use_id}) and send the message again, "
        'or send it with multitask "interrupt" to cancel the waiting run'
    )
    events: list[Event] = [] if run.events else [RunStarted(run_id=run.id, conversation_id=run.conversation_id)]
    events.append(Error(message=detail, code="approval_pending"))
    events.append(terminal_event(run, "cancelled"))
    run.emit_step(events, finished=True)
