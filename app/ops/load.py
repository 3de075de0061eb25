"""How loaded this replica is, and whether it should take another run.

A replica that is past what its cores can serve does not fail: every live stream gets
slower together (tokens bunch up, first tokens wait seconds). The event loop's
*scheduling delay* is the honest measure of that: a task asked to wake in 100 ms that
wakes 400 ms later means every callback on the loop — every token of every stream —
waits as long. ``LoopLagMonitor`` measures it with one small task (built with the app,
stopped with it), and ``ReplicaLoad`` turns it, with the live runs and the open model
streams, into a decision admission reads: refuse new runs (503 ``replica_busy`` with
``Retry-After``) while the lag *stays* above ``AGENT_MAX_LOOP_LAG_MS`` — three late wakes
in a row over at least a second, not one garbage collection or a burst of start-up work —
and there are live runs to protect, and accept again once it has stayed below it for as
long. New runs are refused too (reason ``model_pool``) while the replica carries as
many live runs as its model pool has connections (``AGENT_LLM_MAX_CONNECTIONS``, when
the provider streams through that pool): a live run holds at most one model connection
at a time, so a run admitted past that would wait at the pool's gate for another run's
whole answer before its first token — the silent slowdown a 503 is there to replace.
Counted in runs, not in connections in use: a burst of new runs arrives before any of
them has reached the model. The run manager claims that slot atomically
(``app/runs/admission.py``); ``refusal`` answers early for a face with work to do
first. The same figures are on ``/readyz`` (``load``) and ``/metrics``.

``StreamCounter`` wraps the model provider to count the streams open now; it adds one
awaited call per streamed event and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

log = logging.getLogger("agentchat.load")

#: How often the loop's scheduling delay is sampled.
SAMPLE_EVERY_S: Final = 0.1
#: Samples in a row above (below) the threshold before new runs are refused (accepted):
#: "stays above", not one late wake. With the loop late by L each sample takes about
#: ``SAMPLE_EVERY_S + L``, so refusal starts within ~3 × (0.1 s + L).
SUSTAINED_SAMPLES: Final = 3
#: ...and for at least this long: a burst of start-up work or one long ingest step is
#: not overload.
SUSTAINED_S: Final = 1.0
#: Refusal reasons, each a label of ``agentchat_runs_refused_total``.
REASONS: Final = ("live_runs", "loop_lag", "model_pool")


@dataclass(slots=True)
class LoopLagMonitor:
    """Samples how late the event loop runs a timer: ``lag_s`` is the latest delay,
    ``window`` the recent ones (newest last)."""

    every_s: float = SAMPLE_EVERY_S
    lag_s: float = 0.0
    max_lag_s: float = 0.0
    samples: int = 0
    window: deque[float] = field(default_factory=lambda: deque(maxlen=50))
    #: Called after every sample (``ReplicaLoad`` decides on it).
    on_sample: Callable[[float, float], None] | None = None
    _task: asyncio.Task[None] | None = None

    def start(self) -> asyncio.Task[None]:
        self._task = asyncio.create_task(self._run(), name="loop-lag-monitor")
        return self._task

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time()
            await asyncio.sleep(self.every_s)
            self.record(max(0.0, loop.time() - asked - self.every_s))

    def record(self, lag_s: float, now: float | None = None) -> None:
        """One sample, taken at ``now`` (monotonic seconds; the clock by default)."""
        self.lag_s = lag_s
        self.max_lag_s = max(self.max_lag_s, lag_s)
        self.samples += 1
        self.window.append(lag_s)
        if self.on_sample is not None:
            self.on_sample(lag_s, time.monotonic() if now is None else now)

    def recent_max_s(self) -> float:
        return max(self.window, default=0.0)


class _CountedStream:
    """A provider's event stream, counted from its start until it ends or is closed."""

    __slots__ = ("_counter", "_done", "_inner")

    def __init__(self, inner: Any, counter: StreamCounter) -> None:
        self._inner, self._counter, self._done = inner, counter, False
        counter.open += 1

    def __aiter__(self) -> _CountedStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._inner.__anext__()
        except BaseException:
            self._end()
            raise

    async def aclose(self) -> None:
        self._end()
        close = getattr(self._inner, "aclose", None)
        if close is not None:
            await close()

    def _end(self) -> None:
        if not self._done:
            self._done = True
            self._counter.open -= 1


