"""A run's events as an SSE response: following a run (here, on another replica, or
finished), the native frames with their ``retry:`` field and heartbeats, the one
``SSEResponse`` every face answers with, and cancelling a chat whose client left.

Apart from the routes because the OpenAI-compatible and AI SDK faces stream through the
same follower and response, only with their own frames.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from app.runs.follow import Batches, Following, follow, follow_here
from app.runs.presence import FollowerPresence
from app.runs.run import Run
from app.server.problems import HTTPProblem
from app.server.sse_response import SSEResponse
from events import Heartbeat
from storage.records import UNFINISHED

if TYPE_CHECKING:
    from app.server.services import Services

log = logging.getLogger("agentchat.http")

RETRY_MS = 2000
RETRY_FIELD = b"retry: %d\n" % RETRY_MS


def heartbeat_frame() -> bytes:
    """The keep-alive: a comment line for proxies and a named event for stall detection,
    in one frame. A comment in a frame of its own would reach clients that dispatch on
    every blank line (``@microsoft/fetch-event-source``) as an empty message."""
    beat = Heartbeat(ts=int(time.time()))
    return b": ping\nevent: %s\ndata: %s\n\n" % (beat.name.encode(), beat.to_json())


def follow_run(
    svc: Services, run_id: str, user_id: str, after: int, *, cancel_on_exit: bool
) -> Awaitable[Following | None]:
    """``app.runs.follow.follow`` with this app's parts: the user's run after ``after``,
    wherever it is (``None``: no such run)."""
    return follow(
        svc.runs,
        svc.run_store,
        svc.remote,
        run_id,
        user_id,
        after,
        idle=svc.settings.heartbeat_s,
        on_leave=_on_leave(svc, cancel_on_exit),
        cancels=cancel_on_exit,
    )


async def refuse_while_draining(svc: Services, following: Following) -> None:
    """While this process shuts down, a client resuming a run it will not follow to the
    end gets what a new run gets: 503 ``shutting_down`` with ``Retry-After``. Those are
    the unfinished runs it does not run itself: one it released at the end of the grace
    (its followers were let go; nothing more comes from here), one another process runs or
    must carry on. Before, the resume answered 200 with an empty body (a stream of nothing
    the client read as a clean end, reconnecting at once: 20 empty 200s in 80 ms until the
    port closed). A run still live here in the grace is streamed (it may end within it),
    and an ended one replayed; a follower that is refused is closed unread."""
    if not svc.runs.closing or following.ended:
        return
    run = svc.runs.get(following.run_id)
    if run is not None:
        if run.finished or not (run.released or run.lost):
            return
    else:
        stored = await svc.run_store.get(following.run_id)
        if stored is None or stored.status not in UNFINISHED:
            return
    await following.batches.aclose()
    raise HTTPProblem(503, "shutting_down", "the server is restarting; resume shortly", {"Retry-After": "2"})


def follow_started(svc: Services, run: Run, *, cancel_on_exit: bool, idle: float | None = None) -> Following:
    """A run this request just started, from its first event; an idle tick after ``idle``
    seconds without one (default: the heartbeat's interval)."""
    return follow_here(
        run,
        0,
        idle=svc.settings.heartbeat_s if idle is None else idle,
        on_leave=_on_leave(svc, cancel_on_exit),
        cancels=cancel_on_exit,
        remote=svc.remote,
    )


def _on_leave(svc: Services, cancel_on_exit: bool) -> Callable[[Run], None]:
    """A follower left a run of this process. When ``cancel_on_exit`` (the client of a
    chat without an ``Idempotency-Key``), the run becomes one cancelled when alone
    (``Run.cancel_when_alone``); then whenever its last follower leaves, whatever kind
    (a reader of ``/events`` too: docs/http-api.md, "Retrying a chat"), the agent is
    cancelled unless a client re-attaches within ``AGENT_CHAT_REATTACH_S`` (a retried
    POST with ``Last-Event-ID``, a resume, a reader), here or on another replica
    (``app.runs.presence``) — scheduled synchronously, because the follower is being
    cancelled and must not await."""

    def left(run: Run) -> None:
        if cancel_on_exit:
            run.cancel_when_alone = True
        if run.cancel_when_alone:
            _client_left(svc, run)

    return left


def _client_left(svc: Services, run: Run) -> None:
    # A stream closed because the server is stopping leaves its run alone: the run
    # finishes (up to the shutdown deadline) into the durable log, and the client
    # resumes it from the next process with Last-Event-ID.
    # A run parked for an approval is no longer this process's: nothing to cancel.
    if not run.finished and not run.parked and run.task is not None and not svc.streams.stopping:
        presence = svc.remote.presence if svc.remote is not None else None
        _cancel_unless_reattached(run, svc.settings.chat_reattach_s, presence)


def watch_clients_elsewhere(svc: Services) -> None:
    """A run of this process whose last client on another replica left is treated as
    one whose last client here left: with nobody attached anywhere, its timer starts
    (when the run is a chat's: its own client left, here or there — ``cancels`` — and
    whatever kind the last one to leave was), and an older timer stands down, as it does
    when a client here comes and goes. Followers this replica lets go as it stops are
    not clients gone (``FollowerPresence.server_stopping``)."""
    presence = svc.remote.presence if svc.remote is not None else None
    if presence is None:
        return
    presence.server_stopping = lambda: svc.streams.stopping

    def left_elsewhere(run_id: str, cancels: bool) -> None:
        run = svc.runs.get(run_id)
        if run is None or run.followers > 0:
            return
        run.last_detached_at = time.time()
        if cancels:
            run.cancel_when_alone = True
        if run.cancel_when_alone:
            _client_left(svc, run)

    def client_left_elsewhere(run_id: str) -> None:
        # ``!`` heard: the run is a chat's whose client left. A follower here holds it:
        # its leaving starts the timer (``_on_leave``). Nobody here: the timer starts
        # now, and waits while a client on a third replica holds the run (``cancel``
        # looks at ``held_until``) - that replica's last ``-`` would start one too
        # (``left_elsewhere``), but a replica that dies says nothing, and its word lapses.
        run = svc.runs.get(run_id)
        if run is not None:
            run.cancel_when_alone = True
            left_elsewhere(run_id, True)

    def joined_elsewhere(run_id: str) -> None:
        run = svc.runs.get(run_id)
        # The run this process executes: not a copy it lost to another or let go.
        if run is not None and not run.lost and not run.suspended and not run.finished:
            log.info("run followed from another replica", extra={"run_id": run_id})

    presence.on_joined(joined_elsewhere)
    presence.on_client_left(client_left_elsewhere)
    presence.on_left(left_elsewhere)


def _cancel_unless_reattached(run: Run, within_s: float, presence: FollowerPresence | None) -> None:
    if run.followers > 0:
        return
    detached_at = run.last_detached_at
    loop = asyncio.get_running_loop()
    told = False  # that a client elsewhere holds the run: said once per departure

    def cancel() -> None:
        nonlocal told
        # Still alone since this detach (a client that came back and left again set a
        # newer time and its own timer), still running: the client is gone for good -
        # unless one reads the run on another replica: then look again when what that
        # replica said lapses (it says it again while its client stays; when the client
        # leaves, ``watch_clients_elsewhere`` starts a timer of its own).
        if run.followers > 0 or run.last_detached_at != detached_at or run.finished or run.task is None:
            return
        held = presence.held_until(run.id) if presence is not None else None
        if held is not None and presence is not None:
            presence.kept += 1
            if not told:
                told = True
                log.info("chat client left; a client reads the run on another replica", extra={"run_id": run.id})
            loop.call_later(max(0.05, held - time.monotonic()), cancel)
            return
        log.info("chat client left; cancelling its run", extra={"run_id": run.id})
        run.task.cancel()

    if within_s <= 0:
        cancel()
    else:
        loop.call_later(within_s, cancel)


async def native_frames(batches: Batches) -> AsyncIterator[bytes]:
    """The native SSE of a run: each event's stored frame (encoded once when the run
    emitted it, the same bytes for every follower), everything committed at once in one
    write, a heartbeat frame on an idle tick; the first write carries ``retry:``."""
    first = True
    async with contextlib.aclosing(batches):  # the follower's ``finally`` runs as the client leaves
        async for batch in batches:
            frame = heartbeat_frame() if batch is None else b"".join(ev.wire for ev in batch)
            if first:
                frame, first = RETRY_FIELD + frame, False
            yield frame


def sse(content: AsyncIterator[bytes], svc: Services, headers: Mapping[str, str] | None = None) -> SSEResponse:
    """Every SSE response of the app (native, OpenAI-compatible, AI SDK): unbuffered through
    proxies, and counted in ``agentchat_open_streams`` while it is being written."""
    return SSEResponse(_frames(content), svc.streams, headers, open_streams=svc.metrics.open_streams)


def _frames(content: AsyncIterator[bytes]) -> AsyncGenerator[bytes, None]:
    if isinstance(content, AsyncGenerator):
        return content  # every face's frames are a generator: no layer of ours per frame
    return _generator(content)


async def _generator(content: AsyncIterator[bytes]) -> AsyncGenerator[bytes, None]:
    async for chunk in content:
        yield chunk
