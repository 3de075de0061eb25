"""A non-streamed OpenAI completion (``stream: false``): the run's events collected into
one answer, and the database asked whether it still answers while none come.

Why the asking: a non-streamed client has nothing to show and no way to resume. When the
database went away mid-run, the run was let go and its follower kept for the outage (as
a stream's is, with heartbeats), so the request answered only once the database was back:
minutes of silence, and an ``openai`` SDK client waits 600 s, then sends the same request
again. Now, after ``AGENT_DB_POOL_TIMEOUT_S`` without an event, the run is read from the
store within what the setting allows a request; a store that does not answer ends the
request with 503 ``storage_unavailable`` and ``Retry-After``, naming the run. The run
is not stopped: it rides out the outage in its durable log (carried on once the database
is back) and its answer can be read at ``/v1/agent/runs/{id}/events``.

The 503 also says ``x-should-retry: false``: the ``openai`` SDKs (Python and JS) retry a
503 by themselves, twice, after ``Retry-After``, and the same transcript sent again is
another run (a regeneration, ``openai_compat``) while this one is carried on - the
question asked twice, tools included, whenever the database was back within those
retries. The SDKs obey that header before the status.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from app.runs.run import Run
from app.server import run_streams, storage_budget
from app.server.openai_chunks import Translator
from storage.errors import StorageUnavailable

if TYPE_CHECKING:
    from app.server.services import Services

#: ``Retry-After`` of the 503: as the admission steps' (``storage_budget.unavailable``).
RETRY_AFTER_S = 5
#: The 503's headers besides the run's: when the service may answer again, and to the
#: ``openai`` SDKs, that sending the request again would start a second run.
AWAY_HEADERS: Mapping[str, str] = MappingProxyType({"Retry-After": str(RETRY_AFTER_S), "x-should-retry": "false"})


class DatabaseAway(Exception):
    """The database did not answer a non-streamed completion's check in time."""


async def collect(svc: Services, run: Run, tr: Translator) -> None:
    """Feed ``tr`` every event of ``run`` to its end (or until its follower ends); raise
    ``DatabaseAway`` when, after ``AGENT_DB_POOL_TIMEOUT_S`` without an event, the store
    does not answer within that time either."""
    wait_s = svc.settings.db_pool_timeout_s
    # The request's admission budget (``storage_budget``) is spent on the run's start;
    # the wait for its answer is not admission, and a check below has its own.
    storage_budget.acknowledged()
    following = run_streams.follow_started(svc, run, cancel_on_exit=False, idle=wait_s)
    async with contextlib.aclosing(following.batches) as batches:
        async for batch in batches:
            if batch is None:
                await _answers(svc, run.id, wait_s)
                continue
            for item in batch:
                tr.feed(item)


async def _answers(svc: Services, run_id: str, wait_s: float) -> None:
    """The run read from the store within ``wait_s`` (the engine's own deadline, as a
    request's: ``storage_budget``; ``BACKSTOP_GRACE_S`` later, cancelled here), else
    ``DatabaseAway``. A run waiting on a slow model passes: the store answers."""
    storage_budget.start(wait_s)
    try:
        async with asyncio.timeout(wait_s + storage_budget.BACKSTOP_GRACE_S):
            await svc.run_store.get(run_id)
    except (TimeoutError, StorageUnavailable) as exc:
        raise DatabaseAway(str(exc) or type(exc).__name__) from None
    finally:
        storage_budget.acknowledged()


def away_message(run_id: str) -> str:
    """What the 503 says: the run was not stopped, and where its answer will be (its
    events: ``GET /v1/agent/runs/{id}`` has its status, not its answer)."""
    return (
        "the service cannot reach its database right now; the run was not stopped and its answer is stored once "
        f"the database is back: read it at GET /v1/agent/runs/{run_id}/events (a retry starts another run)"
    )


__all__ = ["AWAY_HEADERS", "RETRY_AFTER_S", "DatabaseAway", "away_message", "collect"]
