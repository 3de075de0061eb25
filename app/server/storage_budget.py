"""One storage budget per request, until its client is acknowledged.

A request that has not handed its client a run id yet — the shared rate-limit count,
the buckets its context names looked up, a client's transcript imported (the
conversation looked up, the user's runs counted first), the run's admission
transaction — waits for the database at most ``AGENT_DB_POOL_TIMEOUT_S`` in total,
across all those steps, and is then answered 503 ``storage_unavailable`` with
``Retry-After``. Without it each step retried for ``AGENT_DB_WRITE_RETRY_S`` (a 503
~24 s after PostgreSQL went away, with a 1 s pool timeout), and a read waited as long
as the database kept it (a locked table: the server's ``lock_timeout``): a silent
slowdown, where an outage must be a prompt 503. The write retry stays what it is for:
work already acknowledged (a run's events) rides out a short outage, so nothing
acknowledged is lost.

The deadline travels in a ``ContextVar`` set by ``request_admission.admit`` and read
only by this package's admission steps (``run_start``, ``compat_runs``,
``context_scope``, ``openai_compat``), which hand it to the stores explicitly or bound
their reads with it (``bounded``): a run's own task inherits the value but nothing in
it reads it, so acknowledged work never meets the request's budget. Its value is per
request (each request runs in a context of its own), not shared state.

Every request, admitted or not, also bounds each of its own waits for the database
(``StorageScope``, innermost middleware → ``storage/request_scope.py``): at most
``AGENT_DB_POOL_TIMEOUT_S``, and never past this budget once it is open. On PostgreSQL
that deadline is enforced on the connection itself — a statement sent to a frozen
server is cut there — so ``bounded`` only backstops it, a little later.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from typing import TypeVar

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.server.problems import HTTPProblem
from storage import request_scope
from storage.errors import StorageUnavailable

T = TypeVar("T")
#: How far past the budget ``bounded`` cancels a step an engine did not end itself.
BACKSTOP_GRACE_S = 0.5

_DEADLINE: ContextVar[float | None] = ContextVar("agentchat_storage_deadline", default=None)


def start(budget_s: float) -> float:
    """Open this request's budget now: its deadline (``time.monotonic()``)."""
    deadline = time.monotonic() + budget_s
    _DEADLINE.set(deadline)
    request_scope.limit(deadline)  # the engine's own deadline on each wait, too
    return deadline


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Time spent here is not the database's (reading the client's body): the deadline
    moves on by as much, so a slow upload never turns into a ``storage_unavailable``."""
    began = time.monotonic()
    try:
        yield
    finally:
        found = _DEADLINE.get()
        if found is not None:
            moved = found + (time.monotonic() - began)
            _DEADLINE.set(moved)
            request_scope.limit(moved)  # the same deadline the engine enforces


def acknowledged() -> None:
    """The client has the response's head (a run's id, its stream begun): the request's one
    budget was for admission and is over. Later waits of the request (a stream's pages
    of a stored run, a follower's catch-up read) keep only the per-wait bound of
    ``StorageScope``; before, the spent budget refused them all."""
    if _DEADLINE.get() is not None:
        _DEADLINE.set(None)
        request_scope.limit(None)


def deadline() -> float | None:
    """This request's storage deadline; ``None`` outside an admitted request."""
    return _DEADLINE.get()


def spent() -> bool:
    found = _DEADLINE.get()
    return found is not None and time.monotonic() >= found


def unavailable(what: str) -> HTTPProblem:
    """The 503 every admission step answers when the database is away past the budget."""
    return HTTPProblem(503, "storage_unavailable", f"{what}; retry shortly", {"Retry-After": "5"})


async def bounded(
    what: str, step: Awaitable[T], *, refused: Callable[[], None], on_cut: Callable[[], None] | None = None
) -> T:
    """A read of an admission step (the context's buckets looked up, the user's runs
    counted before an import) within what is left of the request's budget: past it, or
    when the store says it is away, 503 ``storage_unavailable`` (``unavailable(what)``).
    Such reads take no deadline of their own — a pooled connection's wait is the pool's
    whole timeout, a connection that hangs has none — so the budget bounds the wait
    here, where the request is refused anyway; the read abandoned is a read only.
    ``refused`` counts each such 503 (``agentchat_admission_storage_refusals_total``,
    by check): nothing else does. ``on_cut`` hears of a read this backstop cancelled:
    the store never saw it fail, so whatever counts the store's failures would not count
    that refusal.
    Outside an admitted request the step runs unbounded."""
    found = _DEADLINE.get()
    # A backstop a little past the budget: an engine that bounds its own statements
    # (PostgreSQL: ``storage/request_scope.py``) answers at the deadline itself, and
    # must do so before this cancels the read — a psycopg read cancelled mid-statement
    # asks the server to cancel it, which a frozen server never answers (10 s lost).
    backstop = None if found is None else asyncio.timeout(max(0.0, found - time.monotonic()) + BACKSTOP_GRACE_S)
    try:
        if backstop is None:
            return await step
        async with backstop:
            return await step
    except (TimeoutError, StorageUnavailable):
        refused()
        if backstop is not None and backstop.expired() and on_cut is not None:
            on_cut()
        raise unavailable(what) from None


class StorageScope:
    """Every wait for the database of the task serving a request at most ``wait_s``
    (``AGENT_DB_POOL_TIMEOUT_S``): a statement on a frozen PostgreSQL is answered 503
    ``storage_unavailable`` then, not after the freeze (``storage/request_scope.py``).
    Pure ASGI, so the route runs in this very task; what it starts (a run, a job) does
    not inherit the deadline."""

    def __init__(self, app: ASGIApp, wait_s: float) -> None:
        self.app = app
        self.wait_s = wait_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sent(message: Message) -> None:
            if message["type"] == "http.response.start":
                acknowledged()
            await send(message)

        with request_scope.bound(self.wait_s):
            await self.app(scope, receive, sent)
