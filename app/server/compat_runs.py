"""What the ecosystem faces (OpenAI-compatible, AI SDK UI stream) share: admission, the
conversation a client's transcript continues, and reading a run's events.

These faces never run the agent themselves. A request is admitted by the same function as
a native one (``app.server.request_admission.admit``: auth, rate limit, body limits; then the run
limit), becomes a ``ChatInput`` submitted to the same run manager, and its stream is the
run's own event log — read through the one follower every face uses (``app.runs.follow``)
as typed events, which the face encodes. So a run started here is durable, resumable and
cancellable exactly like one started on ``/v1/agent/runs``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from app.agent.answer_stream import normalized
from app.runs.follow import Batches, Followed
from app.server import run_start, run_streams, storage_budget
from llm.types import Message
from storage.errors import StorageUnavailable
from storage.records import StoredRun

if TYPE_CHECKING:
    from app.server.services import Services


class AnswerText:
    """The text a client has been shown so far, and what the run still owes it.

    The native stream's ``content_chunk`` text is the answer while it is written; a model
    may instead (or as well) put the whole answer into ``generate_response``, whose
    ``response`` event carries it. A client that only shows text must see that answer
    once: ``owed`` returns it unless it is already contained in what was streamed.
    """

    __slots__ = ("_norm", "_parts", "_turn_break")

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._norm = ""
        self._turn_break = False

    @property
    def text(self) -> str:
        return "".join(self._parts)

    def new_turn(self) -> None:
        self._turn_break = bool(self._parts)

    def chunk(self, text: str) -> str:
        """The delta to send for a streamed chunk (a paragraph break opens a new turn's text)."""
        if not text:
            return ""
        if self._turn_break:
            self._turn_break = False
            if not self.text.endswith("\n\n"):
                text = "\n\n" + text
        self._parts.append(text)
        self._norm = ""
        return text

    def owed(self, extra: str) -> str:
        """The delta that adds ``extra`` unless the client already has it ('' if it does)."""
        want = normalized(extra)
        if not want:
            return ""
        if not self._norm:
            self._norm = normalized(self.text)
        if want in self._norm:
            return ""
        return self.chunk(extra if not self._parts else "\n\n" + extra.lstrip())


# --- reading a run's events ---------------------------------------------------------------


async def logged_events(svc: Services, run_id: str, user_id: str) -> list[Followed]:
    """Every event of the user's ended run (for checks, not for streaming)."""
    following = await run_streams.follow_run(svc, run_id, user_id, 0, cancel_on_exit=False)
    if following is None:
        return []
    out: list[Followed] = []
    async with contextlib.aclosing(following.batches) as batches:
        async for batch in batches:
            if batch is not None:
                out.extend(batch)
    return out


async def active_run(svc: Services, user_id: str, conversation_id: str, *, within_s: float) -> str | None:
    """The conversation's newest run that is live here; else one that has not ended in
    the store (run by another process, or parked ``waiting_approval``); else one that
    ended here less than ``within_s`` ago (this process remembers it).

    A parked run is in no process's memory (it left it when it parked) but it is the
    conversation's current turn: a client that reloads while it waits for a decision must
    be shown the approval request again, so the store is asked before a run remembered
    as ended here (an earlier turn, which the parked one came after)."""
    now = time.time()
    ended_here: str | None = None
    for run in svc.runs.recent(user_id):
        if run.conversation_id != conversation_id:
            continue
        if not run.finished:
            return run.id
        if run.finished_at is not None and now - run.finished_at <= within_s:
            ended_here = run.id
        break
    unfinished: list[StoredRun] = [
        r for r in await svc.run_store.unfinished() if r.conversation_id == conversation_id and r.user_id == user_id
    ]
    if unfinished:
        return unfinished[-1].id
    # With none unfinished, the conversation's runs that have not ended are parked ones
    # (a conversation has one at a time: a new run is refused while one waits).
    parked = await svc.storage.history.unfinished_runs(user_id, conversation_id)
    return parked[0] if parked else ended_here


# --- the conversation a transcript continues -------------------------------------------------


async def import_history(svc: Services, conversation_id: str, user_id: str, messages: Sequence[Message]) -> None:
    """Store a client's earlier turns in a conversation that has none yet, so the run's
    history is what the client shows. ``append`` creates the user's conversation in its
    own transaction; with nothing to store, the run's creation does.

    The import is written before the run's admission transaction, so a user at the run
    cap is refused here, before it (``run_start.check_run_limit``): a refusal leaves nothing
    behind. The faces import after the request's own checks (its context's buckets, the
    replica's load), so they answer in the same order as the native faces — the
    request's own 4xx first, then 429 — and read the user's runs only when they import."""
    if not messages:
        return
    what = "the service cannot store conversations right now"
    await run_start.check_run_limit_before_write(svc, user_id, what)
    try:
        await svc.conversations.append(conversation_id, user_id, messages, deadline=storage_budget.deadline())
    except StorageUnavailable:
        svc.metrics.admission.storage_refused("transcript_import")()
        raise storage_budget.unavailable(what) from None


async def copy_history(svc: Services, source: str, target: str, user_id: str) -> None:
    """Start ``target`` with ``source``'s stored messages (tool calls and results included)."""
    stored = await storage_budget.bounded(
        "the service cannot read conversations right now",
        svc.conversations.load(source, user_id),
        refused=svc.metrics.admission.storage_refused("conversation"),
    )
    await import_history(svc, target, user_id, stored)


async def has_conversation(svc: Services, conversation_id: str, user_id: str) -> bool:
    """Whether the user has a conversation of that id. Ids are a namespace per user, so
    another user's conversation of the same id is neither seen nor in the way. Before
    a run is acknowledged, within the request's storage budget (``storage_budget.bounded``)."""
    return await storage_budget.bounded(
        "the service cannot read conversations right now",
        svc.conversations.exists(conversation_id, user_id),
        refused=svc.metrics.admission.storage_refused("conversation"),
    )


#: Events translated per write when a burst of them was committed at once.
SLICE = 64


async def translated(source: Batches, encode: Callable[[Followed], Iterable[bytes]]) -> AsyncIterator[bytes]:
    """A compatible face's body: each followed event through the face's ``encode``, a
    burst of committed events sent in slices of ``SLICE`` (not all at its end), and a
    comment line for each idle beat of the follower. The follower is closed as the
    client leaves (its ``finally`` releases the run)."""
    async with contextlib.aclosing(source) as batches:
        async for batch in batches:
            if batch is None:
                yield b": ping\n\n"
                continue
            out: list[bytes] = []
            for i, item in enumerate(batch, 1):
                out.extend(encode(item))
                if i % SLICE == 0:
                    yield b"".join(out)
                    out.clear()
            if out:
                yield b"".join(out)
