"""A chat's stored history cut back before a run replaces a turn (a regenerated answer,
an edited question): the admission step the AI SDK face (and the native chat's
``replace_from``) take before the run is started.

Why a step of its own: the conversation's history is what the model is given, so a
client that shows one branch of a chat (it dropped an answer to regenerate it, or
edited an earlier question) must have the server's history cut to that branch, or the
model answers a conversation nobody sees. The cut is refused while a run of the chat
has not ended (409: that run would append after the cut), another user's chat reads as
none (404), a run the client names that is no run of the chat is a 400 naming it. It
happens after the request's own checks and the run cap's read (a refusal there leaves
the history whole); a cut whose run is then refused is harmless to retry: cutting after
the same kept turn again takes nothing more.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.runs.records import could_be_run_id
from app.server import run_start, storage_budget
from app.server.problems import HTTPProblem
from storage.errors import ConversationBusy, StorageUnavailable, UnknownRun
from storage.history_records import HistoryCut

if TYPE_CHECKING:
    from app.server.services import Services

WHAT = "the service cannot store conversations right now"


async def cut_history(
    svc: Services, user_id: str, conversation_id: str, run_id: str | None, *, keep_run: bool, named: str
) -> HistoryCut:
    """Cut the user's conversation back (``HistoryStore.cut_history``) or refuse:
    404 no such conversation of this user, 400 ``named`` is no turn of it, 409 busy."""
    if run_id is not None and not could_be_run_id(run_id):  # no run's id: never sent to the store
        raise HTTPProblem(400, "invalid_field", f"{named!r} names no answer (run) of this chat")
    await run_start.check_run_limit_before_write(svc, user_id, WHAT)
    try:
        cut = await svc.storage.history.cut_history(
            user_id, conversation_id, run_id, keep_run=keep_run, deadline=storage_budget.deadline()
        )
    except ConversationBusy:
        raise HTTPProblem(
            409,
            "conversation_busy",
            "a run of this conversation is still in progress; wait for it to end (or cancel it) before "
            "regenerating an answer or editing a message",
        ) from None
    except UnknownRun:
        raise HTTPProblem(400, "invalid_field", f"{named!r} names no answer (run) of this chat") from None
    except StorageUnavailable:
        svc.metrics.admission.storage_refused("history_cut")()
        raise storage_budget.unavailable(WHAT) from None
    if cut is None:
        raise HTTPProblem(404, "not_found", "no such conversation: nothing to regenerate or edit")
    return cut
