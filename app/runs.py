"""Runs: an agent task plus its ordered event log, readable by any number of followers.

A run's events are appended in order with a per-run sequence (the SSE ``id:``). Followers
never own a queue: each one keeps only its position in the shared log and waits for the
next append, so a slow reader costs O(1) memory and simply catches up (or, after the
in-memory tail was evicted, replays from the durable log). The agent task runs on its
own, independent of any connection; ``/v1/agent/chat`` cancels it when its one client
leaves, ``/v1/agent/runs`` lets it outlive connections.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import orjson

log = logging.getLogger("agentchat.runs")

RunStatus = Literal["running", "completed", "failed", "cancelled"]
TERMINAL_EVENT = "message_complete"


@dataclass(frozen=True, slots=True)
class RunEvent:
    """One event of a run; ``data`` is compact JSON text (one line: orjson escapes
    newlines), encoded once on append. ``wire`` is the SSE frame, built once and sent
    as-is to every follower."""

    seq: int
    event: str
    data: str

    @property
    def wire(self) -> bytes:
        return b"id: %d\nevent: %s\ndata: %s\n\n" % (self.seq, self.event.encode(), self.data.encode())


class RunEventSink(Protocol):
    """Where events go durably (SQLite run log); appends must not block the caller."""

    def append(self, run_id: str, event: RunEvent) -> None: ...


def encode(data: dict[str, Any]) -> str:
    return orjson.dumps(data).decode()


@dataclass(slots=True)
class Run:
    id: str
    conversation_id: str
    user_id: str
    context_type: str
    created_at: float = field(default_factory=time.time)
    status: RunStatus = "running"
    events: list[RunEvent] = field(default_factory=list)
    task: asyncio.Task[None] | None = None
    finished_at: float | None = None
    followers: int = 0
    last_detached_at: float | None = None
    sink: RunEventSink | None = None
    max_events: int = 100_000
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    # --- writing ------------------------------------------------------------------

    def emit(self, event: str, data: dict[str, Any]) -> RunEvent | None:
        """Append an event (no-op once the run is finished, except nothing may follow
        ``message_complete``). Returns the stored event."""
        if self.finished_at is not None:
            return None
        if len(self.events) >= self.max_events and event != TERMINAL_EVENT:
            return None
        ev = RunEvent(seq=len(self.events) + 1, event=event, data=encode(data))
        self.events.append(ev)
        if self.sink is not None:
            self.sink.append(self.id, ev)
        if event == TERMINAL_EVENT:
            self.finished_at = time.time()
            status = data.get("status")
            if status in ("completed", "failed", "cancelled"):
                self.status = status
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        return ev

    @property
    def finished(self) -> bool:
        return self.finished_at is not None

    @property
    def last_seq(self) -> int:
        return len(self.events)

    # --- reading ------------------------------------------------------------------

    async def follow_wire(self, after: int = 0, *, idle: float | None = None, max_bytes: int = 65536) -> AsyncIterator[bytes | None]:
        """Like ``follow`` but yields SSE bytes, joining every event already in the log
        (up to ``max_bytes``) into one write: a fast producer costs one send per batch,
        not one per token."""
        pos = max(0, after)
        while True:
            if pos < len(self.events):
                parts: list[bytes] = []
                size = 0
                done = False
                while pos < len(self.events) and size < max_bytes:
                    ev = self.events[pos]
                    pos += 1
                    frame = ev.wire
                    parts.append(frame)
                    size += len(frame)
                    if ev.event == TERMINAL_EVENT:
                        done = True
                        break
                yield b"".join(parts)
                if done:
                    return
                continue
            if self.finished:
                return
            waiter = self._changed
            if pos < len(self.events):
                continue
            if idle is None:
                await waiter.wait()
            else:
                try:
                    await asyncio.wait_for(waiter.wait(), idle)
                except TimeoutError:
                    yield None

    async def wait_finished(self) -> None:
        while not self.finished:
            await self._changed.wait()


AgentFn = Callable[[Run], Awaitable[None]]


class RunRegistry:
    """Live runs of this process, by id. Finished runs are kept for ``grace_s`` so a
    reconnecting client can replay them from memory; older ones come from the run log."""

    def __init__(self, *, grace_s: float = 600.0, sink: RunEventSink | None = None) -> None:
        self._runs: dict[str, Run] = {}
        self.grace_s = grace_s
        self.sink = sink
        self._closing = False

    def create(self, *, user_id: str, context_type: str, conversation_id: str | None = None) -> Run:
        run = Run(
            id=f"run_{uuid.uuid4().hex}",
            conversation_id=conversation_id or f"conv_{uuid.uuid4().hex}",
            user_id=user_id,
            context_type=context_type,
            sink=self.sink,
        )
        self._runs[run.id] = run
        return run

    def start(self, run: Run, agent: AgentFn) -> asyncio.Task[None]:
        task = asyncio.create_task(agent(run), name=f"agent:{run.id}")
        run.task = task
        task.add_done_callback(lambda t: self._on_done(run, t))
        return task

    def _on_done(self, run: Run, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("agent task crashed", exc_info=task.exception(), extra={"run_id": run.id})
        if not run.finished:
            # The agent always ends with message_complete; this is the last line of defence.
            status = "cancelled" if task.cancelled() else "failed"
            if status == "failed":
                run.emit("error", {"message": "internal error", "code": "internal_error"})
            run.emit(
                TERMINAL_EVENT,
                {
                    "status": status,
                    "run_id": run.id,
                    "conversation_id": run.conversation_id,
                    "turns": 0,
                    "usage": {"input_tokens": 0, "output_tokens": 0},
                },
            )

    def get(self, run_id: str) -> Run | None:
        return self._runs.get(run_id)

    def active(self) -> list[Run]:
        return [r for r in self._runs.values() if not r.finished]

    def count_active(self, user_id: str) -> int:
        return sum(1 for r in self._runs.values() if not r.finished and r.user_id == user_id)

    async def cancel(self, run: Run) -> None:
        """Cancel a run's agent task and wait (bounded) for its terminal event."""
        if run.task is not None and not run.task.done():
            run.task.cancel()
            try:
                await asyncio.wait_for(asyncio.shield(run.task), timeout=5)
            except (asyncio.CancelledError, TimeoutError, Exception):
                pass

    def sweep(self, now: float | None = None) -> int:
        """Forget finished runs past the grace period; cancel abandoned running ones."""
        now = time.time() if now is None else now
        removed = 0
        for run_id, run in list(self._runs.items()):
            if run.finished and run.finished_at is not None and now - run.finished_at > self.grace_s:
                del self._runs[run_id]
                removed += 1
            elif (
                not run.finished
                and run.followers == 0
                and run.last_detached_at is not None
                and now - run.last_detached_at > self.grace_s
                and run.task is not None
            ):
                log.info("cancelling abandoned run", extra={"run_id": run_id})
                run.task.cancel()
        return removed

    async def shutdown(self, deadline_s: float) -> None:
        """Let running runs finish up to ``deadline_s``, then cancel the rest."""
        self._closing = True
        tasks = [r.task for r in self.active() if r.task is not None]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=deadline_s)
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.wait(pending, timeout=5)

    @property
    def closing(self) -> bool:
        return self._closing
