"""How long the task serving a request may wait for the database, per wait.

A pooled connection's wait is bounded by the pool's timeout, but a statement on a
connection already open has no client-side deadline: a PostgreSQL frozen (SIGSTOP, a
stuck disk, a black-holed network: TCP stays up, keepalives do not help) kept
``GET /v1/agent/conversations`` waiting for the whole freeze, and ``/readyz`` 11 s
(its ``wait_for`` cancelled psycopg, which then tried to cancel the query on the frozen
server for 5 s and waited 5 s more). An engine that can enforce a deadline on its
statements (``storage/postgres/statement_deadline.py``) asks ``wait_deadline()`` here.

The scope is set for one task only: the task serving an HTTP request (the app's
``StorageScope`` middleware), ``bound(wait_s)``. A task created from it (a run, a
background job) inherits the value but not the deadline — ``wait_deadline()`` answers
only in the task that opened the scope — so acknowledged work (a run's events, its
reads) keeps its own retry rules and is never cut by a request's budget. A request that
legitimately runs long statements (a bulk ingest over HTTP, a bucket's deletion) opens
``unbounded()`` around them. The value is per task and per request, not shared state.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class _Scope:
    #: The task whose waits are bounded (the one serving the request).
    owner: asyncio.Task[object] | None
    #: Each wait for the database at most this long (``AGENT_DB_POOL_TIMEOUT_S``) ...
    wait_s: float
    #: ... and none past this (``time.monotonic()``): a request's one budget, when set.
    deadline: float | None = None


_SCOPE: ContextVar[_Scope | None] = ContextVar("agentchat_storage_scope", default=None)


@contextlib.contextmanager
def bound(wait_s: float) -> Iterator[None]:
    """Bound every wait for the database made by the current task to ``wait_s`` each."""
    token = _SCOPE.set(_Scope(_current_task(), wait_s))
    try:
        yield
    finally:
        _SCOPE.reset(token)


@contextlib.contextmanager
def unbounded() -> Iterator[None]:
    """No request deadline here: statements that may legitimately run long (a bulk
    ingest, deleting a bucket) wait as long as the database's own settings let them."""
    token = _SCOPE.set(None)
    try:
        yield
    finally:
        _SCOPE.reset(token)


def limit(deadline: float | None) -> None:
    """No wait past ``deadline`` (``time.monotonic()``; ``None`` lifts it) for the rest
    of the current scope: a request's one storage budget (``app/server/storage_budget.py``)."""
    found = _SCOPE.get()
    if found is not None and found.owner is _current_task():
        _SCOPE.set(_Scope(found.owner, found.wait_s, deadline))


def wait_deadline() -> float | None:
    """When a wait for the database starting now must have been answered
    (``time.monotonic()``); ``None`` outside a request's own task."""
    found = _SCOPE.get()
    if found is None or found.owner is not _current_task():
        return None
    ends = time.monotonic() + found.wait_s
    return ends if found.deadline is None else min(ends, found.deadline)


def _current_task() -> asyncio.Task[object] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running loop
        return None


__all__ = ["bound", "limit", "unbounded", "wait_deadline"]
