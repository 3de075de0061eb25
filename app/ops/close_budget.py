"""How long a serving process may take to close after its drain: the sum of its bounded steps.

Why one place: ``serve --workers``' supervisor SIGKILLs a worker still running at the
drain (``--grace``) plus its close budget (``app/cli/workers.py``). That budget was a
second number (30 s) beside the bounds the close's steps really have, and those add up
to more: a worker whose close was still within its own bounds was killed half-way
(its SQLite close among the steps cut). Here each bound the close waits on is named
once, where it is defined, and ``CLOSE_BUDGET_S`` is their sum: the supervisor's margin
is derived from it, so a step's bound that grows grows the margin with it.

The steps run one after another (worst cases, each ended by its own bound):

* the drain's wait for the runs it cancelled after the grace (``app/runs/drain.py``);
* uvicorn's graceful shutdown: open connections may finish (``app/cli/commands.py``);
* the app's background tasks after their cancel (``app/factory.py``);
* the knowledge base's re-embedding after its stop (``knowledge/backfill.py``);
* the background jobs' leader and its jobs (``app/ops/leader.py``);
* the storage: the sibling feed's readers (``storage/sqlite/worker_feed.py``), then the
  database's close, which commits what is queued within the writer's own bound
  (``storage/sqlite/database.py``: ``CLOSE_AFTER_CANCEL_S`` is past it; PostgreSQL's
  close — a graph build cancelled on the server, the pool's close, 5 s each — fits in
  the same two steps);
* the interpreter's exit and the short unbounded work between those waits (store
  writes of the drain, clients closed): ``EXIT_S``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from app.ops.leader import STOP_S as LEADER_STOP_S
from knowledge.backfill import STOP_S as BACKFILL_STOP_S
from storage.sqlite.database import CLOSE_AFTER_CANCEL_S
from storage.sqlite.worker_feed import CLOSE_S as FEED_CLOSE_S

#: After the grace, how long the drain waits for the runs it cancelled (released as
#: interrupted) before it goes on without them.
INTERRUPTED_RUNS_S = 10.0
#: uvicorn's ``timeout_graceful_shutdown``: how long open connections may take to finish
#: once the server stops, before their tasks are cancelled.
SERVER_CLOSE_S = 5  # uvicorn's setting is an int
#: How long a cancelled background task may take to end at shutdown before the process
#: goes on without it (``app/ops/stopping.py``): the periodic jobs end at once when
#: cancelled; one that does not would otherwise keep a SIGTERM'd process alive for ever.
BACKGROUND_STOP_S = 15.0
#: The interpreter's exit and the short work between the bounded waits.
EXIT_S = 5.0

#: Each bounded step of the close, by what it waits for (module docstring).
CLOSE_STEPS_S: Mapping[str, float] = MappingProxyType(
    {
        "runs cancelled by the drain": INTERRUPTED_RUNS_S,
        "open connections": SERVER_CLOSE_S,
        "background tasks": BACKGROUND_STOP_S,
        "knowledge-base re-embedding": BACKFILL_STOP_S,
        "background jobs' leader": LEADER_STOP_S,
        "sibling feed readers": FEED_CLOSE_S,
        "database close": CLOSE_AFTER_CANCEL_S,
        "interpreter exit": EXIT_S,
    }
)
#: How long a serving process may take, after its drain, to close: every step at its bound.
CLOSE_BUDGET_S: float = sum(CLOSE_STEPS_S.values())

__all__ = [
    "BACKGROUND_STOP_S",
    "CLOSE_BUDGET_S",
    "CLOSE_STEPS_S",
    "EXIT_S",
    "INTERRUPTED_RUNS_S",
    "SERVER_CLOSE_S",
]
