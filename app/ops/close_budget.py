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
* uvicorn's graceful shutdown: open connections may finish (``app/cli/serve.py``);
* the app's background tasks after their cancel (``app/factory.py``);
* then the services, in the reverse order they were made (``app/wiring.py``'s exit
  stack): the conversation titles being written (``app/history.py``); the embedder's
  first answer and the probing again of one down at start-up, together
  (``app/ops/embedder_check.py``); the MCP connections, closed together
  (``app/mcp_room.py``), then the wait for those whose supervisor had to be cancelled
  (the MCP library's shielded clean-up can take ~4 s of its own); the knowledge rooms'
  tasks — the sample knowledge base's ingest, the knowledge base's and the keywords'
  back-fills — cancelled together (``app/rooms.py``); ``/readyz``'s background count
  of the knowledge base after its cancel (``knowledge/kb_counts_memo.py``, given its
  bound by ``app/rooms.py``); the knowledge base's re-embedding
  after its stop (``knowledge/backfill.py``, given its bound by ``app/rooms.py``), then,
  on PostgreSQL, the start's count of unreadable vectors after its cancel
  (``knowledge/dense.py``, likewise); the
  spans' flush to the OpenTelemetry collector (``app/ops/tracing.py``); the background
  jobs' leader and its jobs (``app/ops/leader.py``);
* the storage: the sibling feed's readers (``storage/sqlite/worker_feed.py``), then the
  database's close, which commits what is queued within the writer's own bound
  (``storage/sqlite/database.py``; PostgreSQL's close — a graph build cancelled on the
  server, the pool's close, 5 s each — fits in the same two steps);
* the interpreter's exit and the short unbounded work between those waits (store
  writes of the drain, clients closed, tasks cancelled at once): ``EXIT_S``.

This module imports only ``storage.close_bounds`` (no engine), so the supervisor that
reads the budget stays small: the app's own bounds are named here and imported by the
modules that wait on them; the storage's are named beside the storage.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from storage.close_bounds import DATABASE_CLOSE_S, FEED_CLOSE_S

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
#: How long the conversation titles still being written may take to end once cancelled.
TITLES_STOP_S = 5.0
#: How long the embedder's first embedding (``/readyz``'s check) and the probing again of an
#: embedder down at start-up (``app/ops/embedder_recovery.py``) may take to end once cancelled, together.
EMBEDDER_CHECK_STOP_S = 5.0
#: How long each MCP connection's close may take (its supervisor asked to stop, then
#: cancelled; a stdio server's process ended): all close at once.
MCP_CLOSE_S = 5.0
#: How long an MCP connection's supervisor, cancelled when it did not stop within
#: ``MCP_CLOSE_S``, may take to end (the library's shielded clean-up): all at once.
MCP_CANCEL_S = 5.0
#: How long the knowledge rooms' tasks (the sample knowledge base's ingest, the knowledge
#: base's and the keywords' back-fills) may take to end once cancelled, together.
KB_TASKS_STOP_S = 5.0
#: How long the close waits for the spans' flush to the OpenTelemetry collector.
TRACING_FLUSH_S = 10.0
#: How long ``/readyz``'s background count of the knowledge base (a sum over its documents)
#: may take to end once cancelled (``KBConfig.readyz_count_stop_s``).
KB_READYZ_COUNT_STOP_S = 5.0
#: How long the knowledge base's re-embedding may take to stop (``KBConfig.reembed_stop_s``).
KB_REEMBED_STOP_S = 15.0
#: How long the start's count of unreadable stored vectors (a scan in PostgreSQL) may
#: take to end once cancelled (``KBConfig.unreadable_count_stop_s``).
KB_UNREADABLE_COUNT_STOP_S = 5.0
#: How long the background jobs' leader waits for its campaign and jobs once cancelled.
LEADER_STOP_S = 15.0
#: The interpreter's exit and the short work between the bounded waits.
EXIT_S = 5.0

#: Each bounded step of the close, by what it waits for (module docstring), in order.
CLOSE_STEPS_S: Mapping[str, float] = MappingProxyType(
    {
        "runs cancelled by the drain": INTERRUPTED_RUNS_S,
        "open connections": SERVER_CLOSE_S,
        "background tasks": BACKGROUND_STOP_S,
        "conversation titles": TITLES_STOP_S,
        "embedder check": EMBEDDER_CHECK_STOP_S,
        "MCP connections": MCP_CLOSE_S,
        "MCP connections' cancel": MCP_CANCEL_S,
        "knowledge rooms' tasks": KB_TASKS_STOP_S,
        "knowledge-base /readyz count": KB_READYZ_COUNT_STOP_S,
        "knowledge-base re-embedding": KB_REEMBED_STOP_S,
        "knowledge-base unreadable-vector count": KB_UNREADABLE_COUNT_STOP_S,
        "spans' flush": TRACING_FLUSH_S,
        "background jobs' leader": LEADER_STOP_S,
        "sibling feed readers": FEED_CLOSE_S,
        "database close": DATABASE_CLOSE_S,
        "interpreter exit": EXIT_S,
    }
)
#: How long a serving process may take, after its drain, to close: every step at its bound.
CLOSE_BUDGET_S: float = sum(CLOSE_STEPS_S.values())

__all__ = [
    "BACKGROUND_STOP_S",
    "CLOSE_BUDGET_S",
    "CLOSE_STEPS_S",
    "EMBEDDER_CHECK_STOP_S",
    "EXIT_S",
    "INTERRUPTED_RUNS_S",
    "KB_READYZ_COUNT_STOP_S",
    "KB_REEMBED_STOP_S",
    "KB_TASKS_STOP_S",
    "KB_UNREADABLE_COUNT_STOP_S",
    "LEADER_STOP_S",
    "MCP_CANCEL_S",
    "MCP_CLOSE_S",
    "SERVER_CLOSE_S",
    "TITLES_STOP_S",
    "TRACING_FLUSH_S",
]
