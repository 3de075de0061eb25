"""Carrying a stored, unfinished run on in this process: at start-up, after a take-over
of a dead replica's run, or once a parked run's approval is decided.

``recovery.plan_recovery`` decides what a stored run needs (already ended, cannot be
carried on, never started, started without a checkpoint, or resumed from one); this
module does it — the run read back with its events, registered, started through the
launcher with the agent, and ended ``cancelled`` when a cancel was asked while nobody
held it. Why apart: the manager decides *which* runs are carried on (its claims and
leases); how one is carried on is the same whichever path found it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from app.runs.cancels import RunCancels
from app.runs.counters import RunCounters
from app.runs.launch import RunLauncher
from app.runs.records import Sealer
from app.runs.recovery import AlreadyEnded, CannotResume, RestartFromInput, StartFresh, plan_recovery
from app.runs.registry import RunRegistry
from app.runs.run import Run, terminal_event
from events import Error, RunResumed
from storage.interfaces import RunStore
from storage.records import StoredRun

log = logging.getLogger("agentchat.runs")

#: ``agent(run, chat, caller, state=None, resumed=None)``: the agent loop.
AgentFn = Callable[..., Awaitable[None]]


@dataclass(slots=True)
class RunCarrier:
    """Carries stored runs on here (``carry_on``); built by ``RunManager``."""

    store: RunStore
    #: The manager's agent loop, read when a run starts (the wiring wraps it after the
    #: manager is built: ``app/wiring.py``'s titles).
    current_agent: Callable[[], AgentFn]
    launcher: RunLauncher
    registry: RunRegistry
    counters: RunCounters
    cancels: RunCancels
    max_events: int
    #: Decrypts the stored run input (the caller's ``Authorization``): ``app.keyring``.
    input_sealer: Sealer | None

    async def carry_on(self, stored: StoredRun, *, reason: str = "the service restarted") -> None:
        """Carry ``stored`` on here as ``recovery.plan_recovery`` decides."""
        events = await self.store.events_after(stored.id, 0, limit=self.max_events)
        run = self.launcher.restore(stored, events)
        # Not the later turns queued behind this run's copy let go here (an outage, a
        # take-over): they wait for this run's stored ending (``RunLauncher.start``).
        earlier = [r for r in self.registry.live_in(run.user_id, run.conversation_id) if run.id not in r.turn_after]
        self.registry.register(run)
        plan = plan_recovery(stored, events, reason=reason, sealer=self.input_sealer)
        if isinstance(plan, CannotResume):
            self.counters.not_resumable += 1
        elif not isinstance(plan, AlreadyEnded):  # its work goes on here (``RunCounters.resumed``)
            self.counters.resumed += 1
        if isinstance(plan, AlreadyEnded):  # it ended, but the process died before its status was written
            run.finished_at = time.time()
            run.status = plan.status  # type: ignore[assignment]
            await self.store.set_status([run.id], plan.status)
            return
        if isinstance(plan, CannotResume):
            log.warning("run cannot be carried on", extra={**_about(run), "reason": plan.why})
            run.emit_step(
                [
                    Error(
                        message=f"The run was interrupted and cannot be carried on: {plan.why}.",
                        code="run_interrupted",
                    ),
                    terminal_event(run, "failed"),
                ],
                finished=True,
            )
            return
        chat, caller = plan.chat, plan.caller
        run.question = chat.message
        if isinstance(plan, StartFresh):  # admitted, never started: start it now
            self.launcher.start(run, earlier, lambda: self.current_agent()(run, chat, caller))
            if stored.cancel_requested:  # asked while nobody held it: it ends cancelled
                self.cancels.cancel_here(run)
            return
        resumed = plan.resumed
        self._note_discarded(run, resumed)
        if isinstance(plan, RestartFromInput):  # started, no checkpoint yet: from its request again
            log.info("restarting a run from its request", extra=_about(run))
            self.launcher.start(run, earlier, lambda: self.current_agent()(run, chat, caller, resumed=resumed))
            if stored.cancel_requested:
                self.cancels.cancel_here(run)
            return
        state = plan.state
        if plan.parked:
            earlier = []  # admitted before the conversation's runs here: they wait for it
        self.launcher.start(run, earlier, lambda: self.current_agent()(run, chat, caller, state=state, resumed=resumed))
        if stored.cancel_requested and not plan.parked_cancel:  # asked while nobody held it: it ends cancelled
            self.cancels.cancel_here(run)

    def _note_discarded(self, run: Run, resumed: RunResumed) -> None:
        """Remember the events a resume here discards until its ``run_resumed`` is in the
        log (the faces that cannot take text back skip them)."""
        if resumed.discarded is not None:
            self.registry.discarded[run.id] = (resumed.discarded.from_seq, resumed.discarded.to_seq)
            log.info(
                "discarding a partial model turn",
                extra={**_about(run), "from_seq": resumed.discarded.from_seq, "to_seq": resumed.discarded.to_seq},
            )


def _about(run: Run) -> dict[str, str]:
    """The fields every line of a run carries (``app/ops/log_context.py``), for the lines
    logged here: carrying a run on happens before its task (``bind_run``) exists, in the
    take-over loop or the start-up, whose lines name no run of their own."""
    return {"run_id": run.id, "conversation_id": run.conversation_id, "user": run.user_id}
