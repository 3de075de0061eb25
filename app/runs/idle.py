"""A follower's heartbeat deadline, kept without a timer per token.

A follower of a live run yields an idle tick (the SSE heartbeat) after ``idle`` seconds
with no event. ``asyncio.wait_for`` per wait did that by wrapping every wait in a new
task on Python 3.11 — once per token for every follower. Here a wait only moves the
deadline (one float); one timer per follower, re-armed lazily when it fires early (events
kept coming), calls ``wake`` (the run's ``notify``: every waiter of the run wakes) once
the deadline has passed; the follower whose deadline it was sees ``expired()`` and yields
its tick, the others find nothing new and wait again."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class IdleClock:
    __slots__ = ("deadline", "idle", "loop", "timer", "wake")

    def __init__(self, idle: float, wake: Callable[[], None]) -> None:
        self.idle, self.wake = idle, wake
        self.loop = asyncio.get_running_loop()
        self.deadline = 0.0
        self.timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        """A wait begins: the tick is due ``idle`` seconds from now."""
        self.deadline = self.loop.time() + self.idle
        if self.timer is None:
            self.timer = self.loop.call_at(self.deadline, self._fire)

    def _fire(self) -> None:
        if self.loop.time() < self.deadline:
            self.timer = self.loop.call_at(self.deadline, self._fire)
            return
        self.timer = None
        self.wake()

    def expired(self) -> bool:
        return self.loop.time() >= self.deadline

    def close(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