class _CountedCall:
    """A provider's non-streamed call, counted open from its start until it returns."""

    __slots__ = ("_call", "_counter")

    def __init__(self, call: Callable[..., Any], counter: StreamCounter) -> None:
        self._call, self._counter = call, counter

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._counter.started += 1
        self._counter.open += 1
        try:
            return await self._call(*args, **kwargs)
        finally:
            self._counter.open -= 1


class StreamCounter:
    """Wraps a provider: ``open`` is how many of its model streams are open now. Every
    other attribute, read or written, is the provider's own (a wrapper that kept a
    written attribute to itself would silently change nothing)."""

    __slots__ = ("_provider", "open", "started")

    def __init__(self, provider: Any) -> None:
        self._provider = provider
        self.open = 0
        self.started = 0

    def __getattr__(self, name: str) -> Any:  # name, model, health, warm, aclose, ...
        if name == "complete":
            # A non-streamed call (``llm.provider.Completer``, a title) is counted open
            # while it is in flight too; a provider without one still has none here.
            return _CountedCall(getattr(self._provider, name), self)
        return getattr(self._provider, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in StreamCounter.__slots__:
            object.__setattr__(self, name, value)
        else:
            setattr(self._provider, name, value)

    def stream_chat(self, request: Any) -> AsyncIterator[Any]:
        self.started += 1
        return _CountedStream(self._provider.stream_chat(request), self)


@dataclass(slots=True)
class ReplicaLoad:
    """This replica's load and its admission decision (see the module docstring)."""

    live_runs: Callable[[], int]
    #: Live runs at most (``AGENT_MAX_LIVE_RUNS``, enforced by the run manager; 0: none).
    max_live_runs: int = 0
    #: Refuse new runs while the loop lag stays above this (0: never).
    max_loop_lag_s: float = 0.0
    model_streams: Callable[[], int] = lambda: 0
    #: Connections of the model pool in use now and its size (``llm.pool``); a provider
    #: that streams through no pool (the offline answerer) has size 0: no cap.
    model_connections: Callable[[], int] = lambda: 0
    max_model_connections: int = 0
    monitor: LoopLagMonitor = field(default_factory=LoopLagMonitor)
    overloaded: bool = False
    #: Consecutive samples on the other side of the threshold from ``overloaded``, and
    #: when the first of them was taken.
    _streak: int = 0
    _streak_from: float = 0.0
    refused: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    #: When the replica last started refusing (epoch seconds), for ``/readyz``.
    overloaded_since: float | None = None

    def __post_init__(self) -> None:
        self.monitor.on_sample = self._decide

    def _decide(self, lag_s: float, now: float) -> None:
        if self.max_loop_lag_s <= 0:
            return
        flips = (lag_s <= self.max_loop_lag_s) if self.overloaded else (lag_s > self.max_loop_lag_s)
        if not flips:
            self._streak = 0
            return
        if self._streak == 0:
            # The first late sample stands for the lag since the previous sample was asked.
            self._streak_from = now - lag_s - self.monitor.every_s
        self._streak += 1
        if self._streak < SUSTAINED_SAMPLES or now - self._streak_from < SUSTAINED_S:
            return
        self._streak = 0
        self.overloaded = not self.overloaded
        if self.overloaded:
            self.overloaded_since = time.time()
            log.warning(
                "event loop lag stays above the limit; new runs are refused",
                extra={
                    "lag_ms": round(lag_s * 1000, 1),
                    "limit_ms": round(self.max_loop_lag_s * 1000, 1),
                    "live_runs": self.live_runs(),
                },
            )
        else:
            self.overloaded_since = None
            log.info(
                "event loop lag back under the limit; new runs are accepted",
                extra={"lag_ms": round(lag_s * 1000, 1), "live_runs": self.live_runs()},
            )

    def refusal(self, *, new_run: bool = True) -> str | None:
        """Why new work should be refused now (a ``REASONS`` label), or ``None``. The
        live-run caps are the run manager's (it claims the slot atomically); this answers
        for the loop lag — only while there are live runs to protect: a replica with none
        is slow for another reason (start-up, an ingest), and a run started there slows
        no stream — and, for a ``new_run``, early for the model pool's cap (other work,
        an attachment's upload, holds no model connection)."""
        if self.overloaded and self.live_runs() > 0:
            return "loop_lag"
        if new_run and self.model_pool_full():
            return "model_pool"
        return None

    def model_pool_full(self) -> bool:
        """As many live runs as the model pool has connections (see the module docstring)."""
        return 0 < self.max_model_connections <= self.live_runs()

    def accepting(self) -> bool:
        lag_refuses = self.refusal() is not None  # the loop's lag, or the model pool's cap
        return not lag_refuses and not (self.max_live_runs and self.live_runs() >= self.max_live_runs)

    def refused_for(self, reason: str) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1

    def snapshot(self, *, replica: str) -> dict[str, Any]:
        """What ``/readyz`` shows under ``load``."""
        mon = self.monitor
        return {
            "accepting": self.accepting(),
            "replica": replica,
            "live_runs": self.live_runs(),
            "max_live_runs": self.max_live_runs or None,
            "model_streams": self.model_streams(),
            "model_connections": self.model_connections(),
            "max_model_connections": self.max_model_connections or None,
            "loop_lag_ms": round(mon.lag_s * 1000, 1),
            "loop_lag_recent_max_ms": round(mon.recent_max_s() * 1000, 1),
            "max_loop_lag_ms": round(self.max_loop_lag_s * 1000, 1) or None,
            "overloaded_since": self.overloaded_since,
            "refused": dict(self.refused),
        }

    def collector(self) -> LoadCollector:
        return LoadCollector(self)


class LoadCollector:
    """``/metrics``: the load figures, read at scrape time."""

    def __init__(self, load: ReplicaLoad) -> None:
        self._load = load

    def describe(self) -> Iterable[Metric]:
        return ()

    def collect(self) -> Iterable[Metric]:
        load, mon = self._load, self._load.monitor
        yield GaugeMetricFamily("agentchat_live_runs", "Runs executing on this replica now.", value=load.live_runs())
        yield GaugeMetricFamily(
            "agentchat_model_streams", "Model streams this replica holds open now.", value=load.model_streams()
        )
        yield GaugeMetricFamily(
            "agentchat_model_connections",
            "Connections of the model pool in use now (AGENT_LLM_MAX_CONNECTIONS is its size).",
            value=load.model_connections(),
        )
        yield GaugeMetricFamily(
            "agentchat_event_loop_lag_seconds",
            "How late the event loop ran its last timer (scheduling delay; every stream waits as long).",
            value=mon.lag_s,
        )
        yield GaugeMetricFamily(
            "agentchat_event_loop_lag_recent_max_seconds",
            "The largest event-loop lag among the recent samples (about the last 5 s when idle).",
            value=mon.recent_max_s(),
        )
        yield GaugeMetricFamily(
            "agentchat_accepting_runs",
            "1 when this replica admits new runs, 0 while it refuses them (overloaded, at its live-run cap "
            "or with every model connection in use).",
            value=1 if load.accepting() else 0,
        )
        refused = CounterMetricFamily(
            "agentchat_runs_refused",
            "New runs refused with 503 replica_busy, by reason (live_runs: AGENT_MAX_LIVE_RUNS; "
            "loop_lag: the event loop stayed later than AGENT_MAX_LOOP_LAG_MS; "
            "model_pool: as many live runs as AGENT_LLM_MAX_CONNECTIONS).",
            labels=["reason"],
        )
        for reason in REASONS:
            refused.add_metric([reason], load.refused.get(reason, 0))
        yield refused


def attach(load: ReplicaLoad, registry: CollectorRegistry) -> None:
    registry.register(load.collector())


__all__ = ["LoopLagMonitor", "ReplicaLoad", "StreamCounter", "attach"]
